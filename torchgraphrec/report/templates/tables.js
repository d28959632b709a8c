/* torchgraphrec report: the module table (sortable, cost columns with inline bars) and the
   timeline (forward and backward per call, nested by depth, coloured by the drawing's
   scale). A click on a row or a bar selects that call in the drawing. */

/* The table's columns: a key into the node's attributes (or a computed value), a heading,
   and whether it is a number drawn with a bar. Cost columns only where recorded. */
function tgrColumns(R, calls) {
  const has = (key) => calls.some((i) => typeof R.info[i][key] === "number");
  const columns = [
    {key: "module", head: "module", value: (i) => R.info[i].qualname || "(model)"},
    // a diff's: how each call differs, as its box is drawn (changes inside it count)
    ...(calls.some((i) => R.info[i].diff_box_status !== undefined)
      ? [{key: "diff", head: "diff", value: (i) => TGR_DIFF_WORDS[R.info[i].diff_box_status] || ""}] : []),
    {key: "type", head: "type", value: (i) => R.info[i].type},
    {key: "call", head: "call", value: (i) => R.info[i].call_index, number: true},
    {key: "output", head: "output", value: (i) => (R.info[i].outputs || []).map((t) => tgrShapeText((R.info[t] || {}).shape)).join(", ")},
    {key: "num_params", head: "params", value: (i) => R.info[i].num_params, number: true, bar: true},
  ];
  const costs = [["flops", "FLOPs"], ["backward_flops", "backward FLOPs"], ["saved_bytes", "saved for backward"],
    ["forward_ms", "forward"], ["self_ms", "self"], ["backward_ms", "backward"]];  // cells carry their unit
  for (const [key, head] of costs) {
    if (has(key)) columns.push({key, head, value: (i) => R.info[i][key], number: true, bar: true});
  }
  if (!has("forward_ms") && calls.some((i) => R.info[i].t_end_ns !== undefined)) {
    // a graph without costs: its calls' times as recorded
    columns.push({key: "forward_ms", head: "forward", number: true, bar: true,
      value: (i) => (R.info[i].t_end_ns - R.info[i].t_start_ns) / 1e6});
  }
  return columns;
}

/* A diff's statuses as the table says them (the legend's words). */
var TGR_DIFF_WORDS = {added: "added", removed: "removed", changed: "changed", inside: "affected"};

function tgrTables(R) {
  const calls = [];
  for (let i = 0; i < R.D.ids.length; i++) if (R.D.kind[i] === "L") calls.push(i);
  const columns = tgrColumns(R, calls), table = R.$(".tgr-calls");
  const high = new Map(columns.filter((c) => c.bar).map((c) => [c.key, Math.max(0, ...calls.map((i) => c.value(i) || 0))]));
  const head = table.tHead.rows[0];
  head.replaceChildren();
  for (const column of columns) {
    const th = document.createElement("th");
    th.dataset.key = column.key;
    th.textContent = column.head;
    if (column.number) th.className = "tgr-num";
    head.append(th);
  }
  let order = calls.slice(), sortKey = null, direction = 1;
  const draw = () => {
    const body = table.tBodies[0], rows = [];
    for (const i of order) {
      const row = document.createElement("tr");
      row.dataset.node = String(i);
      for (const column of columns) row.append(tgrCell(R, column, i, high.get(column.key)));
      row.addEventListener("click", () => tgrSelect(R, i, {reveal: true}));
      rows.push(row);
    }
    body.replaceChildren(...rows);
    tgrMarkRow(R);
  };
  head.addEventListener("click", (event) => {
    const th = event.target.closest("th");
    if (!th) return;
    const column = columns.find((c) => c.key === th.dataset.key);
    // numbers start with the largest: "where does it go" is the question
    direction = sortKey === column.key ? -direction : column.number ? -1 : 1;
    sortKey = column.key;
    const key = (i) => { const v = column.value(i); return v === undefined || v === null ? -Infinity : v; };
    order = calls.slice().sort((a, b) => (key(a) < key(b) ? -direction : key(a) > key(b) ? direction : a - b));
    head.querySelectorAll("th").forEach((h) => h.classList.remove("tgr-sorted-up", "tgr-sorted-down"));
    th.classList.add(direction > 0 ? "tgr-sorted-up" : "tgr-sorted-down");
    draw();
  });
  R.tableRows = () => table.tBodies[0].rows;
  draw();
  tgrTimeline(R);
}

/* What a diff's changed call had in a text column on side A (its type, its outputs'
   shapes), or ``undefined``: the column says ``old → new``, as the numbers' do. */
function tgrWas(R, key, i) {
  const changes = R.info[i].diff_changes || {};  // a diff's [old, new]
  if (key === "type" && changes.type) return changes.type[0];
  if (key === "output" && changes.output_shapes) return changes.output_shapes[0].map(tgrShapeText).join(", ");
  return undefined;
}

function tgrCell(R, column, i, high) {
  const cell = document.createElement("td"), value = column.value(i);
  if (column.key === "module") {
    cell.style.paddingLeft = `${8 + 12 * R.D.depth[i]}px`;
  }
  if (!column.number) {
    // long names and many outputs are clipped or wrapped (the whole text on hover): the
    // table fits a 1,400 px window whatever the model
    const was = tgrWas(R, column.key, i);
    const text = value === undefined ? "" : was !== undefined ? `${was} → ${value}` : String(value);
    if (column.key === "module" || column.key === "type" || column.key === "output") {
      const span = document.createElement("span");
      span.className = `tgr-clip tgr-col-${column.key}`;
      // a long path keeps its end, which tells the calls apart
      span.textContent = column.key === "module" && text.length > 44 ? `…${text.slice(-43)}` : text;
      cell.title = text;
      cell.append(span);
    } else {
      cell.textContent = text;
      if (column.key === "diff" && text) cell.className = `tgr-d-${R.info[i].diff_box_status}`;
    }
    return cell;
  }
  cell.className = "tgr-num";
  if (value === undefined || value === null || !Number.isFinite(value)) return cell;
  cell.textContent = column.key === "call" ? String(value) : tgrFormat(column.key, value);
  const changed = (R.info[i].diff_changes || {})[column.key];  // a diff's [old, new]
  if (changed && column.key !== "call") cell.textContent = `${tgrFormat(column.key, changed[0])} → ${cell.textContent}`;
  cell.dataset.value = String(value);
  if (column.bar && high > 0) {
    const bar = document.createElement("span");
    bar.className = "tgr-bar";
    bar.style.width = `${(100 * Math.max(0, value)) / high}%`;
    cell.prepend(bar);
  }
  return cell;
}

/* The selected call's row and bars highlighted; a diff's calls that the side shown lacks
   greyed (a click on them selects nothing: nothing of theirs is drawn). */
function tgrMarkRow(R) {
  if (!R.tableRows) return;
  const other = {a: "B", b: "A"}[R.state.side];
  const bars = R.root.querySelectorAll(".tgr-timeline rect");
  for (const element of [...R.tableRows(), ...bars]) {
    const i = Number(element.dataset.node), absent = !tgrOnSide(R, i);
    element.classList.toggle("tgr-row-selected", i === R.selected && element.tagName === "TR");
    element.classList.toggle("tgr-absent", absent);
    if (element.tagName === "TR") element.title = absent ? `only in side ${other}: show both sides to see it` : "";
  }
  R.root.querySelectorAll(".tgr-timeline rect.tgr-selected").forEach((r) => r.classList.remove("tgr-selected"));
  if (R.selected !== undefined) {
    R.root.querySelectorAll(`.tgr-timeline rect[data-node="${R.selected}"]`).forEach((r) => r.classList.add("tgr-selected"));
  }
}

/* Two panels sharing nothing but the rows: the forward, then the backward (each on its
   own time axis, since they run one after the other), a call's bar inside its parent's.
   A diff's union holds two runs, each on its own clock: its timeline is side B's run (the
   calls both sides have carry B's times), the calls only A ran left out. */
function tgrTimeline(R) {
  const box = R.$(".tgr-timeline"), note = R.$(".tgr-timeline-note");
  box.replaceChildren();
  const calls = [];
  let onlyA = 0;
  for (let i = 0; i < R.D.ids.length; i++) {
    if (R.D.kind[i] !== "L" || R.info[i].t_start_ns === undefined) continue;
    if (R.info[i].diff === "removed") onlyA++;
    else calls.push(i);
  }
  if (!calls.length) { note.textContent = "No module calls were timed."; return; }
  const passes = [["forward", "t_start_ns", "t_end_ns"], ["backward", "t_backward_start_ns", "t_backward_end_ns"]];
  const drawn = passes.filter(([, start]) => calls.some((i) => R.info[i][start] !== undefined));
  const left = onlyA ? `; the ${onlyA} call${onlyA === 1 ? "" : "s"} only side A made are left out (another run, another clock)` : "";
  const side = R.D.sides ? `Side B's run (new)${left}. ` : "";
  note.textContent = side + "Times of the model's own work (the recorder's left out). Rows are call depth. " +
    (R.colourBy ? `Bars coloured by ${R.config.colour.headings[R.colourBy] || R.colourBy}, as the drawing is, over every call. ` : "") +
    "Click a bar to select the call." + (drawn.length < 2 ? " No backward was recorded." : "");
  // the drawing's palette and rule, over the calls the timeline shows
  const scale = R.colourBy ? tgrScaleOf(calls.map((i) => tgrValue(R, i)).filter((v) => v !== undefined)) : null;
  for (const [pass, start, end] of drawn) box.append(tgrTimelinePanel(R, calls, pass, start, end, scale));
  tgrMarkRow(R);
}

function tgrTimelinePanel(R, calls, pass, startKey, endKey, scale) {
  const ns = R.svg ? R.svg.namespaceURI : document.documentElement.namespaceURI;
  const timed = calls.filter((i) => R.info[i][startKey] !== undefined && R.info[i][endKey] !== undefined);
  const start = Math.min(...timed.map((i) => R.info[i][startKey]));
  const span = Math.max(1, Math.max(...timed.map((i) => R.info[i][endKey])) - start);
  const deepest = Math.max(...timed.map((i) => R.D.depth[i]));
  const width = 1000, lane = 14, top = 16, height = top + (deepest + 1) * lane + 4;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", `tgr-timeline-${pass}`);
  const caption = document.createElementNS(ns, "text");
  caption.setAttribute("x", 2);
  caption.setAttribute("y", 11);
  caption.textContent = `${R.D.sides ? "side B, " : ""}${tgrTimelineCaption(R, timed, pass, startKey, endKey)}: ` +
    `${tgrFormat("forward_ms", span / 1e6)}${tgrTimelineSpread(R, timed, pass, startKey, endKey)}`;
  svg.append(caption);
  for (const i of timed) {
    const pieces = tgrPasses(R.info[i], pass, startKey, endKey);
    pieces.forEach(([from, to], k) => tgrTimelineBar(R, svg, ns, i, pass, from, to, start, span, scale,
      pieces.length > 1 ? `pass ${k + 1} of ${pieces.length}` : ""));
  }
  return svg;
}

/* What a timeline's axis spans: one forward (or its backward), or several, when the calls
   drawn ran in more than one forward or backward pass. */
function tgrTimelineCaption(R, timed, pass) {
  const forwards = timed.filter((i) => R.D.depth[i] === 0).length;
  return forwards > 1 ? `${forwards} ${pass === "forward" ? "forwards" : "forwards' backward passes"}` : pass;
}

function tgrTimelineSpread(R, timed, pass, startKey, endKey) {
  const several = timed.filter((i) => R.D.depth[i] === 0).length > 1 ||
    timed.some((i) => tgrPasses(R.info[i], pass, startKey, endKey).length > 1);
  if (!several) return "";
  return pass === "forward" ? ", from the first start to the last end (the time between them is no call's)" :
    ", from the first pass's start to the last one's end; a bar per pass";
}

/* A call's bars on a timeline: one from its start to its end, or on the backward's, one
   per backward pass through it where several ran (the time between them is not its); each
   bar's tooltip says its own time (``piece``: which pass it is, where there are several). */
function tgrPasses(a, pass, startKey, endKey) {
  const spans = pass === "backward" ? a.t_backward_spans_ns : undefined;
  if (!spans) return [[a[startKey], a[endKey]]];
  const pieces = [];
  for (let k = 0; k + 1 < spans.length; k += 2) pieces.push([spans[k], spans[k + 1]]);
  return pieces;
}

function tgrTimelineBar(R, svg, ns, i, pass, from, to, start, span, scale, piece) {
  const a = R.info[i], width = 1000, lane = 14, top = 16;
  const rect = document.createElementNS(ns, "rect");
  rect.setAttribute("x", (((from - start) / span) * width).toFixed(2));
  rect.setAttribute("y", top + R.D.depth[i] * lane);
  rect.setAttribute("width", Math.max(0.5, ((to - from) / span) * width).toFixed(2));
  rect.setAttribute("height", lane - 2);
  rect.setAttribute("class", `tgr-${pass}`);
  rect.dataset.node = String(i);
  const value = tgrValue(R, i);
  if (scale && value !== undefined) rect.style.fill = tgrColourOf(R, scale, value)[0];
  const title = document.createElementNS(ns, "title");
  const ms = pass === "forward" ? a.forward_ms : a.backward_ms;
  const total = tgrFormat("forward_ms", ms !== undefined ? ms : (to - from) / 1e6);
  const time = piece ? `${piece}: ${tgrFormat("forward_ms", (to - from) / 1e6)} (all passes ${total})` : total;
  title.textContent = `${a.qualname || "(model)"} (${a.type}) ${pass} ${time}` +
    (value !== undefined && R.colourBy ? ` · ${tgrFormat(R.colourBy, value)}` : "");
  rect.append(title);
  rect.addEventListener("click", () => tgrSelect(R, i, {reveal: true}));
  svg.append(rect);
  const label = tgrBarLabel(R, ns, a, rect, value !== undefined && scale ? tgrColourOf(R, scale, value)[1] : null);
  if (label) svg.append(label);
}

/* A bar's name, drawn inside it where the bar is wide enough for the name, else for its
   last part (``q_proj``); a number (a ``Sequential``'s) with its type where that fits
   (``0: Linear``); none where not even the name's last part fits. Clicks go through to
   the bar. */
var TGR_LABEL_CHAR = 5.6;  // px per character of the 10px label font, on the 1000-wide axis
function tgrBarLabel(R, ns, a, rect, ink) {
  const width = Number(rect.getAttribute("width")) - 4;
  const name = a.qualname || "(model)", short = name.split(".").pop();
  const typed = /^\d+$/.test(short) && a.type ? [`${name}: ${a.type}`, `${short}: ${a.type}`] : [];
  const text = [...typed, name, short].find((t) => t.length * TGR_LABEL_CHAR <= width);
  if (!text) return null;
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", (Number(rect.getAttribute("x")) + 2).toFixed(2));
  label.setAttribute("y", Number(rect.getAttribute("y")) + 9.5);
  label.setAttribute("class", "tgr-bar-label");
  if (ink) label.style.fill = ink;
  label.textContent = text;
  return label;
}
