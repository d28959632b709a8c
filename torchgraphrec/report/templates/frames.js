/* torchgraphrec report: edges across the frames of modules laid out apart (layout.js). An
   open module is a box in its parent's layout, with a one-point cell where each of its ports
   is, so that Graphviz brings each edge outside to the frame in line with the port inside;
   once the layouts are put together, each part outside is drawn on to its port. */

/* Where a laid-out module's ports are, from its frame's top left (``box``): an entry port
   ("pi...") where its parts start, an exit port ("po...") at the tip of their arrowheads. */
function tgrPortPlaces(svg, box) {
  const own = tgrOwnEdges(svg), places = new Map();
  for (const [kind, ends] of [["pi", own.byTail], ["po", own.byHead]]) {
    for (const [port, parts] of ends) {
      if (!port.startsWith(kind)) continue;
      const at = tgrPortPoint(parts[0], kind === "pi");
      if (at) places.set(port, [at[0] - box[0], at[1] - box[1]]);
    }
  }
  return places;
}

/* Where a part of an edge meets its port: its start (``entering``: an entry port's), or the
   tip of its arrowhead (an exit port's); ``undefined`` for a part with no path points. */
function tgrPortPoint(g, entering, points = tgrPoints(g.querySelector("path"))) {
  if (!points.length) return undefined;
  return entering ? points[0] : tgrTip(g, points[points.length - 1]);
}

/* The arrowhead's tip of an edge whose path ends at ``end`` (``end`` where it has none). */
function tgrTip(g, end) {
  let tip = end, far = 0;
  for (const arrow of g.querySelectorAll("polygon")) {
    for (const point of tgrPoints(arrow)) {
      const d = Math.hypot(point[0] - end[0], point[1] - end[1]);
      if (d > far) { far = d; tip = point; }
    }
  }
  return tip;
}

/* The compass point of a module's box where its flow enters (``side`` "in") or leaves. */
function tgrSideOf(rankdir, side) {
  const first = {TB: "n", BT: "s", LR: "w", RL: "e"}[rankdir] || "n";
  return side === "in" ? first : {n: "s", s: "n", w: "e", e: "w"}[first];
}

/* For a container's DOT: the ends of its edges that meet an open child's port, by the
   edge's title ("from->to"), as "n12:pi4:n" (tgrPortBox names the cells). */
function tgrHooks(children, joins, laid, rankdir) {
  const hooks = new Map();
  for (const m of children) {
    const places = laid.get(m).ports;
    for (const [port, [outer, side]] of joins.get(m) || []) {
      if (!places.has(port)) continue;
      const hook = hooks.get(outer) || {};
      hook[side === "in" ? "to" : "from"] = `${tgrLocalName(m)}:${port}:${tgrSideOf(rankdir, side)}`;
      hooks.set(outer, hook);
    }
  }
  return hooks;
}

/* An open child's box in its parent's DOT, of its laid-out size: an HTML-like table with a
   one-point cell, named after the port, in line with each of its ports (``places``), on the
   side its flow enters or leaves it, and Graphviz brings each part outside to its cell. */
function tgrPortBox(name, w, h, places, rankdir) {
  const W = Math.max(3, Math.round(w)), H = Math.max(3, Math.round(h)), across = tgrFlowsDown(rankdir);
  const cell = (n, port) => tgrSpace(across ? n : 1, across ? 1 : n, port);
  const strip = (kind) => {  // one side's cells: spacers, and a port's cell where it is
    const found = [...(places || new Map())].filter(([port]) => port.startsWith(kind));
    found.sort((a, b) => a[1][across ? 0 : 1] - b[1][across ? 0 : 1]);
    const length = across ? W : H, cells = [];
    let at = 0;
    for (const [port, place] of found) {
      const k = Math.min(Math.max(Math.round(place[across ? 0 : 1] - 0.5), at), length - 1);
      if (k < at) continue;  // no room left on this side: Graphviz picks the point
      if (k > at) cells.push(...tgrPieces(k - at).map((n) => cell(n)));
      cells.push(cell(1, port));
      at = k + 1;
    }
    if (at < length) cells.push(...tgrPieces(length - at).map((n) => cell(n)));
    return cells;
  };
  // the first row (column) holds the ports on the side the flow enters by where it enters
  // at the top (left)
  const start = "nw".includes(tgrSideOf(rankdir, "in")) ? "pi" : "po", end = start === "pi" ? "po" : "pi";
  const nested = (cells) => `<TABLE ${TGR_BARE}>${across ? `<TR>${cells.join("")}</TR>` : cells.map((c) => `<TR>${c}</TR>`).join("")}</TABLE>`;
  const middle = across ? tgrSpace(W, H - 2) : tgrSpace(W - 2, H);
  const body = across
    ? `<TR><TD>${nested(strip(start))}</TD></TR><TR>${middle}</TR><TR><TD>${nested(strip(end))}</TD></TR>`
    : `<TR><TD>${nested(strip(start))}</TD>${middle}<TD>${nested(strip(end))}</TD></TR>`;
  return `${name} [id="p-${name}" shape=none margin=0 label=<<TABLE ${TGR_BARE} BGCOLOR="transparent">${body}</TABLE>>]`;
}

/* An HTML-like table without borders or space around its cells. */
var TGR_BARE = 'BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"';

/* Graphviz ignores a cell's WIDTH or HEIGHT above this, with a warning, and lays the box
   out at its default size: a module laid out taller (wider) is drawn over its neighbours. */
var TGR_CELL_MOST = 65535;

/* ``n`` points as few whole lengths as each stay within TGR_CELL_MOST. */
function tgrPieces(n) {
  const count = Math.max(1, Math.ceil(n / TGR_CELL_MOST)), pieces = [];
  for (let k = 0; k < count; k++) pieces.push(Math.floor((n * (k + 1)) / count) - Math.floor((n * k) / count));
  return pieces;
}

/* An empty cell of ``w`` by ``h`` points (``port``: its name). Longer than one cell may be,
   it is a table of cells: a row across its width, then one cell under another down the
   rest of its height. */
function tgrSpace(w, h, port) {
  const fixed = (x, y, more = "") => `<TD${more} FIXEDSIZE="TRUE" WIDTH="${x}" HEIGHT="${y}"></TD>`;
  const across = tgrPieces(w), down = tgrPieces(h);
  if (across.length === 1 && down.length === 1) return fixed(w, h, port ? ` PORT="${port}"` : "");
  const span = across.length > 1 ? ` COLSPAN="${across.length}"` : "";
  const rows = [`<TR>${across.map((x) => fixed(x, down[0])).join("")}</TR>`,
    ...down.slice(1).map((y) => `<TR>${fixed(across[0], y, span)}</TR>`)];
  return `<TD><TABLE ${TGR_BARE}>${rows.join("")}</TABLE></TD>`;
}

/* A laid-out container's own edges: by title ("from->to"), by tail and by head. */
function tgrOwnEdges(svg) {
  const byTitle = new Map(), byTail = new Map(), byHead = new Map();
  for (const g of svg.querySelectorAll("g.edge")) {
    const title = g.querySelector("title"), path = g.querySelector("path");
    if (!title || !path) continue;
    // an end's compass point (q, k, v enter attention at its corners: "n41->n59:nw") aside
    const [tail, head] = title.textContent.split("->").map((end) => end.split(":")[0]);
    byTitle.set(tail + "->" + head, g);
    pushTo(byTail, tail, g);
    pushTo(byHead, head, g);
  }
  return {byTitle, byTail, byHead};
}

/* Each edge crossing module m's frame is laid out in two parts: outside, to or from m's box,
   whose port cell Graphviz brings it to (tgrPortBox); inside, from or to that port, on the
   rank where the flow enters or leaves m (tgrLocalDot). The part outside is drawn on
   through the frame to the port (tgrDoor); where it does not meet the frame in line with
   the port (a port with no room for its cell), its last curve (its first, leaving m) ends
   there instead, as it began and going as it did. Each part inside keeps the way Graphviz
   found around m's nodes. ``frame``: m's box and title's, the flow's direction, and where
   m's drawing sits in its parent's (``shift``). The arrowhead pointing at the frame or the
   port goes: the flow goes on. */
function tgrJoin(outside, inside, joins, frame) {
  const {shift} = frame;
  for (const [port, [outer, side]] of joins || []) {
    const part = outside.byTitle.get(outer), parts = (side === "in" ? inside.byTail : inside.byHead).get(port);
    if (!part || !parts) continue;
    const path = part.querySelector("path"), points = tgrPoints(path), n = points.length;
    if (n < 4) continue;
    const ends = tgrPortEnds(parts, side);
    const at = [ends.at[0] + shift[0], ends.at[1] + shift[1]];
    const [door, inward, past] = tgrDoor(frame, side, at), gap = past ? [null, past] : [];
    const outward = [-inward[0], -inward[1]], met = side === "in" ? points[n - 1] : points[0];
    const k = inward[0] ? 1 : 0;  // along the frame's side: y where the flow runs sideways
    const inLine = Math.abs(met[k] - door[k]) < 1.5;
    if (side === "in") {
      part.querySelectorAll("polygon").forEach((arrow) => arrow.remove());
      const reach = Math.hypot(points[n - 2][0] - met[0], points[n - 2][1] - met[1]);
      const onward = inLine ? tgrBend(met, inward, door, inward) : [[door[0] + outward[0] * reach, door[1] + outward[1] * reach]];
      points.splice(inLine ? n : n - 2, inLine ? 0 : 2, ...onward, door, ...gap, ...tgrBend(past || door, inward, at, ends.going), at);
    } else {
      const reach = Math.hypot(points[1][0] - met[0], points[1][1] - met[1]);
      const onward = inLine ? [] : [[door[0] + outward[0] * reach, door[1] + outward[1] * reach]];
      points.splice(0, inLine ? 1 : 2, at, ...tgrBend(at, ends.going, past || door, outward), ...gap.reverse(), door, ...onward);
    }
    tgrSetPoints(path, points);
  }
}

/* Where a module's flow enters it (``side`` "in", on the flow's first rank) or leaves it
   ("out", its last), the point on its frame in line with the port ``at``, that side's
   inward direction, and where that line would cross the module's title, the point past
   it: the line leaves a gap from the frame to there, where the title stands. */
function tgrDoor(frame, side, at) {
  const [x0, y0, x1, y1] = frame.box, title = frame.title, room = 6;
  const edge = "nswe".indexOf(tgrSideOf(frame.rankdir, side)), k = edge < 2 ? 0 : 1;
  const inward = [[0, 1], [0, -1], [1, 0], [-1, 0]][edge];
  const clamp = (v, lo, hi) => Math.min(Math.max(v, lo + room), hi - room);
  const door = k ? [edge === 2 ? x0 : x1, clamp(at[1], y0, y1)] : [clamp(at[0], x0, x1), edge ? y1 : y0];
  if (!title || door[k] < title[k] || door[k] > title[k + 2]) return [door, inward, null];
  // along the inward direction, the title's far edge: the line goes on from there
  const past = door.slice(), across = 1 - k;
  past[across] = inward[across] > 0 ? title[across + 2] + 2 : title[across] - 2;
  const ahead = (q) => (q[across] - door[across]) * inward[across];
  return [door, inward, ahead(past) > 0 && ahead(past) < ahead(at) ? past : null];
}

/* A module's title's box (``box``: its frame's), from its SVG text. Graphviz writes no
   width, but places the title by it, centred a margin in from the side it is justified to. */
function tgrTitleBox(text, shift, box) {
  if (!text) return null;
  const x = +text.getAttribute("x") + shift[0], y = +text.getAttribute("y") + shift[1];
  const size = +text.getAttribute("font-size") || 11, half = Math.min(x - box[0], box[2] - x) - 8;
  return [x - half, y - size, x + half, y + size * 0.3];
}

/* Where the parts inside a module meet their port, and their direction there: their
   start ("in"), or the tip of their arrowheads, which go ("out"); each part is drawn on to
   that one point (Graphviz ends them a little apart on the port's outline). */
function tgrPortEnds(parts, side) {
  let at = null;
  const going = [0, 0];
  for (const g of parts) {
    const path = g.querySelector("path"), points = tgrPoints(path), n = points.length;
    if (n < 4) continue;
    const arrows = [...g.querySelectorAll("polygon")];
    if (side === "in") {
      at = at || tgrPortPoint(g, true, points);
      const away = tgrUnit(tgrDirection(points[0], points[1]));
      points.splice(0, 1, at);
      going[0] += away[0]; going[1] += away[1];
    } else {
      const end = points[n - 1], toward = tgrDirection(points[n - 2], end);
      at = at || tgrPortPoint(g, false, points);
      arrows.forEach((arrow) => arrow.remove());
      points.splice(n - 3, 3, ...tgrBend(points[n - 4], tgrDirection(points[n - 4], points[n - 3]), at, toward), at);
      const unit = tgrUnit(toward);
      going[0] += unit[0]; going[1] += unit[1];
    }
    tgrSetPoints(path, points);
  }
  return {at: at || [0, 0], going};
}

/* Writes ``points`` as a Graphviz edge's path (each ``null``: a gap, the next point a move). */
function tgrSetPoints(path, points) {
  let d = "", move = true;
  for (const point of points) {
    if (point === null) { move = true; continue; }
    d += move ? `M${tgrPoint(point)}C` : `${tgrPoint(point)} `;
    move = false;
  }
  path.setAttribute("d", d.replace(/[ C]+(?=M|$)/g, ""));
}

/* A Graphviz edge's path (M, then cubic after cubic; ``null`` where it moves again, see
   tgrSetPoints), or a polygon, as its points. */
function tgrPoints(shape) {
  const numbers = /-?\d+(\.\d+)?(e-?\d+)?/g, points = [];
  const moves = (shape.getAttribute("d") || shape.getAttribute("points") || "").split("M").filter((part) => part.trim());
  moves.forEach((move, at) => {
    if (at) points.push(null);
    const n = (move.match(numbers) || []).map(Number);
    for (let k = 0; k + 1 < n.length; k += 2) points.push([n[k], n[k + 1]]);
  });
  return points;
}

function tgrDirection(a, b) { return [b[0] - a[0], b[1] - a[1]]; }

function tgrUnit(v) { const h = Math.hypot(v[0], v[1]); return h ? [v[0] / h, v[1] / h] : [0, 0]; }

/* The control points of a cubic from a to b that leaves a going ``out`` and reaches b going
   ``inward`` (each a direction; none: the straight line's). */
function tgrBend(a, out, b, inward) {
  const line = [b[0] - a[0], b[1] - a[1]], length = Math.hypot(line[0], line[1]), third = length / 3;
  const straight = tgrUnit(line), unit = (v) => (Math.hypot(v[0], v[1]) ? tgrUnit(v) : straight);
  const u = unit(out), w = unit(inward);
  return [[a[0] + u[0] * third, a[1] + u[1] * third], [b[0] - w[0] * third, b[1] - w[1] * third]];
}

function tgrPoint([x, y]) { return `${x.toFixed(2)},${y.toFixed(2)}`; }
