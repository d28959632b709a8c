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
  const ends = new Map();  // container -> part's key -> the elements its edge joins
  const markerParent = new Map(parts.marker.map(([name, , parent]) => [name, parent]));
  // a marker's edge is an edge of the composed view like the others, local to its module
  const edges = [...composed.edges, ...parts.marker.map(([name, t]) => [name, t])];
  const attrsOf = [...parts.edge, ...parts.marker.map(() => 'class="tgr-flow"')];
  for (const c of members.keys()) {
    local.set(c, new Map()); ports.set(c, []); joins.set(c, new Map()); ends.set(c, new Map());
  }
  // each part keeps its edge's label: the spine enters attention by its query there too
  const add = (c, from, to, attrs, label, edge) => {
    const key = from + ">" + to;
    if (!local.get(c).has(key)) { local.get(c).set(key, [from, to, attrs, label]); ends.get(c).set(key, edge); }
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
    // the ranks an edge into an op under its parameters spans belong to its part that ends
    // at the op (DotWriter.flow_rank_attr); elsewhere they would add empty ranks
    const rankless = (a) => a.replace(/ minlen=\d+| weight=\d+/g, "");
    add(top, from, to, l === 1 ? attrs : rankless(attrs), label);
    // an edge's label is written once, on its part in the module holding both ends
    const unlabelled = attrs.replace(/ x?label=(?:"(?:[^"\\]|\\.)*"|[^\s\]]+)/, "");
    const inPort = unlabelled.replace(/ id="([^"]*)"/, ' id="$1-in"');
    const outPort = rankless(unlabelled.replace(/ id="([^"]*)"/, ' id="$1-out"'));
    // a port per element outside the module its part outside leaves or reaches (the part
    // is one line, drawn once: what it carries enters or leaves at one point), and per kind
    // of edge: a weight and a flow from one module (a second call's) are two lines
    const kind = attrs.includes('class="tgr-param"') ? "_p" : "";
    const po = "po" + to + kind, pi = "pi" + from + kind;
    for (let at = 1; at < k; at++) {
      const outer = tgrLocalName(upS[at]) + "->" + (at + 1 < k ? po : to);
      add(upS[at], tgrLocalName(upS[at - 1]), port(upS[at], po, outer, "out"), outPort, label, [s, t]);
    }
    for (let at = 1; at < l; at++) {
      const outer = (at + 1 < l ? pi : from) + "->" + tgrLocalName(upT[at]);
      add(upT[at], port(upT[at], pi, outer, "in"), tgrLocalName(upT[at - 1]),
          at === 1 ? inPort : rankless(inPort), label, [s, t]);
    }
  });
  return {local, ports, joins, ends};
}

/* Where more than ``limit`` parts leave one entry port of a module (the KV cache of a
   decode step, each layer's from the prefill's layer beside it), or reach one exit port,
   each is drawn between a marker and where it goes inside instead: the marker names what
   is outside, as a shared input's does (compose.js tgrMarkers). From a port on the frame
   each part would run the module's length, and Graphviz's work grows with those lengths
   (seconds for 80 layers). The part outside then ends at the module's frame. Returns each
   module's markers, ``[name, attributes]``. */
function tgrFannedPorts(P, {local, ports, joins, ends}, limit) {
  const {D} = P, found = new Map();
  for (const [c, parts] of local) {
    // numbered within the module: its DOT, the key its layout is kept by, stays the same
    // where other modules change
    let k = 0;
    const fanned = new Map();
    for (const [key, [from, to]] of parts) {
      if (from.startsWith("pi")) pushTo(fanned, from, key);
      else if (to.startsWith("po")) pushTo(fanned, to, key);
    }
    for (const [port, keys] of fanned) {
      const entering = port.startsWith("pi"), named = (key) => ends.get(c).get(key)[entering ? 0 : 1];
      if (keys.length <= limit || keys.some((key) => typeof named(key) !== "number")) continue;
      for (const key of keys) {
        const [from, to, attrs, label] = parts.get(key), outside = named(key), name = "q" + k;
        // a marker a part leaves for points on: where it goes, not where it came from
        const text = D.marker_names[D.marker[outside]], bare = text[0] === '"' ? text.slice(1, -1) : text;
        const said = entering ? text : `"→ ${bare}"`;
        pushTo(found, c, [name, `label=${said} class="tgr-marker" ` +
                                `id="m-${D.xid[outside]}-${tgrLocalName(c)}q${k++}" ${D.marker_style}`]);
        const [a, b] = entering ? [name, to] : [from, name];
        parts.delete(key);
        parts.set(a + ">" + b, [a, b, attrs, label]);
        // the part inside the child it ran on from or to, joined to this part now
        const child = joins.get(entering ? tgrContainerOf(to) : tgrContainerOf(from));
        for (const [, join] of child || []) {
          if (join[0] === from + "->" + to) join[0] = a + "->" + b;
        }
      }
      ports.set(c, ports.get(c).filter((name) => name !== port));
      joins.get(c).delete(port);
    }
  }
  return found;
}

/* The container a local name stands for, where it stands for one ("n12": 12). */
function tgrContainerOf(name) { return name.startsWith("n") ? +name.slice(1) : name; }

function tgrLocalName(x) { return typeof x === "string" ? x : "n" + x; }

/* The DOT of one container: its own frame (the module's cluster, as the composer writes
   it), its nodes, its open children as fixed-size boxes (with their ports: tgrPortBox), its
   own ports and edges (``hooks``: the ends of those that meet a child's port, by title). */
function tgrLocalDot(P, composed, c, members, edges, ports, sizes, hooks, markers = []) {
  const {D} = P, {parts} = composed, inner = c !== -1, tab = inner ? "\t\t" : "\t";
  const lines = [composed.head];
  if (inner) lines.push(`\tsubgraph cluster_0 {\n\t\tgraph${parts.cluster.get(c)}\n`);
  const pairs = [...edges.values()];
  const flowing = members.filter((m) => !sizes.has(m) && typeof m === "number" && D.kind[m] !== "P").map(tgrLocalName);
  const spine = new Set(tgrSpine(P, {nodes: flowing}, pairs));
  for (const m of members) {
    const name = tgrLocalName(m);
    if (sizes.has(m)) {
      const [w, h, places] = sizes.get(m);
      lines.push(`${tab}${tgrPortBox(name, w, h, places, composed.rankdir)}\n`);
    } else {
      const [own, extra] = parts.node.get(m);
      lines.push(`${tab}${name} [${own}${spine.has(name) ? " group=spine" : ""} ${extra}]\n`);
    }
  }
  for (const [name, own] of markers) lines.push(`${tab}${name} [${own}]\n`);
  // in the order of the first member each port feeds or is fed by: Graphviz starts its
  // ordering from the text's, and q, k and v keep their row's order beside a port the
  // rotary embedding's cos and sin enter by, which feeds ops further down
  const first = new Map(members.map((m, k) => [tgrLocalName(m), k]));
  const reach = new Map(ports.map((name) => [name, Infinity]));
  for (const [from, to] of pairs) {
    for (const [port, other] of [[from, to], [to, from]]) {
      if (reach.has(port)) reach.set(port, Math.min(reach.get(port), first.get(other) ?? Infinity));
    }
  }
  const ordered = [...ports].sort((a, b) => reach.get(a) - reach.get(b));
  // a module with nothing to draw in this view (its ops on the other side of a diff): its
  // frame and title still, which Graphviz draws only around a node
  if (inner && !members.length && !ports.length) lines.push(`${tab}nothing [label="" height=0.01 shape=point style=invis width=0.01]\n`);
  for (const name of ordered) lines.push(`${tab}${name} [label="" height=0.01 shape=point style=invis width=0.01]\n`);
  // where the flow enters the module and where it leaves: else Graphviz puts an entry port
  // beside its targets, however far inside they are, and the line to it crosses the rest
  for (const [kind, rank] of [["pi", "min"], ["po", "max"]]) {
    const row = ordered.filter((name) => name.startsWith(kind));
    if (row.length) lines.push(`${tab}{rank=${rank}; ${row.join("; ")}}\n`);
  }
  // the boxes that make attention's q, k, v on one rank, in order (as the composer does)
  for (const [cluster, row] of parts.rows || []) {
    if (cluster === c) lines.push(`${tab}{rank=same; ${row.map(tgrLocalName).join(" -> ")} [style=invis]}\n`);
  }
  if (inner) lines.push("\t}\n");
  for (const [from, to, attrs] of pairs) {
    const hook = hooks.get(from + "->" + to) || {};
    // a child's port, not the compass point an edge enters attention by, is where it ends
    let own = attrs;
    if (hook.to) own = own.replace(/ headport=\S+/, "");
    if (hook.from) own = own.replace(/ tailport=\S+/, "");
    lines.push(`\t${hook.from || from} -> ${hook.to || to} [${own}]\n`);
  }
  if (!inner) lines.push(composed.legend);
  lines.push("}\n");
  return lines.join("");
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

/* One laid-out container, parsed once: its SVG, its frame's box (its own coordinates), made
   to hold all it draws (tgrHoldAll), where its ports are in that box (tgrPortPlaces), and
   what the engine said. A failure is thrown with all it said: the page shows it. */
function tgrLaidOut(viz, dot, inner) {
  const result = viz.render(dot, {format: "svg"}), said = result.errors.map((e) => e.message);
  if (result.status !== "success") throw new Error(`Graphviz: ${said.join("; ") || "render failed"}`);
  const svg = tgrParseSvg(result.output);
  const frame = inner ? svg.querySelector("g.cluster") : null;
  const box = frame ? tgrHoldAll(svg, frame) : null;
  return {svg, box, ports: box ? tgrPortPlaces(svg, box) : new Map(), said};
}

/* A module's frame, grown where what it draws goes past it, and the frame's box. Graphviz
   routes an edge between two of its points (a port, a node) round what is in the way, at
   times outside the outline it gives the module; the module's box in its parent is its
   frame, so that nothing drawn for a module leaves it. */
function tgrHoldAll(svg, frame) {
  const shapes = [...frame.querySelectorAll("path, polygon")], box = tgrOutline(shapes[0]);
  const reach = tgrReach(svg), room = 8;  // a cluster's own margin, past the farthest line
  const grown = [Math.min(box[0], reach[0] - room), Math.min(box[1], reach[1] - room),
    Math.max(box[2], reach[2] + room), Math.max(box[3], reach[3] + room)];
  if (grown.every((v, k) => v === box[k])) return box;
  // each point moves with the side it is nearer: the rounded corners keep their shape, and
  // the title its place at a corner
  const mid = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2];
  const move = ([x, y]) => [x + (x < mid[0] ? grown[0] - box[0] : grown[2] - box[2]),
    y + (y < mid[1] ? grown[1] - box[1] : grown[3] - box[3])];
  for (const shape of shapes) {
    const points = tgrPoints(shape).map((p) => p && move(p));
    if (shape.tagName === "path") tgrSetPoints(shape, points);
    else shape.setAttribute("points", points.map(tgrPoint).join(" "));
  }
  for (const text of frame.querySelectorAll("text")) {
    const [x, y] = move([+text.getAttribute("x"), +text.getAttribute("y")]);
    text.setAttribute("x", x.toFixed(2));
    text.setAttribute("y", y.toFixed(2));
  }
  return grown;
}

/* The box of a layout's edges: their lines (a cubic stays within its points), arrowheads
   and labels. */
function tgrReach(svg) {
  const reach = [Infinity, Infinity, -Infinity, -Infinity];
  const take = (x0, y0, x1, y1) => {
    reach[0] = Math.min(reach[0], x0); reach[1] = Math.min(reach[1], y0);
    reach[2] = Math.max(reach[2], x1); reach[3] = Math.max(reach[3], y1);
  };
  for (const shape of svg.querySelectorAll("g.edge path, g.edge polygon")) {
    for (const point of tgrPoints(shape)) if (point) take(...point, ...point);
  }
  for (const text of svg.querySelectorAll("g.edge text")) take(...tgrTextBox(text));
  return reach;
}

/* A Graphviz text's box: the SVG is not on the page, so it is measured in its font. */
function tgrTextBox(text) {
  const size = +text.getAttribute("font-size") || 9, x = +text.getAttribute("x"), y = +text.getAttribute("y");
  TGR_MEASURE = TGR_MEASURE || document.createElement("canvas").getContext("2d");
  TGR_MEASURE.font = `${size}px ${text.getAttribute("font-family") || "Helvetica,sans-serif"}`;
  const width = TGR_MEASURE.measureText(text.textContent).width;
  const anchor = text.getAttribute("text-anchor"), left = x - (anchor === "middle" ? width / 2 : anchor === "end" ? width : 0);
  return [left, y - size, left + width, y + size * 0.3];
}

var TGR_MEASURE = null;

/* Each open child's box as Graphviz laid it out, against the size asked (``sizes``):
   where they differ, the drawing would be wrong (the children placed in boxes too small
   overlap), so the layout fails, saying what the engine said. */
function tgrCheckSlots(found, sizes) {
  for (const [m, [w, h]] of sizes) {
    const slot = found.svg.querySelector(`[id="p-${tgrLocalName(m)}"] polygon, [id="p-${tgrLocalName(m)}"] path`);
    if (!slot) continue;
    const [x0, y0, x1, y1] = tgrOutline(slot), fmt = (v) => Math.round(v).toLocaleString("en");
    if (Math.abs(x1 - x0 - Math.max(3, Math.round(w))) <= 1 && Math.abs(y1 - y0 - Math.max(3, Math.round(h))) <= 1) continue;
    const why = found.said.length ? ` (${found.said.join("; ")})` : "";
    throw new Error(`Graphviz laid out a module of ${fmt(w)} × ${fmt(h)} pt as ${fmt(x1 - x0)} × ${fmt(y1 - y0)}${why}`);
  }
}

/* The page-wide cache of laid-out containers, by DOT text. */
var TGR_LAYOUTS = new Map();

/* Lay out what the composed view needs (the missing containers only, innermost first) and
   put the results together: one SVG, its elements' ids those of the whole view's DOT. */
function tgrLayOut(P, composed, viz) {
  const members = tgrContainers(P, composed), edges = tgrLocalEdges(composed, members);
  const {local, ports, joins} = edges, markers = tgrFannedPorts(P, edges, P.D.fan_out);
  const sizes = new Map(), laid = new Map(), said = new Set();
  let fresh = 0;
  const visit = (c) => {
    for (const m of members.get(c)) if (members.has(m)) visit(m);
    const children = members.get(c).filter((m) => members.has(m));
    const own = new Map(children.map((m) => [m, sizes.get(m)]));
    const hooks = tgrHooks(children, joins, laid, composed.rankdir);
    const dot = tgrLocalDot(P, composed, c, members.get(c), local.get(c), ports.get(c), own, hooks,
                            markers.get(c));
    let found = TGR_LAYOUTS.get(dot);
    if (!found) {
      found = tgrLaidOut(viz, dot, c !== -1);
      tgrCheckSlots(found, own);
      fresh++;
      if (TGR_LAYOUTS.size > 4000) TGR_LAYOUTS.delete(TGR_LAYOUTS.keys().next().value);
      TGR_LAYOUTS.set(dot, found);
    }
    laid.set(c, found);
    found.said.forEach((line) => said.add(line));
    if (found.box) sizes.set(c, [found.box[2] - found.box[0], found.box[3] - found.box[1], found.ports]);
  };
  visit(-1);
  const {svg} = tgrAssemble(members, laid, {joins, rankdir: composed.rankdir}, -1);
  svg.dataset.layouts = String(fresh);
  // what the engine warned of and drew all the same, for whoever looks into a drawing
  if (said.size) svg.dataset.said = [...said].join("; ");
  return svg;
}

/* A container's drawing with its open children placed in their boxes, recursively, each
   edge crossing a frame joined (see tgrJoin); also its own edges (tgrOwnEdges). */
function tgrAssemble(members, laid, flow, c) {
  const svg = laid.get(c).svg.cloneNode(true), own = tgrOwnEdges(svg);
  for (const m of members.get(c)) {
    if (!members.has(m)) continue;
    const slot = svg.querySelector(`[id="p-${tgrLocalName(m)}"]`);
    if (!slot) continue;
    const child = tgrAssemble(members, laid, flow, m), box = laid.get(m).box;
    const target = tgrOutline(slot.querySelector("polygon, path"));
    const g = document.createElementNS(svg.namespaceURI, "g");
    const dx = (target[0] + target[2] - box[0] - box[2]) / 2, dy = (target[1] + target[3] - box[1] - box[3]) / 2;
    g.setAttribute("transform", `translate(${dx.toFixed(2)} ${dy.toFixed(2)})`);
    const title = tgrTitleBox(child.svg.querySelector("g.cluster text"), [dx, dy], target);
    tgrJoin(own, child.own, flow.joins.get(m), {box: target, title, shift: [dx, dy], rankdir: flow.rankdir});
    const content = child.svg.querySelector("g.graph");
    for (const part of [...content.children]) {
      if (part.tagName === "title" || (part.tagName === "polygon" && !part.closest("g.node, g.cluster, g.edge"))) continue;
      g.appendChild(part);
    }
    slot.replaceWith(g);
  }
  return {svg, own};
}
