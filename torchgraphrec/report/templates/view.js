/* torchgraphrec report: the drawing on screen. Pan and zoom (the SVG's viewBox), the
   layout engine (viz-js, evaluated after the first paint), swapping drawings while the
   element the reader acted on stays where it was. */

function tgrBox(svg) { return svg.getAttribute("viewBox").split(/[\s,]+/).map(Number); }
function tgrSetBox(svg, box) { svg.setAttribute("viewBox", box.map((v) => +v.toFixed(2)).join(" ")); }

/* The box that shows the drawing at `scale` drawing units per screen pixel, with the
   drawing point (x, y) at the screen point (px, py) of the canvas. */
function tgrPutAt(svg, scale, x, y, px, py) {
  const rect = svg.getBoundingClientRect();
  tgrSetBox(svg, [x - (px - rect.left) * scale, y - (py - rect.top) * scale, rect.width * scale, rect.height * scale]);
}

/* Drawing units per screen pixel now (the viewBox is fitted, aspect kept: the larger). */
function tgrScale(svg) {
  const box = tgrBox(svg), rect = svg.getBoundingClientRect();
  return Math.max(box[2] / Math.max(1, rect.width), box[3] / Math.max(1, rect.height));
}

/* An element's centre in drawing units (the viewBox's coordinates). */
function tgrCentre(svg, element) {
  const rect = element.getBoundingClientRect(), outer = svg.getBoundingClientRect();
  const box = tgrBox(svg), scale = tgrScale(svg);
  const offsetX = (outer.width * scale - box[2]) / 2, offsetY = (outer.height * scale - box[3]) / 2;
  return [box[0] - offsetX + (rect.left + rect.width / 2 - outer.left) * scale,
    box[1] - offsetY + (rect.top + rect.height / 2 - outer.top) * scale];
}

function tgrPanZoom(R) {
  const host = R.host;
  let drag = null;
  host.addEventListener("wheel", (event) => {
    const svg = R.svg;
    if (!svg) return;
    event.preventDefault();
    const scale = tgrZoomBound(svg, tgrScale(svg), tgrScale(svg) * Math.exp(event.deltaY * 0.0015));
    const [x, y] = tgrPointer(svg, event);
    tgrPutAt(svg, scale, x, y, event.clientX, event.clientY);
  }, {passive: false});
  host.addEventListener("pointerdown", (event) => {
    if (!R.svg || event.button !== 0) return;
    drag = {x: event.clientX, y: event.clientY, box: tgrBox(R.svg), scale: tgrScale(R.svg), moved: false};
  });
  host.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    if (drag.moved) tgrSetBox(R.svg, [drag.box[0] - dx * drag.scale, drag.box[1] - dy * drag.scale, drag.box[2], drag.box[3]]);
  });
  const end = () => { setTimeout(() => { drag = null; }, 0); };
  host.addEventListener("pointerup", end);
  host.addEventListener("pointerleave", end);
  host.addEventListener("click", (event) => {
    if (drag && drag.moved) return;
    const element = event.target.closest("g.node, g.cluster");
    if (element && R.onClick) R.onClick(element, event);
  });
  host.addEventListener("dblclick", (event) => {
    const element = event.target.closest("g.node, g.cluster");
    if (element && R.onDouble) R.onDouble(element, event);
  });
}

/* How far the wheel zooms: out to a quarter of the whole drawing's size on the canvas (or
   of its own size, for a drawing smaller than the canvas), in to 16 times its own size.
   Unbounded, a few seconds of wheel left the drawing a dot, or nothing at all. */
var TGR_ZOOM_OUT = 4, TGR_ZOOM_IN = 16;

function tgrZoomBound(svg, now, wanted) {
  const [, , w, h] = (svg.dataset.fitted || svg.getAttribute("viewBox")).split(/[\s,]+/).map(Number);
  const rect = svg.getBoundingClientRect();
  const fitted = Math.max(w / Math.max(1, rect.width), h / Math.max(1, rect.height));
  const high = Math.max(fitted, TGR_NATURAL) * TGR_ZOOM_OUT, low = TGR_NATURAL / TGR_ZOOM_IN;
  // a view already past a bound (set by other means) is not pulled back: it only stops
  return Math.min(Math.max(wanted, Math.min(low, now)), Math.max(high, now));
}

/* The drawing point under the mouse. */
function tgrPointer(svg, event) {
  const box = tgrBox(svg), rect = svg.getBoundingClientRect(), scale = tgrScale(svg);
  const offsetX = (rect.width * scale - box[2]) / 2, offsetY = (rect.height * scale - box[3]) / 2;
  return [box[0] - offsetX + (event.clientX - rect.left) * scale, box[1] - offsetY + (event.clientY - rect.top) * scale];
}

function tgrFit(R) {
  if (R.svg) R.svg.setAttribute("viewBox", R.svg.dataset.fitted);
}

/* Drawing units per pixel above which 10-point labels are too small to read. */
var TGR_READABLE = 1.5;

/* Drawing units per screen pixel at the drawing's own size (Graphviz's points, as a
   browser shows them). */
var TGR_NATURAL = 0.75;

/* A new drawing without an anchor: all of it where it is readable so (a small one at its
   own size in the middle, not blown up to the canvas), else its start (the first box the
   flow comes in by) at a readable zoom; Fit shows all of it. */
function tgrOpeningView(R) {
  const svg = R.svg, rect = svg.getBoundingClientRect();
  tgrFit(R);
  if (!rect.width) return;
  if (tgrScale(svg) < TGR_NATURAL) {
    const [x, y, w, h] = tgrBox(svg);
    tgrPutAt(svg, TGR_NATURAL, x + w / 2, y + h / 2, rect.left + rect.width / 2, rect.top + rect.height / 2);
    return;
  }
  if (tgrScale(svg) <= TGR_READABLE) return;
  const rankdir = (R.state || R.config.preset).rankdir;
  const first = tgrFirstBox(svg, rankdir);
  // the drawing's start edge (its clusters' titles above the first box in view), across
  // at the first box
  const [x, y, w, h] = tgrBox(svg), scale = 1.1, margin = 16;
  const [fx, fy, fw, fh] = first ? tgrExtent(svg, first) : [x, y, w, h];
  const across = tgrFlowsDown(rankdir);
  const at = across
    ? [fx + fw / 2, rankdir === "TB" ? y : y + h, rect.left + rect.width / 2, rankdir === "TB" ? rect.top + margin : rect.bottom - margin]
    : [rankdir === "LR" ? x : x + w, fy + fh / 2, rankdir === "LR" ? rect.left + margin : rect.right - margin, rect.top + rect.height / 2];
  tgrPutAt(svg, scale, at[0], at[1], at[2], at[3]);
}

/* The box the flow comes in by: the one nearest the drawing's start (its top where it runs
   top to bottom, and so on), and of those as near, the one nearest its middle across. The
   middle of a wide drawing's start may be empty cluster space (T5's, between its encoder
   and decoder). */
function tgrFirstBox(svg, rankdir) {
  const whole = svg.getBoundingClientRect(), across = tgrFlowsDown(rankdir);
  const middle = across ? whole.left + whole.width / 2 : whole.top + whole.height / 2;
  const start = {TB: (r) => r.top, BT: (r) => -r.bottom, LR: (r) => r.left, RL: (r) => -r.right}[rankdir] || ((r) => r.top);
  let best = null, bestStart = Infinity, bestOff = Infinity;
  for (const node of svg.querySelectorAll("g.node")) {
    const r = node.getBoundingClientRect();
    if (!r.width) continue;
    const at = start(r), off = Math.abs((across ? r.left + r.width / 2 : r.top + r.height / 2) - middle);
    if (at < bestStart - 1 || (at <= bestStart + 1 && off < bestOff)) {
      best = node; bestStart = Math.min(at, bestStart); bestOff = off;
    }
  }
  return best;
}

/* Zoom so that `element` is in the middle at about its natural size (readable, with its
   neighbours in view), or smaller where it would not fit while still readable; a module
   taller than that shows its start. */
function tgrZoomTo(R, element) {
  const svg = R.svg, rect = element.getBoundingClientRect(), outer = svg.getBoundingClientRect();
  const scale = tgrScale(svg);
  const width = rect.width * scale, height = rect.height * scale;
  const fits = Math.max(0.9, width / (outer.width * 0.8), height / (outer.height * 0.8));
  const wanted = Math.min(fits, Math.max(0.9, TGR_READABLE));
  const [x, y, w, h] = tgrExtent(svg, element);
  if (h / wanted > outer.height * 0.9) tgrPutAt(svg, wanted, x + w / 2, y, outer.left + outer.width / 2, outer.top + 24);
  else tgrPutAt(svg, wanted, x + w / 2, y + h / 2, outer.left + outer.width / 2, outer.top + outer.height / 2);
  tgrKeepInView(R, element);
}

/* viz-js, evaluated once per page when first needed (after the first paint). */
function tgrViz(R) {
  if (!window.__tgrViz) {
    if (!window.Viz) {
      const script = document.createElement("script");
      script.textContent = R.root.querySelector("script.tgr-viz").textContent;
      document.head.appendChild(script);
    }
    window.__tgrViz = window.Viz.instance();
  }
  return window.__tgrViz;
}

/* An SVG element from the engine's text, sized by CSS, its own box kept to fit. */
function tgrParseSvg(text) {
  const parsed = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
  const svg = document.importNode(parsed, true);
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  return svg;
}

/* Put `svg` on screen. With an anchor (see tgrAnchor), the element with one of its ids
   (a box that became a cluster, or the other way) is put back under the same screen point
   at the same zoom; else the opening view. Either way something drawn is in view after. */
function tgrSwap(R, svg, anchor) {
  R.host.replaceChildren(svg);
  R.svg = svg;
  if (!svg.dataset.fitted) svg.dataset.fitted = svg.getAttribute("viewBox");
  else svg.setAttribute("viewBox", svg.dataset.fitted);
  const element = anchor && tgrFindAnchor(svg, anchor.ids);
  if (!element) { tgrOpeningView(R); return; }
  const [x, y, w, h] = tgrExtent(svg, element);
  // the point the reader pointed at, as far into the element as it still reaches: the
  // top of a module that opened to a tall cluster, the box a cluster closed to
  const at = [x + Math.min(anchor.dx, w), y + Math.min(anchor.dy, h)];
  tgrPutAt(svg, anchor.scale, at[0], at[1], anchor.x, anchor.y);
  tgrKeepInView(R, element);
}

function tgrFindAnchor(svg, ids) {
  for (const id of ids) {
    const found = svg.querySelector(`[id="${CSS.escape(id)}"]`);
    if (found) return found;
  }
  return null;
}

/* An element's box in drawing units (the viewBox's coordinates): x, y, width, height. */
function tgrExtent(svg, element) {
  const rect = element.getBoundingClientRect(), outer = svg.getBoundingClientRect();
  const box = tgrBox(svg), scale = tgrScale(svg);
  const offsetX = (outer.width * scale - box[2]) / 2, offsetY = (outer.height * scale - box[3]) / 2;
  return [box[0] - offsetX + (rect.left - outer.left) * scale, box[1] - offsetY + (rect.top - outer.top) * scale,
    rect.width * scale, rect.height * scale];
}

/* Where the reader acted, to keep it there after a re-layout: the pointer (from `event`,
   where it was over the canvas) or else the element's top left corner, and how far into
   the element that point was (drawing units). */
function tgrAnchor(R, element, ids, event) {
  if (!element || !R.svg) return null;
  const rect = element.getBoundingClientRect(), canvas = R.host.getBoundingClientRect();
  const pointed = event && event.clientX !== undefined && event.clientX >= canvas.left && event.clientX <= canvas.right &&
    event.clientY >= canvas.top && event.clientY <= canvas.bottom;
  const x = pointed ? event.clientX : rect.left, y = pointed ? event.clientY : rect.top, scale = tgrScale(R.svg);
  return {ids, x, y, scale, dx: Math.max(0, (x - rect.left) * scale), dy: Math.max(0, (y - rect.top) * scale)};
}

/* Pan (no zoom) where `element` is not in view, or barely: its start to the canvas's
   start (an element under the pointer is in view already, and stays where it is); where
   nothing drawn is in view at all, the opening view. */
function tgrKeepInView(R, element) {
  const svg = R.svg, canvas = R.host.getBoundingClientRect(), rect = element.getBoundingClientRect();
  const margin = 24, box = tgrBox(svg), scale = tgrScale(svg);
  const shift = (low, high, from, to) => {
    const seen = Math.min(high, to) - Math.max(low, from);
    return seen >= Math.min(high - low, 2 * margin) ? 0 : low - (from + margin);
  };
  const dx = shift(rect.left, rect.right, canvas.left, canvas.right);
  const dy = shift(rect.top, rect.bottom, canvas.top, canvas.bottom);
  if (dx || dy) tgrSetBox(svg, [box[0] + dx * scale, box[1] + dy * scale, box[2], box[3]]);
  if (!tgrAnyInView(R)) tgrOpeningView(R);
}

/* Whether any drawn box or cluster meets the canvas. */
function tgrAnyInView(R) {
  const canvas = R.host.getBoundingClientRect();
  for (const element of R.svg.querySelectorAll("g.node, g.cluster")) {
    const rect = element.getBoundingClientRect();
    if (rect.width && rect.right > canvas.left && rect.left < canvas.right && rect.bottom > canvas.top && rect.top < canvas.bottom) return true;
  }
  return false;
}
