/* torchgraphrec report: the details panel, written for a person: what the node is, its
   settings, shapes in and out, parameters, costs and times, where it sits; the raw
   attributes folded below. */

async function tgrSelect(R, i, options) {
  if (!tgrOnSide(R, i)) return;  // a diff's side shown alone has nothing there to show
  R.selected = i;
  if (options.reveal) {
    tgrShowCanvas(R);
    await tgrReveal(R, i, false);
    const element = tgrHolder(R, i);
    if (element) tgrZoomTo(R, element);
  }
  tgrPaintMarks(R);
  tgrMarkRow(R);
  tgrDetails(R, i);
  tgrWriteUrl(R);
}

/* Bring the drawing on screen (a click in the table below it selects in the drawing). */
function tgrShowCanvas(R) {
  const rect = R.host.getBoundingClientRect();
  if (rect.top < 0 || rect.bottom > window.innerHeight) R.host.scrollIntoView({block: "nearest"});
}

function tgrShapeText(shape) { return shape && shape.length ? shape.join("×") : "scalar"; }

/* A parameter's shape, ``old → new`` where a diff changed it (the union holds the new one). */
function tgrParamShapeText(R, p) {
  const changed = (R.info[p].diff_changes || {}).shape;
  return changed ? changed.map(tgrShapeText).join(" → ") : tgrShapeText(R.info[p].shape);
}

function tgrTensorText(R, t) {
  const a = R.info[t] || {};
  if (!a.shape) return a.qualname || R.D.ids[t];
  const dtype = a.dtype ? " " + a.dtype : "";
  return `${a.name ? a.name + ": " : ""}${tgrShapeText(a.shape)}${dtype}`;
}

/* Each node's neighbours, from the leaf-level edges, made once. */
function tgrNeighbours(R) {
  if (!R.neighbours) {
    const into = new Map(), outOf = new Map(), E = R.D.edges;
    for (let e = 0; e < E.length; e += 2) { pushTo(into, E[e + 1], E[e]); pushTo(outOf, E[e], E[e + 1]); }
    R.neighbours = {into, outOf};
  }
  return R.neighbours;
}

function tgrParamsOf(R, qualname) {
  if (!R.paramsByOwner) {
    R.paramsByOwner = new Map();
    R.D.kind.split("").forEach((k, p) => {
      if (k !== "P") return;
      const name = R.info[p].qualname || "", cut = name.lastIndexOf(".");
      pushTo(R.paramsByOwner, cut < 0 ? "" : name.slice(0, cut), p);
    });
  }
  return R.paramsByOwner.get(qualname) || [];
}

/* The parameters the call's own ops read that belong to a module outside it: a tied
   weight counted at the module named first for it (GPT-2's lm_head reads
   transformer.wte.weight), a weight read without calling its module. */
function tgrOthersParams(R, i, qualname) {
  const {D} = R, {into} = tgrNeighbours(R), found = new Set();
  for (let j = 0; j < D.ids.length; j++) {
    if (D.parent[j] !== i || D.kind[j] !== "O") continue;
    for (const p of into.get(j) || []) {
      const name = D.kind[p] === "P" ? R.info[p].qualname || "" : undefined;
      if (name !== undefined && !(qualname === "" || name.startsWith(qualname + "."))) found.add(p);
    }
  }
  return [...found];
}

function tgrDetails(R, i) {
  const {D, info} = R, a = info[i] || {}, kind = D.kind[i];
  const title = R.$(".tgr-details-title"), box = R.$(".tgr-details");
  title.textContent = kind === "L" ? (a.qualname || `${a.type} (the model)`) : kind === "O" ? a.name : a.qualname || a.name || a.label || D.ids[i];
  R.$(".tgr-details-hint").hidden = true;
  box.replaceChildren();
  const rows = [];
  const row = (key, value, sep) => {
    if (value !== undefined && value !== null && value !== "" && !(Array.isArray(value) && !value.length)) rows.push([key, value, sep]);
  };
  const link = (j) => ({link: j, text: D.kind[j] === "L" ? (info[j].qualname || info[j].type) : tgrTensorText(R, j)});
  if (kind === "L") tgrLayerRows(R, i, a, row, link);
  else if (kind === "O") {
    row("op", a.name + (a.args ? `(${a.args})` : ""));
    row("in module", D.parent[i] >= 0 ? link(D.parent[i]) : "(the model's top level)");
    row("inputs", (tgrNeighbours(R).into.get(i) || []).map((j) => link(j)));
    if (a.shape) row("result", `${tgrShapeText(a.shape)} ${a.dtype || ""}`);
    row("autograd", a.grad_fn);
  } else {
    const what = kind === "P" ? (a.buffer ? "buffer" : "parameter") : a.role === "input" ? "model input" : a.role === "output" ? "model output" : "tensor";
    row("kind", what);
    row("shape", a.shape ? `${tgrShapeText(a.shape)} ${a.dtype || ""}` : "");
    if (kind === "P") row("elements", a.shape.reduce((x, y) => x * y, 1).toLocaleString("en"));
    row("device", a.device);
    row("made by", (tgrNeighbours(R).into.get(i) || []).map((j) => link(j)));
    row("used by", (tgrNeighbours(R).outOf.get(i) || []).slice(0, 12).map((j) => link(j)));
  }
  tgrCostRows(R, a, row);
  tgrDiffRows(a, rows, row);
  for (const [key, value, sep] of rows) tgrRow(R, box, key, value, sep);
  tgrActions(R, i);
  tgrRaw(R, i, a);
  tgrSeries(R, a.probe_series || {}, R.D.kind[i] === "L" ? tgrCallsInForward(R, i) : 1);
}

/* How many calls of call ``i``'s module the forward it is in made: a step's statistics
   of a module are over its calls in that step (probes/annotate.py), which each call's
   panel shows. */
function tgrCallsInForward(R, i) {
  const {D} = R, top = (j) => { while (D.parent[j] >= 0) j = D.parent[j]; return j; };
  const root = top(i), qualname = R.info[i].qualname;
  let count = 0;
  for (let j = 0; j < D.ids.length; j++) {
    if (D.kind[j] === "L" && R.info[j].qualname === qualname && top(j) === root) count++;
  }
  return count;
}

function tgrLayerRows(R, i, a, row, link) {
  const {D} = R;
  row("type", a.type + (a.call_index ? ` (call #${a.call_index})` : ""));
  row("settings", a._settings || a.settings);
  const path = [];
  for (let p = D.parent[i]; p >= 0; p = D.parent[p]) {
    const name = R.info[p].qualname, above = D.parent[p] >= 0 ? R.info[D.parent[p]].qualname : "";
    path.unshift({link: p, text: !name ? R.info[p].type : above && name.startsWith(above + ".") ? name.slice(above.length + 1) : name});
  }
  row("inside", path, " › ");
  row("inputs", (a.inputs || []).map((t) => tgrTensorText(R, t)).join(", "));
  row("outputs", (a.outputs || []).map((t) => tgrTensorText(R, t)).join(", "));
  const others = tgrOthersParams(R, i, a.qualname);
  row("parameters", a.num_params ? a.num_params.toLocaleString("en") + (a.call_index ? " (shared by every call)" : "")
    : others.length ? "none of its own" : "none");
  const own = tgrParamsOf(R, a.qualname);
  if (own.length) row("its own", own.map((p) => `${R.info[p].qualname.split(".").pop()} ${tgrParamShapeText(R, p)}`).join(", "));
  if (others.length) row("also reads", others.map((p) => ({link: p, text: `${R.info[p].qualname} ${tgrParamShapeText(R, p)}`})));
  const run = tgrFoldedRunOf(R, i);
  if (run !== undefined) row("drawn for", `${R.P.D.runs[run].count} repeats of this block, folded into one`);
  if (a.training === false) row("mode", "eval");
}

function tgrCostRows(R, a, row) {
  const times = [["forward_ms", "forward"], ["self_ms", "of which its own code"],
    ["backward_ms", "backward"]];
  row("FLOPs", tgrFormat("flops", a.flops));
  row("backward FLOPs", tgrFormat("flops", a.backward_flops));
  row("saved for backward", tgrFormat("saved_bytes", a.saved_bytes));
  row("output size", tgrFormat("output_bytes", a.output_bytes));
  row("parameter size", tgrFormat("param_bytes", a.param_bytes));
  row("size", tgrFormat("bytes", a.bytes));
  for (const [key, label] of times) row(label, tgrFormat(key, a[key]));
  if (a.type !== undefined && R.D.parent[R.selected] === -1 && R.config.plain_ms !== null) {
    row("forward without the recorder", tgrFormat("forward_ms", R.config.plain_ms));
  }
  if (a.forward_ms === undefined && a.t_end_ns !== undefined && a.type !== undefined) {
    row("forward", tgrFormat("forward_ms", (a.t_end_ns - a.t_start_ns) / 1e6));
  }
  if (a.backward_ms === undefined && a.t_backward_end_ns !== undefined) {  // each pass's own time
    const passes = tgrPasses(a, "backward", "t_backward_start_ns", "t_backward_end_ns");
    row("backward", tgrFormat("backward_ms", passes.reduce((ns, [from, to]) => ns + Math.max(0, to - from), 0) / 1e6));
  }
  for (const key of Object.keys(a).filter((k) => k.includes(".") && typeof a[k] === "number")) row(key, a[key].toPrecision(4));
}

/* A diff's rows: how the node compares, and each row that changed rewritten in place as
   ``old → new`` (written by the page data as the drawing writes it). */
function tgrDiffRows(a, rows, row) {
  if (!a.diff) return;
  row("compared", {added: "added in B", removed: "removed in B", changed: "changed", same: "the same"}[a.diff]);
  for (const [key, text] of a._changes || []) {
    const at = rows.findIndex(([name]) => name === key);
    if (at >= 0) rows[at] = [key, text];
    else row(key, text);
  }
  if (a.diff_inside && a.diff === "same") row("inside", "something under it differs");
}

function tgrRow(R, table, key, value, sep) {
  const line = document.createElement("div"), name = document.createElement("span"), content = document.createElement("span");
  line.className = "tgr-row";
  name.textContent = key;
  const parts = Array.isArray(value) ? value : [value];
  parts.forEach((part, k) => {
    if (k) content.append(sep || ", ");
    if (part && typeof part === "object" && "link" in part && !tgrOnSide(R, part.link)) {
      content.append(part.text);  // the side shown lacks it: nothing to go to
    } else if (part && typeof part === "object" && "link" in part) {
      const a = document.createElement("a");
      a.href = "#";
      a.textContent = part.text;
      a.addEventListener("click", (event) => { event.preventDefault(); tgrSelect(R, part.link, {reveal: true}); });
      content.append(a);
    } else content.append(String(part));
  });
  line.append(name, content);
  table.append(line);
}

function tgrActions(R, i) {
  const box = R.$(".tgr-actions"), {D, state} = R;
  box.replaceChildren();
  if (!tgrOnSide(R, i)) {
    box.textContent = `Side ${state.side.toUpperCase()} has no such node: show both sides to see it.`;
    return;
  }
  const button = (text, act) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.addEventListener("click", () => { act(); tgrUpdate(R, tgrAnchor(R, tgrHolder(R, i), tgrAnchorIds(R, i))).then(() => tgrDetails(R, i)); });
    box.append(b);
  };
  const drawnAsCluster = R.drawn.vis[i] === i && R.drawn.isCluster(i);
  if (D.kind[i] === "L" && D.needs[i] && !drawnAsCluster) button(D.needs[i] === 1 ? "Show its ops" : "Open", () => { tgrRevealState(R, i); if (tgrOpen(R, i)) tgrOpenOneRepeat(R, i); });
  if (drawnAsCluster) button("Close", () => { state.open.delete(i); state.leafOps.delete(i); });
  const run = tgrFoldedRunOf(R, i);
  if (run !== undefined) button(`Show the ${R.P.D.runs[run].count} repeats`, () => tgrUnfold(R, run));
  const unfolded = [...state.unfolded].find((r) => R.P.D.runs[r].calls.includes(i));
  if (unfolded !== undefined) button("Fold the repeats again", () => state.unfolded.delete(unfolded));
}

function tgrRaw(R, i, a) {
  const raw = R.$(".tgr-raw"), table = R.$(".tgr-raw-table");
  raw.hidden = false;
  table.replaceChildren();
  for (const [key, value] of Object.entries({id: R.D.ids[i], ...a})) {
    if (key === "probe_series" || key.startsWith("_")) continue;
    const row = table.insertRow();
    row.insertCell().textContent = key;
    row.insertCell().textContent = typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
  }
}

function tgrSeries(R, series, calls = 1) {
  const box = R.$(".tgr-series");
  box.replaceChildren();
  for (const [name, points] of Object.entries(series)) {
    const values = points.map((p) => p[1]).filter((v) => Number.isFinite(v));
    if (!values.length) continue;
    const low = Math.min(...values), high = Math.max(...values), steps = points.map((p) => p[0]);
    const first = Math.min(...steps), span = Math.max(1, Math.max(...steps) - first), width = 260, height = 56;
    const svg = document.createElementNS(R.svg.namespaceURI, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height + (calls > 1 ? 26 : 14)}`);
    svg.setAttribute("class", "tgr-chart");
    const line = document.createElementNS(svg.namespaceURI, "polyline");
    line.setAttribute("points", points.filter((p) => Number.isFinite(p[1])).map((p) =>
      `${((p[0] - first) / span) * width},${height - (high > low ? ((p[1] - low) / (high - low)) * (height - 4) : height / 2)}`).join(" "));
    const label = document.createElementNS(svg.namespaceURI, "text");
    label.setAttribute("x", 0);
    label.setAttribute("y", height + 12);
    label.textContent = `${name} over ${points.length} step${points.length === 1 ? "" : "s"}: ${low.toPrecision(3)} – ${high.toPrecision(3)}`;
    svg.append(line, label);
    if (calls > 1) {  // a second line: the first is as wide as the chart already
      const shared = document.createElementNS(svg.namespaceURI, "text");
      shared.setAttribute("x", 0);
      shared.setAttribute("y", height + 24);
      shared.textContent = `the module's ${calls} calls a forward taken together`;
      svg.append(shared);
    }
    box.append(svg);
  }
}
