/* torchgraphrec report: the composer. DOT for any state from Python's drawing description
   (report/describe.py): it picks a form per element and lifts edges to what is drawn, in the
   DOT writer's order, so that a state a static drawing can express gives to_dot's bytes. */

/* Whether the flow runs down or up the page (TB, BT) rather than sideways (LR, RL). */
function tgrFlowsDown(rankdir) {
  return rankdir === "TB" || rankdir === "BT";
}

/* What the page derives once from the description: children, run lookups, model outputs. */
function tgrPrepare(D) {
  const n = D.ids.length;
  const children = Array.from({length: n}, () => []);
  D.parent.forEach((p, i) => { if (p >= 0) children[p].push(i); });
  const isOut = new Uint8Array(n), maybeMade = new Uint8Array(n), isLayout = new Uint8Array(n);
  D.out.forEach((i) => { isOut[i] = 1; });
  D.layout.forEach((i) => { isLayout[i] = 1; });
  const unlabelled = new Uint8Array(n);  // bridged identity wrappers: no label of their own
  D.unlabelled.forEach((i) => { unlabelled[i] = 1; });
  D.unproduced.forEach((i) => { maybeMade[i] = 1; });
  // FSDP's unshard: each unit's ops drawn as its all_gather box (render/unshard.py)
  const foldsInto = new Map(), isUnshard = new Uint8Array(n);
  for (let k = 0; k < D.unshard.into.length; k += 2) foldsInto.set(D.unshard.into[k], D.unshard.into[k + 1]);
  D.unshard.boxes.forEach((i) => { isUnshard[i] = 1; });
  const foldTo = new Map(), droppedBy = new Map(), leaderOf = new Map(), groupOf = new Map();
  const repeatOf = new Map();
  D.runs.forEach((run, r) => {
    run.count = run.calls.length / run.period;
    for (let k = 0; k < run.fold.length; k += 2) {
      if (!foldTo.has(run.fold[k])) foldTo.set(run.fold[k], []);
      foldTo.get(run.fold[k]).push([run.fold[k + 1], r]);
    }
    run.dropped.forEach((i) => droppedBy.set(i, r));
    const firstBlock = run.calls.slice(0, run.period);
    if (run.period === 1) pushTo(leaderOf, firstBlock[0], r);
    else firstBlock.forEach((c) => pushTo(groupOf, c, r));
    run.calls.forEach((call, position) => {
      const k = Math.floor(position / run.period), stack = [call];
      while (stack.length) {
        const i = stack.pop();
        if (D.kind[i] === "P" || (k > 0 && isOut[i])) continue;
        pushTo(repeatOf, i, [r, k]);
        stack.push(...children[i]);
      }
    });
  });
  return {D, n, children, isOut, maybeMade, isLayout, unlabelled, foldTo, droppedBy, leaderOf, groupOf, repeatOf,
          foldsInto, isUnshard};
}

function pushTo(map, key, value) {
  if (!map.has(key)) map.set(key, []);
  map.get(key).push(value);
}

/* Python's "%.2f": round half to even where the value is exactly halfway. */
function tgrFixed2(x) {
  const scaled = x * 100, floor = Math.floor(scaled);
  if (scaled - floor === 0.5 && Number.isInteger(x * 8)) return ((floor % 2 ? floor + 1 : floor) / 100).toFixed(2);
  return x.toFixed(2);
}

/* Whether a call is drawn as a cluster in ``state``: open, with something to show inside
   (its calls, or its ops where leaves are opened and ops drawn: else an empty frame). */
function tgrClusterTest(P, state) {
  const {D} = P, leafOps = state.leafOps || new Set();
  return (l) => D.kind[l] === "L" && state.open.has(l) &&
    (D.needs[l] === 2 || (D.needs[l] === 1 && !!state.ops && (state.leaves || leafOps.has(l))));
}

/* state: {open: Set of call indices, unfolded: Set of run indices, fold, tensors, params,
   ops (true: layout-op chains drawn as a "reshape" edge label, "all": every op, false: none),
   leaves, rankdir, side ("both" | "a" | "b")}. */
function tgrCompose(P, state) {
  const {D, n, children} = P;
  tgrRoleRank = D.role_rank;
  const absentStatus = state.side === "a" ? "added" : state.side === "b" ? "removed" : null;
  const status = D.status || [];
  const absent = (i) => absentStatus !== null && status[i] === absentStatus;
  const isCluster = tgrClusterTest(P, state);
  const folded = tgrFoldedRuns(P, state, isCluster);
  const canonical = (i) => {
    for (let moved = true; moved;) {
      moved = false;
      for (const [to, r] of P.foldTo.get(i) || []) if (folded[r]) { i = to; moved = true; break; }
    }
    return state.ops !== "all" && P.foldsInto.has(i) ? P.foldsInto.get(i) : i;
  };
  const shown = {T: state.tensors, P: state.params, O: state.ops};
  const vis = new Int32Array(n);
  const chain = [];
  for (let i = 0; i < n; i++) vis[i] = visibleOf(i);
  function visibleOf(i) {
    if (absent(i)) return -2;
    if (state.ops === "all" && P.isUnshard[i]) return -1;  // every op drawn as recorded
    if (P.droppedBy.has(i) && folded[P.droppedBy.get(i)]) return -1;
    if (D.kind[i] === "M") return i;  // the model's inputs and outputs are always drawn
    chain.length = 0;
    for (let a = D.parent[i]; a >= 0; a = D.parent[a]) chain.push(a);
    for (let k = chain.length - 1; k >= 0; k--) {
      const a = canonical(chain[k]);
      if (!isCluster(a)) return a;
    }
    const j = canonical(i);
    if (D.kind[j] === "L") return j;
    if (P.maybeMade[j] && D.parent[j] >= 0) return j;  // made by its open call's own code
    if (state.ops === true && P.isLayout[j]) return -1;  // the label of the edge bridging it
    return shown[D.kind[j]] ? j : -1;
  }
  // a tensor its call's own code made (recorded without ops), where that call is a cluster
  const made = new Uint8Array(n);
  for (const i of D.unproduced) {
    const p = D.parent[i];
    made[i] = vis[i] === i && vis[p] === p && isCluster(p) ? 1 : 0;
  }
  const placed = tgrPlace(P, state, folded, canonical, vis, isCluster);
  placed.made = made;
  const lifted = tgrLift(P, state, folded, canonical, vis, placed, absent);
  const written = tgrWrite(P, state, folded, placed, lifted);
  return {...written, vis, canonical, isCluster};
}

/* Which runs are drawn once: folding on, not unfolded by the reader, valid at the reach of
   what is open inside the first repeat (Python folds it at a cut of that reach), and not
   overlapping a run already chosen. */
function tgrFoldedRuns(P, state, isCluster) {
  const {D} = P;
  const folded = new Uint8Array(D.runs.length), taken = new Set();
  if (!state.fold) return folded;
  const flag = state.leaves ? "1" : "0";
  D.runs.forEach((run, r) => {
    if (state.unfolded.has(r) || run.calls.some((c) => taken.has(c))) return;
    let deepest = -1;
    const stack = run.calls.slice(0, run.period);
    while (stack.length) {
      const i = stack.pop();
      if (D.kind[i] !== "L") continue;
      const open = isCluster(i);
      deepest = Math.max(deepest, D.depth[i] + (open ? 1 : 0));
      if (open) stack.push(...P.children[i]);
    }
    // a leaf opened by the reader inside the first repeat: the repeats are alike there
    // where Python found them alike with leaves opened
    if (!run.valid[flag].includes(deepest) && !(state.leafOps && state.leafOps.size && run.valid["1"].includes(deepest))) return;
    folded[r] = 1;
    run.calls.forEach((c) => taken.add(c));
  });
  return folded;
}

/* Nodes and clusters in the DOT writer's order; groups (runs of several calls) first. */
function tgrPlace(P, state, folded, canonical, vis, isCluster) {
  const {D, n} = P;
  const nodes = [], clusters = [], parentOf = new Map();
  const groupOfRun = (i) => (P.groupOf.get(i) || []).find((r) => folded[r]);
  for (let i = 0; i < n; i++) {
    if (vis[i] !== i || canonical(i) !== i) continue;
    let parent = P.isOut[i] ? -1 : D.parent[i];
    const g = groupOfRun(i);
    if (g !== undefined) parent = "g" + g;
    parentOf.set(i, parent);
    if (D.kind[i] === "L" && isCluster(i)) clusters.push(i); else nodes.push(i);
  }
  const groups = [];
  D.runs.forEach((run, r) => {
    if (run.period > 1 && folded[r] && parentOf.has(run.calls[0])) {
      groups.push("g" + r);
      parentOf.set("g" + r, D.parent[run.calls[0]]);
    }
  });
  const leading = (i) => (P.leaderOf.get(i) || []).find((r) => folded[r]);
  return {nodes, clusters, groups, parentOf, leading};
}

/* A directed graph kept in insertion order, as networkx keeps it, so that edges come out in
   the order the DOT writer writes them. An edge holds the diff statuses it stands for
   (`marks`) and its label, the stronger where several edges meet (render/edges.py). */
var TgrGraph = class {
  constructor() { this.succ = new Map(); this.pred = new Map(); }
  addNode(x) { if (!this.succ.has(x)) { this.succ.set(x, new Map()); this.pred.set(x, new Map()); } }
  addEdge(s, t, marks, label) {
    this.addNode(s); this.addNode(t);
    const old = this.succ.get(s).get(t), before = old ? old.marks : null;
    const merged = before && marks ? new Set([...before, ...marks]) : (before || marks || null);
    const value = {marks: merged, label: old ? tgrStronger(old.label, label || "") : label || ""};
    this.succ.get(s).set(t, value);
    this.pred.get(t).set(s, value);
  }
  removeEdge(s, t) { this.succ.get(s).delete(t); this.pred.get(t).delete(s); }
  removeNode(x) {
    for (const t of this.succ.get(x).keys()) this.pred.get(t).delete(x);
    for (const s of this.pred.get(x).keys()) this.succ.get(s).delete(x);
    this.succ.delete(x); this.pred.delete(x);
  }
  edges() {
    const found = [];
    for (const [s, targets] of this.succ) for (const [t, {marks, label}] of targets) found.push([s, t, marks, label]);
    return found;
  }
  /* networkx's topological_sort: generations of nodes whose predecessors are all done. */
  topological() {
    const indegree = new Map(), order = [];
    let zero = [];
    for (const [x, preds] of this.pred) { if (preds.size) indegree.set(x, preds.size); else zero.push(x); }
    while (zero.length) {
      const generation = zero;
      zero = [];
      for (const x of generation) {
        order.push(x);
        for (const t of this.succ.get(x).keys()) {
          const left = indegree.get(t) - 1;
          if (left === 0) { zero.push(t); indegree.delete(t); } else indegree.set(t, left);
        }
      }
    }
    return order;
  }
};

/* The drawn edges: recorded edges lifted to what draws their ends, hidden ends bridged (a
   chain of layout ops labelled "reshape", an argument into attention by its role), edges at
   a cluster that a node inside it carries dropped, a shared input's edges past the first
   drawn as markers, and the edges into attention in the order of their roles
   (render/view.py, render/edges.py, render/oproles.py). */
function tgrLift(P, state, folded, canonical, vis, placed, absent) {
  const {D} = P;
  const graph = new TgrGraph(), hidden = new Set();
  placed.nodes.forEach((i) => graph.addNode(i));
  placed.clusters.forEach((i) => graph.addNode(i));
  const insideRun = (s, t) => {
    const a = P.repeatOf.get(s), b = P.repeatOf.get(t);
    if (!a || !b) return false;
    for (const [r, k] of a) {
      if (!folded[r]) continue;
      for (const [r2, k2] of b) if (r2 === r && (k !== k2 || k > 0)) return true;
    }
    return false;
  };
  const made = (i) => placed.made[i] === 1;
  const edgeStatus = D.edge_status, E = D.edges;
  // Edges into and out of a closed call are merged as graph.collapse merges them: the
  // first (in seq order) between the same two closed calls keeps its status, the others
  // add none (render/diffstatus.py reads the collapsed edges).
  const keeper = (i) => { let k = i; for (let x = D.parent[i]; x >= 0; x = D.parent[x]) if (!state.open.has(x)) k = x; return k; };
  const pairs = new Set();
  const firstOf = (s, t) => {
    const key = keeper(s) + "," + keeper(t), fresh = !pairs.has(key);
    pairs.add(key);
    return fresh;
  };
  const dropped = state.side === "a" ? "added" : state.side === "b" ? "removed" : null;
  for (let e = 0; e < E.length; e += 2) {
    const s = E[e], t = E[e + 1];
    if (absent(s) || absent(t) || (edgeStatus && edgeStatus[e / 2] === dropped)) continue;
    if (insideRun(s, t)) continue;  // drawn once, by the run's first repeat
    if (state.ops === "all" && P.isUnshard[s]) continue;
    if (D.kind[s] === "P" && vis[s] >= 0 && vis[s] !== s) continue;  // counted in its box, not flowing
    if (made(t) && s === D.parent[t]) continue;
    let a = vis[s], b = vis[t];
    if (a < 0) { a = canonical(s); hidden.add(a); }
    if (b < 0) { b = canonical(t); hidden.add(b); }
    if (a === b) continue;
    // a role labels an edge into attention drawn as itself, not into the box holding it
    const r = D.roles[e / 2], role = r && state.ops === true && vis[t] >= 0 && vis[t] === canonical(t) ? r : "";
    graph.addEdge(a, b, edgeStatus ? (firstOf(s, t) ? [edgeStatus[e / 2]] : []) : null, role);
  }
  // a bridged edge stands for the changes on its way, not for what stayed the same
  // (render/diffstatus.py: an unchanged edge counts only where drawn as it is)
  let order = graph.topological();
  if (order.length < graph.succ.size) order = [...graph.succ.keys()];  // a cycle: render/edges.py
  for (const x of order) {
    if (!hidden.has(x)) continue;
    const own = state.ops === true && P.isLayout[x] && !P.unlabelled[x] ? D.reshape : "";
    const preds = [...graph.pred.get(x)], succs = [...graph.succ.get(x)];
    for (const [s, {marks: m1, label: before}] of preds) for (const [t, {marks: m2, label: after}] of succs) {
      if (s !== t) graph.addEdge(s, t, m1 && m2 ? [...m1, ...m2].filter((m) => m !== "same") : null, tgrStronger(after, before, own));
    }
    graph.removeNode(x);
  }
  const inside = tgrInside(placed);
  const carried = (other, members, neighbours) =>
    members.has(other) || [...neighbours.get(other).keys()].some((x) => members.has(x));
  for (const [s, t] of graph.edges()) {
    if (inside.has(s) && carried(t, inside.get(s), graph.pred)) graph.removeEdge(s, t);
    else if (inside.has(t) && carried(s, inside.get(t), graph.succ)) graph.removeEdge(s, t);
  }
  const [edges, markers] = tgrSharedInputs(graph.edges(), D.fan_out);
  return {edges: tgrInRoleOrder(edges, D.role_rank), inside, markers};
}

/* Each role's rank among its op's arguments (set from the page's data by tgrCompose). */
var tgrRoleRank = {};

/* The label an edge keeps where several reach it: their roles, joined in rank order where
   edges of different roles merged, else "reshape", else none (render/oproles.py's stronger). */
function tgrStronger(...labels) {
  const roles = new Set();
  for (const label of labels) if (label && label !== "reshape") label.split("/").forEach((r) => roles.add(r));
  if (!roles.size) return labels.includes("reshape") ? "reshape" : "";
  const rank = (r) => (r in tgrRoleRank ? tgrRoleRank[r] : Infinity);
  return [...roles].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0)).join("/");
}

/* The edges drawn as markers: those out of a node that feeds more than `limit` nodes, all
   but its first (render/edges.py's shared_inputs); returns the others and the markers. */
function tgrSharedInputs(edges, limit) {
  const targets = new Map();
  for (const [s, t] of edges) pushTo(targets, s, t);
  const kept = [], markers = [];
  for (const edge of edges) {
    const own = targets.get(edge[0]);
    if (own.length > limit && edge[1] !== own[0]) markers.push([edge[0], edge[1]]); else kept.push(edge);
  }
  return [kept, markers];
}

/* The edges into one op that carry a role, in the order of the roles, in the places they
   held (render/oproles.py's in_role_order: query, key, value side by side, in order). */
function tgrInRoleOrder(edges, rank) {
  const places = new Map();
  edges.forEach(([, t, , label], k) => { if (label && Object.hasOwn(rank, label)) pushTo(places, t, k); });
  const found = [...edges];
  for (const where of places.values()) {
    const ordered = where.map((k) => edges[k]).sort((a, b) => rank[a[3]] - rank[b[3]]);
    where.forEach((k, at) => { found[k] = ordered[at]; });
  }
  return found;
}

/* Each cluster's drawn nodes, nested clusters' included: clusters first, then groups. */
function tgrInside(placed) {
  const inside = new Map();
  for (const c of [...placed.clusters, ...placed.groups]) inside.set(c, new Set());
  for (const i of placed.nodes) {
    for (let c = placed.parentOf.get(i); c !== -1 && c !== undefined; c = placed.parentOf.get(c)) inside.get(c).add(i);
  }
  return inside;
}

/* networkx's dag_longest_path over the drawn flow, parameters and the edges of the side
   roles (key, value: the path enters attention by its query) left out (render/spine.py). */
function tgrSpine(P, placed, edges) {
  const {D} = P, flow = new TgrGraph(), side = new Set(D.side_roles);
  placed.nodes.forEach((i) => { if (D.kind[i] !== "P") flow.addNode(i); });
  let count = 0;
  for (const [s, t, , label] of edges) {
    if (flow.succ.has(s) && flow.succ.has(t) && !side.has(label)) { flow.addEdge(s, t); count++; }
  }
  const order = flow.topological();
  if (!count || order.length < flow.succ.size) return [];  // a cycle: render/spine.py
  const dist = new Map();
  for (const v of order) {
    let best = null;
    for (const u of flow.pred.get(v).keys()) {
      const length = dist.get(u)[0] + 1;
      if (best === null || length > best[0]) best = [length, u];
    }
    dist.set(v, best === null || best[0] < 0 ? [0, v] : best);
  }
  let v = null, longest = -1;
  for (const [x, [length]] of dist) if (length > longest) { longest = length; v = x; }
  const path = [];
  for (let u = null; u !== v;) { path.push(v); u = v; v = dist.get(v)[1]; }
  return path.reverse();
}

var TGR_STYLE = {L: "box", T: "tensor", M: "model_tensor", P: "param", O: "op"};

/* The DOT text, line for line as render/dot.py writes it. */
function tgrWrite(P, state, folded, placed, lifted) {
  const {D} = P, {nodes, clusters, groups, parentOf, leading} = placed;
  // either side of a diff alone is drawn plain, from that side's own forms
  const F = state.side !== "both" && D.sides ? D.sides[state.side] : D;
  const marks = F === D && D.mark ? new TgrMarks(D) : null;
  const runOf = (c) => (F === D ? D.runs : F.runs)[+c.slice(1)];
  const form = (i) => { const r = leading(i); return r === undefined ? null : (F === D ? D.runs : F.runs)[r]; };
  const names = new Map(), width = new Map(), bodies = new Map([[-1, []]]);
  // each element's own text, kept for the per-module layout (templates/layout.js)
  const parts = {node: new Map(), cluster: new Map(), edge: []};
  const clusterNames = new Map([...groups, ...clusters].map((c, k) => [c, "cluster_" + k]));
  for (const c of clusterNames.keys()) bodies.set(c, []);
  const edges = lifted.edges;
  const spine = new Set(tgrSpine(P, placed, edges));
  for (const i of nodes) {
    const name = "n" + names.size, run = form(i) || {own: F.own[i], extra: F.extra[i], width: F.width[i]};
    const themed = F.themed ? (form(i) ? run.themed : F.themed[i]) : D.styles[TGR_STYLE[D.kind[i]]];
    names.set(i, name);
    width.set(i, run.width);
    if (marks) marks.seen.add(D.mark.box[i]);
    const group = spine.has(i) ? " group=spine" : "";
    parts.node.set(i, [`${run.own} ${themed}`, run.extra]);
    bodies.get(parentOf.get(i)).push(`\t${name} [${run.own} ${themed}${group} ${run.extra}]\n`);
  }
  if (tgrFlowsDown(state.rankdir)) tgrSpacers(P, placed, lifted, spine, names, width, bodies, form, F);
  const under = tgrUnderParams(P, placed, edges);
  tgrRoleRows(P, placed, edges, names, bodies, parts, state.rankdir);
  const markerLines = tgrMarkers(P, placed, lifted, names, clusterNames, bodies, parts);
  const depthOf = (c) => { let d = 0; for (let p = parentOf.get(c); p !== -1; p = parentOf.get(p)) d++; return d; };
  const position = (c) => typeof c === "string" ? runOf(c).calls[0] : c;
  const order = [...clusterNames.keys()].map((c) => [depthOf(c), position(c), c]).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (const [, , c] of order) {
    const run = typeof c === "string" ? runOf(c) : form(c);
    const attrs = typeof c === "string" ? run.group : run ? run.cluster : F.cluster[c];
    if (marks && typeof c !== "string") marks.seen.add(D.mark.cluster[c]);
    parts.cluster.set(c, attrs);
    const inner = bodies.get(c).map((line) => "\t" + line);
    bodies.get(parentOf.get(c)).push(`\tsubgraph ${clusterNames.get(c)} {\n\t\tgraph${attrs}\n`, ...inner, "\t}\n");
  }
  const lines = edges.map(([s, t, recorded, label]) => {
    const marked = (marks && marks.edge(s, t, recorded, clusterNames) || "") + (label ? D.labels[state.rankdir][label] : "") +
      tgrFlowRankAttr(P, placed, under, s, t);
    parts.edge.push(tgrEdgeAttrs(P, s, t, marked));
    return tgrEdgeLine(P, s, t, names, clusterNames, lifted.inside, marked);
  });
  const invisible = tgrOrder(P, placed, lifted.inside).map(([a, b]) => `\t${names.get(a)} -> ${names.get(b)} [style=invis]\n`);
  const head = D.head.replace(/rankdir=[A-Z]+/, "rankdir=" + state.rankdir);
  const legend = tgrLegendLine(D, marks, [...nodes, ...clusters]);
  const dot = head + bodies.get(-1).join("") + lines.join("") + markerLines.join("") + invisible.join("") + legend + "}\n";
  return {dot, placed, edges, names, clusterNames, folded, parts, head, legend, rankdir: state.rankdir};
}

function tgrEdgeLine(P, s, t, names, clusterNames, inside, marked) {
  const [tail, tailAttr] = tgrEnd(s, true, names, clusterNames, inside);
  const [head, headAttr] = tgrEnd(t, false, names, clusterNames, inside);
  return `\t${tail} -> ${head} [${tgrEdgeAttrs(P, s, t, marked)}${tailAttr}${headAttr}]\n`;
}

/* The DOT node an edge ends at, and for a cluster the attribute naming it. */
function tgrEnd(x, last, names, clusterNames, inside) {
  if (!clusterNames.has(x)) return [names.get(x), ""];
  const members = [...inside.get(x)].sort((a, b) => a - b);
  return [names.get(last ? members[members.length - 1] : members[0]), ` ${last ? "ltail" : "lhead"}=${clusterNames.get(x)}`];
}

/* A small marker naming a shared input beside each node it feeds but the first, in that
   node's cluster (render/dot.py); returns the markers' edges. The per-module layout takes
   each marker as a node of that cluster (parts.node, parts.marker). */
function tgrMarkers(P, placed, lifted, names, clusterNames, bodies, parts) {
  const {D} = P;
  parts.marker = [];
  return lifted.markers.map(([s, t], k) => {
    const name = "m" + k, parent = placed.parentOf.get(t);
    const own = `label=${D.marker_names[D.marker[s]]} class="tgr-marker" id="m-${D.xid[s]}-${k}" ${D.marker_style}`;
    bodies.get(parent).push(`\t${name} [${own}]\n`);
    parts.node.set(name, [own, ""]);
    parts.marker.push([name, t, parent]);
    const [head, headAttr] = tgrEnd(t, false, names, clusterNames, lifted.inside);
    return `\t${name} -> ${head} [class="tgr-flow"${headAttr}]\n`;
  });
}

/* An edge's own attributes: what it is, its id, a diff's mark. */
function tgrEdgeAttrs(P, s, t, marked) {
  const {D} = P, param = D.kind[s] === "P";
  return `class="tgr-${param ? "param" : "flow"}" id="e-${D.xid[s]}--${D.xid[t]}"` +
    `${param ? " style=dashed arrowhead=none" : ""}${marked || ""}`;
}

/* A diff's marks on what is drawn (render/marks.py): the statuses seen, for the legend,
   and each edge's status: added or removed where an end is, else that of the recorded
   edges it stands for (the same where any is, or where they disagree). */
var TgrMarks = class {
  constructor(D) { this.D = D; this.seen = new Set(); }
  edge(s, t, recorded, clusterNames) {
    const {D} = this, end = (x) => (clusterNames.has(x) ? D.mark.cluster[x] : D.mark.box[x]);
    const ends = [end(s), end(t)];
    let status = ["removed", "added"].find((x) => ends.includes(x));
    if (status === undefined) {
      const found = new Set(recorded && recorded.size !== undefined ? recorded : recorded || []);
      status = !found.size || found.has("same") || found.size > 1 ? "same" : [...found][0];
    }
    this.seen.add(status);
    return D.mark.edge[D.kind[s] === "P" ? "param" : "flow"][status];
  }
};

/* The legend node (render/legend.py): a diff's statuses drawn, the mode every call shares,
   and the costs the labels write where any drawn element has them. */
function tgrLegendLine(D, marks, drawn) {
  const L = D.legend, rows = [];
  if (marks) {
    for (const [status, row] of L.statuses) if (marks.seen.has(status)) rows.push(row);
    rows.push(...L.mode);
  }
  if (L.costs) {
    const shown = new Set(drawn);
    const titles = L.costs.filter(([, having]) => having.some((i) => shown.has(i))).map(([title]) => title);
    if (titles.length) rows.push(L.costs_row[0] + titles.join(" · ") + L.costs_row[1]);
  }
  return rows.length ? L.line[0] + rows.join("") + L.line[1] : "";
}

/* Invisible spacers left of each cluster's entry node, so that its title ends before the
   flow comes in (render/dot.py, render/spine.py). */
function tgrSpacers(P, placed, lifted, spine, names, width, bodies, form, F) {
  const {D} = P, {inside} = lifted, found = new Map();
  for (const i of spine) for (const [c, members] of inside) if (members.has(i) && !found.has(c)) found.set(c, i);
  const fed = new Map();
  for (const [s, t] of lifted.edges) fed.set(t, s);
  for (const [c, members] of inside) {
    if (found.has(c)) continue;
    const order = [...members].sort((a, b) => a - b);
    const outside = order.filter((i) => fed.has(i) && !members.has(fed.get(i)));
    if (outside.length || order.length) found.set(c, (outside.length ? outside : order)[0]);
  }
  const needed = new Map();
  for (const [c, i] of found) {
    const title = typeof c === "string" ? (F === D ? D.runs : F.runs)[+c.slice(1)].title : (form(c) || {title: F.title[c]}).title;
    needed.set(i, Math.max(needed.get(i) || 0, title));
  }
  const sorted = [...needed].sort((a, b) => (names.get(a[0]) < names.get(b[0]) ? -1 : 1));
  sorted.forEach(([i, title], index) => {
    const gap = title - width.get(i) / 2;
    if (gap <= 0) return;
    bodies.get(placed.parentOf.get(i)).push(
      `\ts${index} [label="" class="tgr-spacer" id="s-${index}" style=invis fixedsize=true height=0.01 width=${tgrFixed2(gap / 72)}]\n` +
      `\t{rank=same; s${index} -> ${names.get(i)} [style=invis]}\n`);
  });
}

/* The ops drawn under parameters of their own cluster, each with how many parameters feed
   it: a parameter takes the rank before the first op it feeds in its cluster, so that its
   edge runs down inside the cluster (render/spine.py's under_params). */
function tgrUnderParams(P, placed, edges) {
  const {D} = P, targets = new Map(), under = new Map();
  for (const [s, t] of edges) pushTo(targets, s, t);
  for (const i of placed.nodes) {
    if (D.kind[i] !== "P") continue;
    const cluster = placed.parentOf.get(i);
    const near = (targets.get(i) || []).filter((t) => placed.parentOf.get(t) === cluster && D.kind[t] !== "P");
    if (near.length) under.set(near[0], 0);
  }
  for (const [s, t] of edges) if (under.has(t) && D.kind[s] === "P") under.set(t, under.get(t) + 1);
  return under;
}

/* A flow edge's attributes where it feeds an op drawn under its parameters: two ranks from
   outside the op's cluster, and more weight than the parameters' edges together
   (DotWriter.flow_rank_attr). */
function tgrFlowRankAttr(P, placed, under, s, t) {
  const params = under.get(t);
  if (params === undefined || P.D.kind[s] === "P") return "";
  const cluster = placed.parentOf.get(t);
  let up = placed.parentOf.get(s);
  while (up !== undefined && up !== -1 && up !== cluster) up = placed.parentOf.get(up);
  const outside = cluster !== undefined && cluster !== -1 && up !== cluster;
  return (outside ? " minlen=2" : "") + ` weight=${params + 1}`;
}

/* The boxes that make an op's role arguments (q_proj, k_proj, v_proj) on one rank, in role
   order, by cluster (render/spine.py's role_rows); kept in parts.rows for layout.js as
   written: backwards where the flow runs sideways (see DotWriter.role_row). */
function tgrRoleRows(P, placed, edges, names, bodies, parts, rankdir) {
  const {D} = P, rank = D.role_rank, preds = new Map(), succs = new Map(), rows = new Map();
  const drawn = new Set(placed.nodes);
  for (const [s, t] of edges) { pushTo(preds, t, s); pushTo(succs, s, t); }
  for (const i of placed.nodes) {
    const into = edges.filter(([, t, , label]) => t === i && label && Object.hasOwn(rank, label))
      .map(([s, , , label]) => [rank[label], s]).sort((a, b) => a[0] - b[0]);
    const cluster = placed.parentOf.get(i);
    const row = into.map(([, s]) => tgrNearestBox(D, placed, s, cluster, preds, drawn)).filter((b) => b !== null);
    if (row.length >= 2 && new Set(row).size === row.length &&
        !row.some((a) => tgrReaches(a, new Set(row.filter((b) => b !== a)), succs))) pushTo(rows, cluster, row);
  }
  parts.rows = [];
  for (const [cluster, found] of rows) {
    for (const inOrder of found) {
      const row = tgrFlowsDown(rankdir) ? inOrder : [...inOrder].reverse();
      bodies.get(cluster).push(`\t{rank=same; ${row.map((n) => names.get(n)).join(" -> ")} [style=invis]}\n`);
      parts.rows.push([cluster, row]);
    }
  }
}

/* The one box nearest upstream of `start` (itself included) among the cluster's own
   members; null where there is none, or two at the same distance. */
function tgrNearestBox(D, placed, start, cluster, preds, drawn) {
  let frontier = [start];
  const seen = new Set([start]);
  while (frontier.length) {
    const members = frontier.filter((n) => placed.parentOf.get(n) === cluster);
    const boxes = members.filter((n) => drawn.has(n) && D.kind[n] === "L");
    if (boxes.length) return boxes.length === 1 ? boxes[0] : null;
    frontier = [];
    for (const n of members) for (const s of preds.get(n) || []) if (!seen.has(s)) { seen.add(s); frontier.push(s); }
  }
  return null;
}

/* Whether anything in `others` is downstream of `start`. */
function tgrReaches(start, others, succs) {
  const stack = [start], seen = new Set([start]);
  while (stack.length) {
    for (const t of succs.get(stack.pop()) || []) {
      if (others.has(t)) return true;
      if (!seen.has(t)) { seen.add(t); stack.push(t); }
    }
  }
  return false;
}

/* A tensor its call's own code made stays below what ran last before it (render/view.py). */
function tgrOrder(P, placed, inside) {
  const all = new Set(placed.nodes), pairs = [];
  for (const i of placed.nodes) {
    if (!placed.made[i]) continue;
    const members = inside.get(placed.parentOf.get(i)) || all;
    let last = -1;
    for (const m of members) if (m < i && m > last) last = m;
    if (last >= 0) pairs.push([last, i]);
  }
  return pairs;
}
