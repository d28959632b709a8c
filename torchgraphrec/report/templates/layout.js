/* torchgraphrec report: layout per module, composed, as Model Explorer does. The composer
   (compose.js) decides what is drawn, and how, for the whole view; here each open module's
   inside is laid out on its own by Graphviz (viz-js), with the modules open inside it drawn
   as boxes of their own laid-out size, and the results are placed into each other. A
   layout is cached by its DOT text, which holds only what is inside that module (its
   elements, named by node number, and the sizes of its open children): an action lays out
   again only the modules it changed and the modules around them. */

/* The containers of a composed view (-1: the page; clusters; a run's group "g<r>"), each
   with its members: its own nodes, its shared-input markers ("m<k>", placed by the composer
   as to_dot places them), then the containers inside it, in the DOT writer's order. */
function tgrContainers(P, composed) {
  const {placed, parts} = composed, members = new Map([[-1, []]]);
  const inner = [...placed.groups, ...placed.clusters];
  const position = (c) => (typeof c === "string" ? P.D.runs[+c.slice(1)].calls[0] : c);
  inner.sort((a, b) => position(a) - position(b));
  for (const c of inner) members.set(c, []);
  for (const i of placed.nodes) members.get(placed.parentOf.get(i)).push(i);
  for (const [name, , parent] of parts.marker) members.get(parent).push(name);
  for (const c of inner) members.get(placed.parentOf.get(c)).push(c);
  return members;
}

/* Where an element sits: the containers around it, innermost first, ending with -1. */
function tgrAround(placed, x, markerParent) {
  const found = [];
  const up = (y) => (markerParent && markerParent.has(y) ? markerParent.get(y) : placed.parentOf.get(y));
  for (let c = up(x); c !== undefined; c = placed.parentOf.get(c)) {
    found.push(c);
    if (c === -1) break;
  }
  return found;
}

/* Each container's edges between its members: a drawn edge belongs to the innermost
   container holding both ends, between the members that hold them (a closed-off module's
   box stands for what is inside it); inside every module it crosses, it runs from or to a
   small invisible port, so that the flow in and out is drawn.
   ``joins``: per module, each port's part outside (its title, "from->to"), to join them. */
function tgrLocalEdges(composed, members) {
  const {placed, parts} = composed, local = new Map(), ports = new Map(), joins = new Map();
  const markerParent = new Map(parts.marker.map(([name, , parent]) => [name, parent]));
  // a marker's edge is an edge of the composed view like the others, local to its module
  const edges = [...composed.edges, ...parts.marker.map(([name, t]) => [name, t])];
  const attrsOf = [...parts.edge, ...parts.marker.map(() => 'class="tgr-flow"')];
  for (const c of members.keys()) { local.set(c, new Map()); ports.set(c, []); joins.set(c, new Map()); }
  // each part keeps its edge's label: the spine enters attention by its query there too
  const add = (c, from, to, attrs, label) => {
    const key = from + ">" + to;
    if (!local.get(c).has(key)) local.get(c).set(key, [from, to, attrs, label]);
  };
  const port = (c, name, outer, side) => {
    if (!ports.get(c).includes(name)) { ports.get(c).push(name); joins.get(c).set(name, [outer, side]); }
    return name;
  };
  edges.forEach(([s, t, , label], e) => {
    const upS = [s, ...tgrAround(placed, s, markerParent)], upT = [t, ...tgrAround(placed, t)];
    const shared = new Set(upT.slice(1));
    const k = upS.findIndex((c, at) => at > 0 && shared.has(c)), top = upS[k];
    const l = upT.indexOf(top), attrs = attrsOf[e];
    const from = tgrLocalName(upS[k - 1]), to = tgrLocalName(upT[l - 1]);
    add(top, from, to, attrs, label);
    // an edge's label is written once, on its part in the module holding both ends
    const unlabelled = attrs.replace(/ xlabel=(?:"(?:[^"\\]|\\.)*"|[^\s\]]+)/, "");
    const inPort = unlabelled.replace(/ id="([^"]*)"/, ' id="$1-in"');
    const outPort = unlabelled.replace(/ id="([^"]*)"/, ' id="$1-out"');
    // a port per element outside the module its part outside leaves or reaches (the part
    // is one line, drawn once: what it carries enters or leaves at one point)
    const po = "po" + to, pi = "pi" + from;
    for (let at = 1; at < k; at++) {
      const outer = tgrLocalName(upS[at]) + "->" + (at + 1 < k ? po : to);
      add(upS[at], tgrLocalName(upS[at - 1]), port(upS[at], po, outer, "out"), outPort, label);
    }
    for (let at = 1; at < l; at++) {
      const outer = (at + 1 < l ? pi : from) + "->" + tgrLocalName(upT[at]);
      add(upT[at], port(upT[at], pi, outer, "in"), tgrLocalName(upT[at - 1]), inPort, label);
    }
  });
  return {local, ports, joins};
}

function tgrLocalName(x) { return typeof x === "string" ? x : "n" + x; }

/* The DOT of one container: its own frame (the module's cluster, as the composer writes
   it), its nodes, its open children as fixed-size boxes, its ports and edges. */
function tgrLocalDot(P, composed, c, members, edges, ports, sizes) {
  const {D} = P, {parts} = composed, inner = c !== -1, tab = inner ? "\t\t" : "\t";
  const lines = [composed.head];
  if (inner) lines.push(`\tsubgraph cluster_0 {\n\t\tgraph${parts.cluster.get(c)}\n`);
  const pairs = [...edges.values()];
  const flowing = members.filter((m) => !sizes.has(m) && typeof m === "number" && D.kind[m] !== "P").map(tgrLocalName);
  const spine = new Set(tgrSpine(P, {nodes: flowing}, pairs));
  for (const m of members) {
    const name = tgrLocalName(m);
    if (sizes.has(m)) {
      const [w, h] = sizes.get(m);
      lines.push(`${tab}${name} [label="" id="p-${name}" color=transparent fillcolor=transparent ` +
        `fixedsize=true height=${(h / 72).toFixed(3)} shape=box style=filled width=${(w / 72).toFixed(3)}]\n`);
    } else {
      const [own, extra] = parts.node.get(m);
      lines.push(`${tab}${name} [${own}${spine.has(name) ? " group=spine" : ""} ${extra}]\n`);
    }
  }
  for (const name of ports) lines.push(`${tab}${name} [label="" height=0.01 shape=point style=invis width=0.01]\n`);
  tgrLocalBeside(D, members, pairs, sizes, tab, lines);
  // the boxes that make attention's q, k, v on one rank, in order (as the composer does)
  for (const [cluster, row] of parts.rows || []) {
    if (cluster === c) lines.push(`${tab}{rank=same; ${row.map(tgrLocalName).join(" -> ")} [style=invis]}\n`);
  }
  if (inner) lines.push("\t}\n");
  for (const [from, to, attrs] of pairs) lines.push(`\t${from} -> ${to} [${attrs}]\n`);
  if (!inner) lines.push(composed.legend);
  lines.push("}\n");
  return lines.join("");
}

/* Each parameter on one rank with the first op it feeds (as the composer does). */
function tgrLocalBeside(D, members, pairs, sizes, tab, lines) {
  const own = new Set(members.filter((m) => !sizes.has(m)).map(tgrLocalName));
  for (const m of members) {
    if (sizes.has(m) || D.kind[m] !== "P") continue;
    const near = pairs.find(([from, to]) => from === tgrLocalName(m) && own.has(to) && D.kind[+to.slice(1)] !== "P");
    if (near) lines.push(`${tab}{rank=same; ${near[0]}; ${near[1]}}\n`);
  }
}

/* Numbers of a shape's outline (a polygon's points, a path's), as its box. */
function tgrOutline(shape) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const [x, y] of tgrPoints(shape).filter(Boolean)) {
    x0 = Math.min(x0, x); x1 = Math.max(x1, x);
    y0 = Math.min(y0, y); y1 = Math.max(y1, y);
  }
  return [x0, y0, x1, y1];
}

/* One laid-out container, parsed once: its SVG and its frame's box (its own coordinates). */
function tgrLaidOut(viz, dot, inner) {
  const svg = tgrParseSvg(viz.renderString(dot, {format: "svg"}));
  const frame = inner ? svg.querySelector("g.cluster path, g.cluster polygon") : null;
  return {svg, box: frame ? tgrOutline(frame) : null};
}

/* The page-wide cache of laid-out containers, by DOT text. */
var TGR_LAYOUTS = new Map();

/* Lay out what the composed view needs (the missing containers only, innermost first) and
   put the results together: one SVG, its elements' ids those of the whole view's DOT. */
function tgrLayOut(P, composed, viz) {
  const members = tgrContainers(P, composed), {local, ports, joins} = tgrLocalEdges(composed, members);
  const sizes = new Map(), laid = new Map();
  let fresh = 0;
  const visit = (c) => {
    for (const m of members.get(c)) if (members.has(m)) visit(m);
    const own = new Map(members.get(c).filter((m) => members.has(m)).map((m) => [m, sizes.get(m)]));
    const dot = tgrLocalDot(P, composed, c, members.get(c), local.get(c), ports.get(c), own);
    let found = TGR_LAYOUTS.get(dot);
    if (!found) {
      found = tgrLaidOut(viz, dot, c !== -1);
      fresh++;
      if (TGR_LAYOUTS.size > 4000) TGR_LAYOUTS.delete(TGR_LAYOUTS.keys().next().value);
      TGR_LAYOUTS.set(dot, found);
    }
    laid.set(c, found);
    if (found.box) sizes.set(c, [found.box[2] - found.box[0], found.box[3] - found.box[1]]);
  };
  visit(-1);
  const {svg} = tgrAssemble(members, laid, joins, -1);
  svg.dataset.layouts = String(fresh);
  return svg;
}

/* A container's drawing with its open children placed in their boxes, recursively, each
   edge crossing a frame joined (see tgrJoin); also its own edges (tgrOwnEdges). */
function tgrAssemble(members, laid, joins, c) {
  const svg = laid.get(c).svg.cloneNode(true), own = tgrOwnEdges(svg);
  for (const m of members.get(c)) {
    if (!members.has(m)) continue;
    const slot = svg.querySelector(`[id="p-${tgrLocalName(m)}"]`);
    if (!slot) continue;
    const child = tgrAssemble(members, laid, joins, m), box = laid.get(m).box;
    const target = tgrOutline(slot.querySelector("polygon, path"));
    const g = document.createElementNS(svg.namespaceURI, "g");
    const dx = (target[0] + target[2] - box[0] - box[2]) / 2, dy = (target[1] + target[3] - box[1] - box[3]) / 2;
    g.setAttribute("transform", `translate(${dx.toFixed(2)} ${dy.toFixed(2)})`);
    const title = tgrTitleBox(child.svg.querySelector("g.cluster text"), [dx, dy], target);
    tgrJoin(own, child.own, joins.get(m), {box: target, title, shift: [dx, dy]});
    const content = child.svg.querySelector("g.graph");
    for (const part of [...content.children]) {
      if (part.tagName === "title" || (part.tagName === "polygon" && !part.closest("g.node, g.cluster, g.edge"))) continue;
      g.appendChild(part);
    }
    slot.replaceWith(g);
  }
  return {svg, own};
}

/* A laid-out container's own edges: by title ("from->to"), by tail and by head. */
function tgrOwnEdges(svg) {
  const byTitle = new Map(), byTail = new Map(), byHead = new Map();
  for (const g of svg.querySelectorAll("g.edge")) {
    const title = g.querySelector("title"), path = g.querySelector("path");
    if (!title || !path) continue;
    const [tail, head] = title.textContent.split("->");
    byTitle.set(title.textContent, g);
    pushTo(byTail, tail, g);
    pushTo(byHead, head, g);
  }
  return {byTitle, byTail, byHead};
}

/* Each edge crossing module m's frame is laid out in two parts: outside, to or from m's box,
   which Graphviz meets wherever it likes; inside, from or to a port it places on its own.
   The part outside is drawn on to the port instead, through the frame in line with the
   port (tgrDoor): its last curve (its first, leaving m) again from where it was, each part
   inside keeping the way Graphviz found around m's nodes. ``frame``: m's box and title's,
   and where m's drawing sits in its parent's (``shift``). The arrowhead pointing at the
   frame or the port goes: the flow goes on. */
function tgrJoin(outside, inside, joins, frame) {
  const {shift} = frame;
  for (const [port, [outer, side]] of joins || []) {
    const part = outside.byTitle.get(outer), parts = (side === "in" ? inside.byTail : inside.byHead).get(port);
    if (!part || !parts) continue;
    const path = part.querySelector("path"), points = tgrPoints(path), n = points.length;
    if (n < 4) continue;
    const ends = parts.map((g) => tgrPortEnd(g, side));
    const at = [ends[0].at[0] + shift[0], ends[0].at[1] + shift[1]];
    const going = ends.map((end) => tgrUnit(end.going)).reduce((a, b) => [a[0] + b[0], a[1] + b[1]]);
    const [door, inward, past] = tgrDoor(frame, side === "in" ? points[n - 1] : points[0], at);
    if (side === "in") {
      part.querySelectorAll("polygon").forEach((arrow) => arrow.remove());
      points.splice(n - 3, 3, ...tgrBend(points[n - 4], tgrDirection(points[n - 4], points[n - 3]), door, inward),
                    door, ...(past ? [null, past] : []), ...tgrBend(past || door, inward, at, going), at);
    } else {
      const outward = [-inward[0], -inward[1]];
      points.splice(0, 3, at, ...tgrBend(at, going, past || door, outward), ...(past ? [past, null] : []), door,
                    ...tgrBend(door, outward, points[3], tgrDirection(points[2], points[3])));
    }
    tgrSetPoints(path, points);
  }
}

/* Where a line to or from a port inside a module crosses its frame, that side's inward
   direction, and where the line would cross the module's title, the point past it, to
   leave a gap (where the title stands) from the frame to there: on the side the part
   outside met (the one nearest ``met``), in line with the port. */
function tgrDoor(frame, met, port) {
  const [x0, y0, x1, y1] = frame.box, title = frame.title, room = 6;
  const near = [Math.abs(met[1] - y0), Math.abs(met[1] - y1), Math.abs(met[0] - x0), Math.abs(met[0] - x1)];
  const side = near.indexOf(Math.min(...near)), k = side < 2 ? 0 : 1, inward = [[0, 1], [0, -1], [1, 0], [-1, 0]][side];
  const clamp = (v, lo, hi) => Math.min(Math.max(v, lo + room), hi - room);
  const door = k ? [side === 2 ? x0 : x1, clamp(port[1], y0, y1)] : [clamp(port[0], x0, x1), side ? y1 : y0];
  if (!title || door[k] < title[k] || door[k] > title[k + 2]) return [door, inward, null];
  // along the inward direction, the title's far edge: the line goes on from there
  const past = door.slice(), across = 1 - k;
  past[across] = inward[across] > 0 ? title[across + 2] + 2 : title[across] - 2;
  const ahead = (q) => (q[across] - door[across]) * inward[across];
  return [door, inward, ahead(past) > 0 && ahead(past) < ahead(port) ? past : null];
}

/* A module's title's box (``box``: its frame's), from its SVG text. Graphviz writes no
   width, but places the title by it, centred a margin in from the side it is justified to. */
function tgrTitleBox(text, shift, box) {
  if (!text) return null;
  const x = +text.getAttribute("x") + shift[0], y = +text.getAttribute("y") + shift[1];
  const size = +text.getAttribute("font-size") || 11, half = Math.min(x - box[0], box[2] - x) - 8;
  return [x - half, y - size, x + half, y + size * 0.3];
}

/* Where a part inside a module meets its port, and its direction there: its start ("in"),
   or the tip of its arrowhead, which goes, its last curve drawn on to the tip ("out"). */
function tgrPortEnd(g, side) {
  const path = g.querySelector("path"), points = tgrPoints(path), n = points.length;
  if (side === "in") return {at: points[0], going: tgrDirection(points[0], points[Math.min(1, n - 1)])};
  const end = points[n - 1], going = tgrDirection(points[Math.max(n - 2, 0)], end);
  let tip = end, far = 0;
  for (const arrow of g.querySelectorAll("polygon")) {
    for (const point of tgrPoints(arrow)) {
      const d = Math.hypot(point[0] - end[0], point[1] - end[1]);
      if (d > far) { far = d; tip = point; }
    }
    arrow.remove();
  }
  if (n >= 4 && tip !== end) {
    points.splice(n - 3, 3, ...tgrBend(points[n - 4], tgrDirection(points[n - 4], points[n - 3]), tip, going), tip);
    tgrSetPoints(path, points);
  }
  return {at: tip, going};
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
