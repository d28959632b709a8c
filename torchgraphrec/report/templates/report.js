/* torchgraphrec report: the state (open calls, unfolded runs, options), the controls, the
   re-layout, the URL fragment. Hand-written, no dependencies; text from the recording is
   only ever set through textContent. */

function tgrReport(root) {
  const R = {root, host: root.querySelector(".tgr-canvas"), cache: new Map(), busy: 0};
  R.svg = R.host.querySelector("svg");
  if (R.svg) R.svg.dataset.fitted = R.svg.getAttribute("viewBox");
  R.config = JSON.parse(root.querySelector("script.tgr-config").textContent);
  R.$ = (selector) => root.querySelector(selector);
  tgrPanZoom(R);
  if (R.svg) tgrOpeningView(R);
  // the first drawing is painted first; the data and the layout engine come after it
  requestAnimationFrame(() => setTimeout(() => tgrStart(R), 0));
  root.tgr = R;
  return R;
}

function tgrStart(R) {
  const read = (name) => JSON.parse(R.$("script." + name).textContent);
  R.D = read("tgr-drawing");
  R.info = read("tgr-data");
  R.P = R.Pboth = tgrPrepare(R.D);
  R.byXid = new Map(R.D.xid.map((x, i) => [x, i]));
  R.byId = new Map(R.D.ids.map((id, i) => [id, i]));
  R.state = tgrPresetState(R, R.config.preset.depth);
  R.colourBy = R.config.colour.start;
  R.drawn = tgrCompose(R.P, R.state);  // what the static first drawing shows
  R.cache.set(R.drawn.dot, R.svg);
  R.saved = tgrCopyState(R.state);
  const fromUrl = tgrReadUrl(R);
  tgrControls(R);
  tgrSearchSetup(R);
  tgrKeys(R);
  tgrTables(R);
  R.onClick = (element) => tgrClicked(R, element);
  R.onDouble = (element, event) => tgrDoubleClicked(R, element, event);
  tgrIndexElements(R);
  tgrDecorate(R, true);
  // a link shows the view it was made of: its selection is marked where that view shows it,
  // in a closed box's frame too, without opening anything the link kept closed
  if (fromUrl) tgrUpdate(R, null).then(() => { if (R.selected !== undefined) tgrSelect(R, R.selected, {}); });
  // and a fragment set while the page is open (a link pasted into its tab, Back and
  // Forward) is applied as the one read on opening is (the page's own writes replace it)
  window.addEventListener("hashchange", () => {
    if (!tgrReadUrl(R)) return;
    tgrSyncControls(R);
    tgrUpdate(R, null).then(() => { if (R.selected !== undefined) tgrSelect(R, R.selected, {}); });
  });
  setTimeout(() => tgrViz(R).then((viz) => {
    performance.mark("tgr-engine-ready");
    R.root.dataset.engine = "ready";
    // lay out the opening view's modules while the reader looks: the first action then
    // lays out only what it changes
    setTimeout(() => { if (R.drawn && !R.busy) tgrLayOut(R.P, R.drawn, viz); }, 0);
  }), 0);
  performance.mark("tgr-ready");
  R.root.dataset.ready = "true";
}

function tgrPresetState(R, depth) {
  const {D} = R, preset = R.config.preset, open = new Set();
  for (let i = 0; i < D.ids.length; i++) {
    if (D.kind[i] === "L" && (depth === null || D.depth[i] < depth)) open.add(i);
  }
  return {open, unfolded: new Set(), leafOps: new Set(), depth, fold: preset.fold,
    tensors: preset.tensors, params: preset.params, ops: preset.ops, leaves: preset.leaves,
    rankdir: preset.rankdir, side: preset.side};
}

function tgrCopyState(state) {
  return {...state, open: new Set(state.open), unfolded: new Set(state.unfolded), leafOps: new Set(state.leafOps)};
}

/* Compose, lay out (cached by DOT text), swap, keep the anchor still, decorate, save.
   `since`: when the reader acted (an event's timeStamp), to time the action until the
   new drawing is painted (root's data-last-ms, read by the tests and the benchmark). */
/* The prepared description for the side of a diff shown: either side alone has runs of
   its own (the side with three GPT-2 blocks folds them as h.0–2 × 3, where the union keeps
   the added block apart), so its run numbers are its own. */
function tgrSideP(R, side) {
  if (side === "both" || !R.D.sides) return R.Pboth;
  R.sideP = R.sideP || {};
  if (!R.sideP[side]) R.sideP[side] = tgrPrepare({...R.D, runs: R.D.sides[side].runs});
  return R.sideP[side];
}

async function tgrUpdate(R, anchor, since) {
  R.inFlight = (R.inFlight || 0) + 1;  // read by the tests: the page is settled at 0
  try { return await tgrRelayOut(R, anchor, since); } finally { R.inFlight--; }
}

async function tgrRelayOut(R, anchor, since) {
  const started = since || performance.now();
  const ticket = ++R.busy;
  if (R.asking) R.asking(false);  // the view it asked about is no longer wanted
  R.P = tgrSideP(R, R.state.side);
  const composed = tgrCompose(R.P, R.state);
  if (composed.placed.nodes.length > R.config.big && !(await tgrAsk(R, composed))) {
    tgrBackToDrawn(R, ticket);
    return false;
  }
  let svg = R.cache.get(composed.dot);
  if (!svg) {
    tgrStatus(R, `laying out ${composed.placed.nodes.length} boxes…`);
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
    try {
      const viz = await tgrViz(R);
      if (ticket !== R.busy) return false;  // a later action superseded this one
      const started = performance.now();
      svg = tgrLayOut(R.P, composed, viz);
      R.lastLayoutMs = performance.now() - started;
    } catch (error) {
      tgrStatus(R, `could not lay this view out: ${error.message || error}`);
      tgrBackToDrawn(R, ticket);
      return false;
    }
    if (R.cache.size > 24) R.cache.delete(R.cache.keys().next().value);
    R.cache.set(composed.dot, svg);
  }
  if (ticket !== R.busy) return false;
  R.drawn = composed;
  R.saved = tgrCopyState(R.state);
  tgrSwap(R, svg, anchor);
  tgrIndexElements(R);
  tgrSearchAgain(R);
  tgrMarkRow(R);  // a diff's side shown: the rows and bars of what it lacks greyed
  tgrDecorate(R, true);
  if (R.selected !== undefined) tgrDetails(R, R.selected);  // "drawn for", what it offers now
  tgrSyncControls(R);
  tgrWriteUrl(R);
  tgrStatus(R, "");
  await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));  // painted
  R.root.dataset.lastMs = String(Math.round(performance.now() - started));
  R.root.dataset.layouts = String(Number(R.root.dataset.layouts || 0) + 1);
  return true;
}

/* A view not drawn (declined, or the engine failed): the state, and the controls that show
   it, back to what is drawn; unless a newer action superseded it, whose state is the
   reader's. */
function tgrBackToDrawn(R, ticket) {
  if (ticket !== R.busy) return;
  R.state = tgrCopyState(R.saved);
  R.P = tgrSideP(R, R.state.side);
  tgrSyncControls(R);
}

/* Why an option changed nothing in the view drawn (else the reader is left wondering
   whether the click took): a few words on the status line, the reason in its tooltip. */
var TGR_SAME = {
  tensors: ["tensors: none to add here", "a box's inputs and outputs are on its label; tensors are drawn where an open module's own code passes them on (tick inside leaves for every op's)"],
  fold: ["fold: nothing repeats here", "no run of identical calls is drawn in this view"],
  leaves: ["inside leaves: none to open here", "no module drawn in this view is a leaf with ops of its own"],
  other: ["the same drawing here", "this option changes nothing in the view drawn"],
};

function tgrStatus(R, text, why) {
  const status = R.$(".tgr-status");
  status.textContent = text;
  status.title = why || "";
}

/* Ask before laying out a very big view (it may take seconds). One question at a time:
   `R.asking` answers it (a newer re-layout answers "no"), so that no re-layout waits on
   buttons that a later question took over. */
function tgrAsk(R, composed) {
  const bar = R.$(".tgr-ask");
  R.$(".tgr-ask-text").textContent = `This view has ${composed.placed.nodes.length.toLocaleString("en")} boxes and ops; laying it out may take several seconds.`;
  bar.hidden = false;
  return new Promise((answer) => {
    const done = (yes) => { bar.hidden = true; R.asking = null; answer(yes); };
    R.asking = done;
    R.$(".tgr-ask-yes").onclick = () => done(true);
    R.$(".tgr-ask-no").onclick = () => done(false);
  });
}

/* Element id -> node number, after each drawing. */
function tgrIndexElements(R) {
  R.elements = new Map();
  R.groupElements = new Map();
  if (!R.svg) return;
  R.svg.querySelectorAll("g.node, g.cluster").forEach((element) => {
    const id = element.id || "";
    if (id.startsWith("g-group:")) {
      const first = R.byXid.get(id.slice(8));
      R.groupElements.set(first, element);
    } else if (/^[nc]-/.test(id) && R.byXid.has(id.slice(2))) {
      R.elements.set(R.byXid.get(id.slice(2)), element);
    }
  });
}

function tgrIndexOf(R, element) {
  const id = element.id || "";
  if (id.startsWith("g-group:")) return R.byXid.get(id.slice(8));
  return /^[nc]-/.test(id) ? R.byXid.get(id.slice(2)) : undefined;
}

/* The run a drawn node stands for, folded now (the reader may show its repeats). */
function tgrFoldedRunOf(R, i) {
  const runs = [...(R.P.leaderOf.get(i) || []), ...(R.P.groupOf.get(i) || [])];
  return runs.find((r) => R.drawn.folded[r]);
}

function tgrAnchorIds(R, i) {
  const x = R.D.xid[i];
  return ["n-" + x, "c-" + x, "g-group:" + x];
}

function tgrClicked(R, element) {
  const i = tgrIndexOf(R, element);
  if (i !== undefined) tgrSelect(R, i, {});
}

function tgrDoubleClicked(R, element, event) {
  const i = tgrIndexOf(R, element);
  if (i === undefined) return;
  // a folded run, drawn as a box or a cluster, opens to its repeats ("Close" is in the panel)
  const run = tgrFoldedRunOf(R, i);
  if (run !== undefined) {
    tgrUnfold(R, run);
  } else if (element.classList.contains("cluster")) {
    R.state.open.delete(i);
    R.state.leafOps.delete(i);
  } else if (!tgrOpen(R, i)) {
    return;
  } else {
    tgrOpenOneRepeat(R, i);
  }
  tgrUpdate(R, tgrAnchor(R, element, tgrAnchorIds(R, i), event), event && event.timeStamp);
}

/* Open call `i` in place (its children, or a leaf's ops); false where there is nothing. */
function tgrOpen(R, i) {
  const needs = R.D.needs[i];
  if (R.D.kind[i] !== "L" || !needs) return false;
  R.state.open.add(i);
  if (needs === 1 && !R.state.leaves) R.state.leafOps.add(i);
  return true;
}

/* Where opening `i` (inside a folded run's first repeat) makes the repeats differ, the run
   is shown unfolded with only the repeat holding `i` open: opening one module never opens
   it, or anything, in the 80 other blocks. */
function tgrOpenOneRepeat(R, i) {
  const {P, state} = R, runs = (P.repeatOf.get(i) || []).filter(([r]) => R.drawn.folded[r]);
  if (!runs.length) return;
  const isCluster = tgrClusterTest(P, state);
  const folded = tgrFoldedRuns(P, state, isCluster);
  for (const [r, k] of runs) {
    if (folded[r]) continue;
    const run = P.D.runs[r];
    state.unfolded.add(r);
    run.calls.forEach((call, position) => {
      if (Math.floor(position / run.period) !== k) { state.open.delete(call); state.leafOps.delete(call); }
    });
  }
}

/* Whether the side of a diff shown has node `i` (side A lacks what B added, B what it
   removed): nothing else can be drawn, selected or opened. */
function tgrOnSide(R, i) {
  const absent = {a: "added", b: "removed"}[R.state.side];
  return !absent || !R.D.status || R.D.status[i] !== absent;
}

/* The drawn element that shows node `i` now: itself, the box it is in, or the cluster
   around it (its kind hidden). */
function tgrHolder(R, i) {
  const {vis} = R.drawn;
  let j = vis[i];
  if (j === -2) return null;
  if (j >= 0) return R.elements.get(j) || R.groupElements.get(j) || null;
  for (let a = R.D.parent[i]; a >= 0; a = R.D.parent[a]) {
    j = vis[a];
    if (j >= 0) return R.elements.get(j) || null;
  }
  return null;
}

/* Show a folded run's repeats, each closed: 80 open blocks would be a drawing nobody can
   read (or lay out quickly); the reader opens the one they want. */
function tgrUnfold(R, r) {
  if (R.state.unfolded.has(r)) return;
  R.state.unfolded.add(r);
  for (const call of R.P.D.runs[r].calls) { R.state.open.delete(call); R.state.leafOps.delete(call); }
}

/* Make node `i` drawn: show the repeats it is in, open the calls around it. A node of a
   kind the reader hid (a parameter while parameters are off) is shown by the box of its
   call: the path opens down to that call, which stays closed. */
function tgrRevealState(R, i) {
  const {D, P} = R;
  const hidden = {T: !R.state.tensors, P: !R.state.params, O: !R.state.ops || (R.state.ops === true && P.isLayout[i])}[D.kind[i]];
  if (hidden && D.parent[i] >= 0) i = D.parent[i];
  for (let x = i; x >= 0; x = D.parent[x]) {
    for (const [r, k] of P.repeatOf.get(x) || []) if (k > 0 && R.drawn.folded[r]) tgrUnfold(R, r);
    for (const [, r] of P.foldTo.get(x) || []) if (R.drawn.folded[r]) tgrUnfold(R, r);
  }
  for (let a = D.parent[i]; a >= 0; a = D.parent[a]) tgrOpen(R, a);
  if (D.kind[i] === "L" && D.needs[i] && R.drawn.vis[i] !== i) { R.state.open.delete(i); R.state.leafOps.delete(i); }
}

async function tgrReveal(R, i, zoom) {
  const before = tgrStateKey(R.state);
  tgrRevealState(R, i);
  if (tgrStateKey(R.state) !== before) await tgrUpdate(R, null);
  const element = tgrHolder(R, i);
  if (element && zoom) tgrZoomTo(R, element);
  return element;
}

function tgrStateKey(state) {
  return JSON.stringify([[...state.open].sort(), [...state.unfolded].sort(), [...state.leafOps].sort(),
    state.fold, state.tensors, state.params, state.ops, state.leaves, state.rankdir, state.side]);
}

function tgrControls(R) {
  const depth = R.$(".tgr-depth");
  for (let d = 0; d <= R.config.deepest; d++) depth.add(new Option(String(d), String(d)));
  depth.add(new Option("all", "all"));
  const opening = R.config.preset.depth;
  [...depth.options].forEach((o) => { if (o.value === (opening === null ? "all" : String(opening))) o.text += " (opening)"; });
  depth.addEventListener("change", (event) => {
    const d = depth.value === "all" ? null : Number(depth.value);
    const keep = tgrCopyState(R.state);
    R.state = {...tgrPresetState(R, d), fold: keep.fold, tensors: keep.tensors, params: keep.params,
      ops: keep.ops, leaves: keep.leaves, rankdir: keep.rankdir, side: keep.side};
    tgrUpdate(R, null, event.timeStamp);
  });
  const layoutOps = R.$(".tgr-layout-ops");
  R.root.querySelectorAll(".tgr-opt").forEach((box) => box.addEventListener("change", (event) => {
    R.state[box.dataset.opt] = box.dataset.opt === "ops" && box.checked && layoutOps.checked ? "all" : box.checked;
    const before = R.drawn.dot;
    tgrUpdate(R, null, event.timeStamp).then((done) => {
      if (done && R.drawn.dot === before) tgrStatus(R, ...(TGR_SAME[box.dataset.opt] || TGR_SAME.other));
    });
  }));
  // ops: true draws a chain of layout ops as one edge labelled reshape, "all" every op
  layoutOps.addEventListener("change", (event) => {
    if (!R.state.ops) return;
    R.state.ops = layoutOps.checked ? "all" : true;
    tgrUpdate(R, null, event.timeStamp);
  });
  R.$(".tgr-rankdir").addEventListener("change", (event) => { R.state.rankdir = event.target.value; tgrUpdate(R, null, event.timeStamp); });
  R.$(".tgr-side-control").hidden = !R.config.diff;
  R.$(".tgr-side").addEventListener("change", (event) => {
    R.state.side = event.target.value;
    R.state.unfolded = new Set();  // run numbers are the side's own
    tgrUpdate(R, null);
  });
  R.$(".tgr-fit").addEventListener("click", () => tgrFit(R));
  R.$(".tgr-reset").addEventListener("click", () => { R.state = tgrPresetState(R, R.config.preset.depth); tgrUpdate(R, null); });
  tgrColourControl(R);
  tgrSyncControls(R);
}

function tgrSyncControls(R) {
  const s = R.state;
  R.$(".tgr-depth").value = s.depth === null ? "all" : String(s.depth);
  R.root.querySelectorAll(".tgr-opt").forEach((box) => { box.checked = Boolean(s[box.dataset.opt]); });
  R.$(".tgr-layout-ops").checked = s.ops === "all";
  R.$(".tgr-layout-ops").disabled = !s.ops;
  tgrSyncParams(R);
  R.$(".tgr-rankdir").value = s.rankdir;
  R.$(".tgr-side").value = s.side;
}

/* A parameter is drawn inside its module's frame, above the ops that use it; where its
   call is drawn as a box it is counted in the box (render/view.py). While no frame holding
   one is open, "params" changes no drawing: greyed, and its title says why. It stays
   usable (unlike "layout ops" without ops): ticked, search finds parameters and opens
   the path to each. */
function tgrSyncParams(R) {
  const label = R.$('.tgr-opt[data-opt="params"]').closest("label"), {vis} = R.drawn, kind = R.D.kind;
  let room = false;
  for (let i = 0; i < vis.length && !room; i++) room = kind[i] === "P" && (vis[i] === i || vis[i] === -1);
  label.classList.toggle("tgr-idle", !room);
  label.title = room ? "draw parameters and buffers above the ops that use them, inside their module"
    : "nothing to draw here yet: parameters are drawn inside their module, above the ops that use them, " +
      "and each closed box counts its own. Open a module to its ops (double-click it, or tick inside leaves) to see them.";
}

/* The URL fragment: the state relative to its depth preset, and the selection. */
function tgrUrlKey(R) { return R.root.id === "tgr" ? "" : R.root.id + "."; }

function tgrWriteUrl(R) {
  const {D, state} = R, preset = tgrPresetState(R, state.depth), key = tgrUrlKey(R);
  const ids = (set) => [...set].map((i) => encodeURIComponent(D.ids[i])).join(",");
  const opened = new Set([...state.open].filter((i) => !preset.open.has(i)));
  const closed = new Set([...preset.open].filter((i) => !state.open.has(i)));
  const params = [["d", state.depth === null ? "all" : state.depth], ["o", ids(opened)], ["c", ids(closed)],
    ["u", ids(new Set([...state.unfolded].map((r) => R.P.D.runs[r].calls[0])))], ["l", ids(state.leafOps)],
    ["f", ["fold", "tensors", "params", "ops", "leaves"].map((k) => (state[k] === "all" ? 2 : state[k] ? 1 : 0)).join("")],
    ["r", state.rankdir], ["v", state.side], ["cb", R.colourBy || ""],
    ["s", R.selected === undefined ? "" : encodeURIComponent(D.ids[R.selected])]];
  const text = params.filter(([, v]) => v !== "").map(([k, v]) => `${key}${k}=${v}`).join("&");
  try { history.replaceState(null, "", "#" + text); } catch (error) { /* srcdoc frames have no URL to keep */ }
}

function tgrReadUrl(R) {
  let hash = "";
  try { hash = location.hash.slice(1); } catch (error) { return false; }
  const key = tgrUrlKey(R), found = {};
  for (const part of hash.split("&")) {
    const at = part.indexOf("=");
    if (at > 0 && part.startsWith(key)) found[part.slice(key.length, at)] = part.slice(at + 1);
  }
  if (!("d" in found)) return false;
  const ids = (text) => (text || "").split(",").filter(Boolean).map((x) => R.byId.get(decodeURIComponent(x))).filter((i) => i !== undefined);
  const depth = found.d === "all" ? null : Number(found.d);
  if (depth !== null && !(depth >= 0 && depth <= R.config.deepest)) return false;
  const state = tgrPresetState(R, depth);
  ids(found.o).forEach((i) => state.open.add(i));
  ids(found.c).forEach((i) => state.open.delete(i));
  ids(found.l).forEach((i) => state.leafOps.add(i));
  (found.f || "").split("").forEach((v, k) => { state[["fold", "tensors", "params", "ops", "leaves"][k]] = v === "2" ? "all" : v === "1"; });
  // a hand-edited or stale link cannot ask for a direction or side that does not exist
  if (["TB", "LR", "BT", "RL"].includes(found.r)) state.rankdir = found.r;
  if (["both", "a", "b"].includes(found.v) && (found.v === "both" || R.D.sides)) state.side = found.v;
  const firsts = new Set(ids(found.u));
  tgrSideP(R, state.side).D.runs.forEach((run, r) => { if (firsts.has(run.calls[0])) state.unfolded.add(r); });
  if (found.cb !== undefined) R.colourBy = found.cb || null;
  const selected = ids(found.s);
  if (selected.length) R.selected = selected[0];
  R.state = state;
  return true;
}
