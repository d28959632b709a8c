// Spike (not the product): compose DOT from report_data.py's drawing description for any
// expansion state, lay it out with viz-js and time each step. Loaded by report_layout.py.
"use strict";

// What the page derives once from the data: children, fold lookups, ids for edges.
function prepareDrawing(D) {
  const n = D.ids.length;
  const children = Array.from({length: n}, () => []);
  D.parent.forEach((p, i) => { if (p >= 0) children[p].push(i); });
  const isOut = new Uint8Array(n);
  D.out.forEach((i) => { isOut[i] = 1; });
  const groupRunOf = new Map();   // a call in the first repeat of a group run -> run
  const leaderRunOf = new Map();  // the single call of a period-1 run -> run
  D.runs.forEach((run, r) => {
    if (run.group) run.calls[0].forEach((c) => groupRunOf.set(c, r));
    else leaderRunOf.set(run.calls[0][0], r);
  });
  const xid = D.frag.map((f) => /id="n-([^"]*)"/.exec(f)[1]);
  return {D, n, children, isOut, groupRunOf, leaderRunOf, xid};
}

// state: {open: Set of layer indices, unfolded: Set of run indices, tensors, params, ops,
// rankdir}. Returns the DOT text and what it drew.
function composeDot(P, state) {
  const {D, n, isOut} = P;
  const folded = (r) => r !== null && r !== undefined && !state.unfolded.has(r);
  const shown = {L: true, T: state.tensors, M: state.tensors, P: state.params, O: state.ops};
  const asBox = (l) => !state.open.has(l) || !D.needs[l] || (D.needs[l] === 1 && !state.ops);
  const canonical = (i) => {
    for (let f = D.fold_to[i]; f && folded(f[1]); f = D.fold_to[i]) i = f[0];
    return i;
  };
  const visible = (i) => {
    if (i in D.dropped && folded(D.dropped[i])) return -1;
    i = canonical(i);
    if (isOut[i]) return state.tensors ? i : -1;
    let top = -1;
    for (let a = D.parent[i]; a >= 0; a = D.parent[a]) if (!state.open.has(a)) top = a;
    if (top >= 0) return top;
    if (D.kind[i] === "L") return i;
    const p = D.parent[i];
    if (p >= 0 && asBox(p)) return p;
    return shown[D.kind[i]] ? i : -1;
  };
  // place: nodes in seq order, clusters nested as the module tree (a group between)
  const nodes = [], clusters = [], drawnParent = new Map(), vis = new Int32Array(n);
  for (let i = 0; i < n; i++) vis[i] = visible(i);
  for (let i = 0; i < n; i++) {
    if (vis[i] !== i || canonical(i) !== i) continue;
    let p = isOut[i] ? -1 : D.parent[i];
    const g = P.groupRunOf.get(i);
    if (g !== undefined && folded(g)) p = "g" + g;
    drawnParent.set(i, p);
    if (D.kind[i] === "L" && !asBox(i)) clusters.push(i); else nodes.push(i);
  }
  const groups = [];
  D.runs.forEach((run, r) => {
    const first = run.calls[0][0];
    if (run.group && folded(r) && drawnParent.has(first)) {
      groups.push("g" + r);
      drawnParent.set("g" + r, D.parent[first]);
    }
  });
  const name = new Map();
  const bodies = new Map([[-1, []]]);
  for (const c of [...groups, ...clusters]) bodies.set(c, []);
  for (const i of nodes) {
    name.set(i, "n" + name.size);
    const r = P.leaderRunOf.get(i);
    const frag = r !== undefined && folded(r) ? D.runs[r].frag : D.frag[i];
    const style = D.style[{L: "box", T: "tensor", M: "model_tensor", P: "param", O: "op"}[D.kind[i]]];
    bodies.get(drawnParent.get(i)).push(`\t${name.get(i)} [${frag} ${style}]\n`);
  }
  // close clusters into their parents, innermost first, as the DOT writer does
  const all = [...groups, ...clusters], number = new Map(all.map((c, k) => [c, k]));
  const depth = (c) => { let d = 0; for (let p = drawnParent.get(c); p !== -1; p = drawnParent.get(p)) d++; return d; };
  const seqOf = (c) => typeof c === "string" ? D.runs[+c.slice(1)].calls[0][0] : c;
  const sorted = all.map((c) => [depth(c), seqOf(c), c]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (const [, , c] of sorted) {
    let attrs;
    if (typeof c === "string") attrs = D.runs[+c.slice(1)].group;
    else {
      const r = P.leaderRunOf.get(c);
      attrs = r !== undefined && folded(r) ? D.runs[r].cluster : D.cluster[c];
    }
    const inner = bodies.get(c).map((line) => "\t" + line);
    bodies.get(drawnParent.get(c)).push(`\tsubgraph cluster_${number.get(c)} {\n\t\tgraph${attrs}\n`, ...inner, "\t}\n");
  }
  // lift leaf-level edges to what is drawn; bridge hidden nodes; count parallel edges
  const succ = new Map(), pred = new Map(), hidden = new Set();
  const touch = (x) => { if (!succ.has(x)) { succ.set(x, new Map()); pred.set(x, new Set()); } };
  const add = (s, t, c) => {
    touch(s); touch(t);
    const m = succ.get(s); m.set(t, (m.get(t) || 0) + c);
    pred.get(t).add(s);
  };
  for (const i of nodes) touch(i);
  const insideRun = (s, t) => {
    const a = D.run_of[s], b = D.run_of[t];
    if (!a || !b) return false;
    for (const [r, k] of a) {
      if (!folded(r)) continue;
      for (const [r2, k2] of b) if (r2 === r && (k !== k2 || k > 0)) return true;
    }
    return false;
  };
  const E = D.edges;
  for (let e = 0; e < E.length; e += 2) {
    const s = E[e], t = E[e + 1];
    if (insideRun(s, t)) continue;
    if (D.kind[s] === "P" && vis[s] !== s) continue;
    let a = vis[s], b = vis[t];
    if (a < 0) { a = canonical(s); hidden.add(a); }
    if (b < 0) { b = canonical(t); hidden.add(b); }
    if (a !== b) add(a, b, 1);
  }
  for (const h of [...hidden].sort((x, y) => x - y)) {  // seq order is a topological order
    const preds = [...pred.get(h)], succs = [...succ.get(h).keys()];
    for (const s of preds) for (const t of succs) if (s !== t) add(s, t, 1);
    for (const s of preds) succ.get(s).delete(h);
    for (const t of succs) pred.get(t).delete(h);
    succ.delete(h); pred.delete(h);
  }
  const edges = [];
  for (const [s, m] of succ) for (const [t, c] of m) {
    if (!name.has(s) || !name.has(t)) continue;  // an end drawn as a cluster: not drawable
    const param = D.kind[s] === "P";
    edges.push(`\t${name.get(s)} -> ${name.get(t)} [class="tgr-${param ? "param" : "flow"}" ` +
      `id="e-${P.xid[s]}--${P.xid[t]}"${param ? " style=dashed arrowhead=none" : ""}` +
      `${c > 1 ? ` label="×${c}"` : ""}]\n`);
  }
  const head = D.head.replace("rankdir=TB", "rankdir=" + state.rankdir);
  const dot = head + bodies.get(-1).join("") + edges.join("") + "}\n";
  return {dot, nodes: nodes.length, clusters: clusters.length + groups.length, edges: edges.length};
}

// Time one drawing: compose (optional), lay out to SVG text, parse it, insert it, paint.
async function drawTimed(viz, host, dot, composeMs) {
  const t0 = performance.now();
  const svgText = viz.renderString(dot, {format: "svg"});
  const t1 = performance.now();
  const svg = new DOMParser().parseFromString(svgText, "image/svg+xml").documentElement;
  const t2 = performance.now();
  host.replaceChildren(svg);
  svg.getBBox();
  host.getBoundingClientRect();
  const t3 = performance.now();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const t4 = performance.now();
  return {compose: composeMs, layout: t1 - t0, parse: t2 - t1, insert: t3 - t2, paint: t4 - t3,
          total: composeMs + t4 - t0, svgBytes: svgText.length, end: t4};
}

// The engine's share: parsing the DOT alone (the "nop" engine lays nothing out) against
// parse + layout with no SVG written (json0).
function engineSplit(viz, dot) {
  const t0 = performance.now();
  viz.render(dot, {engine: "nop", format: "canon"});
  const t1 = performance.now();
  viz.renderString(dot, {format: "json0"});
  const t2 = performance.now();
  return {dotParse: t1 - t0, layoutJson: t2 - t1};
}

// A state from a spec: {depth: d (open every layer shallower; null: all), open: [ids],
// openSubtree: [ids], unfold: "all" | [runs], tensors, params, ops, rankdir}.
function resolveState(P, spec) {
  const {D, n} = P, open = new Set(), at = new Map(D.ids.map((id, i) => [id, i]));
  const depth = new Int32Array(n);
  for (let i = 0; i < n; i++) depth[i] = D.parent[i] < 0 ? 0 : depth[D.parent[i]] + 1;
  for (let i = 0; i < n; i++) {
    if (D.kind[i] === "L" && (spec.depth === null || depth[i] < spec.depth)) open.add(i);
  }
  (spec.open || []).forEach((id) => open.add(at.get(id)));
  for (const id of spec.openSubtree || []) {
    const stack = [at.get(id)];
    while (stack.length) {
      const i = stack.pop();
      if (D.kind[i] === "L") open.add(i);
      stack.push(...P.children[i]);
    }
  }
  const unfolded = new Set(spec.unfold === "all" ? D.runs.map((_, r) => r) : (spec.unfold || []));
  return {open, unfolded, tensors: spec.tensors ?? true, params: spec.params ?? true,
          ops: spec.ops ?? true, rankdir: spec.rankdir || "TB"};
}

// Labels wider than their node's shape, in the browser's own fonts.
function overflowingLabels(host) {
  let count = 0, total = 0, worst = 1;
  for (const g of host.querySelectorAll("g.node")) {
    const shape = g.querySelector("polygon, ellipse, path");
    if (!shape) continue;
    const width = shape.getBBox().width;
    for (const text of g.querySelectorAll("text")) {
      total++;
      const ratio = text.getComputedTextLength() / Math.max(1, width - 8);
      if (ratio > 1) count++;
      worst = Math.max(worst, ratio);
    }
  }
  return {count, total, worst};
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// The spike: first drawing, then every step (a re-layout), timed; results on window.
async function spikeMain(cfg) {
  const out = {vizEval: window.__tVizEval, steps: {}};
  let t = performance.now();
  const viz = await Viz.instance();
  out.instance = performance.now() - t;
  t = performance.now();
  const el = document.getElementById("drawing");
  const P = el ? prepareDrawing(JSON.parse(el.textContent)) : null;
  out.dataParse = performance.now() - t;
  const host = document.getElementById("host");
  const dotOf = (step) => {
    if (step.dot) return {dot: step.dot, ms: 0};
    const t0 = performance.now();
    const c = composeDot(P, resolveState(P, step.state));
    return {...c, ms: performance.now() - t0};
  };
  const run = async (step) => {
    const c = dotOf(step);
    const timed = await drawTimed(viz, host, c.dot, c.ms);
    return {...timed, nodes: c.nodes, edges: c.edges, dotBytes: c.dot.length, dot: c.dot};
  };
  const first = await run(cfg.first);
  out.first = {...first, dot: cfg.first.keep ? first.dot : undefined};
  if (cfg.first.fonts) out.first.fonts = overflowingLabels(host);
  if (cfg.first.svg) out.first.svg = viz.renderString(first.dot, {format: "svg"});
  for (const step of cfg.steps) {
    if (step.budget && out.overBudget) continue;
    const runs = [];
    for (let k = 0; k < (step.repeat || 1); k++) runs.push(await run(step));
    const keys = ["compose", "layout", "parse", "insert", "paint", "total"];
    const result = {...runs[0], dot: step.keep ? runs[0].dot : undefined};
    for (const key of keys) result[key] = median(runs.map((r) => r[key]));
    if (step.split) Object.assign(result, engineSplit(viz, runs[0].dot));
    if (step.fonts) result.fonts = overflowingLabels(host);
    if (step.svg) result.svg = viz.renderString(runs[0].dot, {format: "svg"});
    if (step.budget && result.total > step.budget) out.overBudget = true;
    out.steps[step.name] = result;
  }
  window.__result = out;
}
