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
    const scale = tgrScale(svg) * Math.exp(event.deltaY * 0.0015);
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

/* A new drawing without an anchor: all of it where it is readable so, else its start (where
   the flow comes in) at a readable zoom; Fit shows all of it. */
function tgrOpeningView(R) {
  const svg = R.svg, rect = svg.getBoundingClientRect();
  tgrFit(R);
  if (!rect.width || tgrScale(svg) <= TGR_READABLE) return;
  const [x, y, w, h] = tgrBox(svg), scale = 1.1, margin = 16;
  const rankdir = (R.state || R.config.preset).rankdir;
  const across = rankdir === "TB" || rankdir === "BT";
  const at = across
    ? [x + w / 2, rankdir === "TB" ? y : y + h, rect.left + rect.width / 2, rankdir === "TB" ? rect.top + margin : rect.bottom - margin]
    : [rankdir === "LR" ? x : x + w, y + h / 2, rankdir === "LR" ? rect.left + margin : rect.right - margin, rect.top + rect.height / 2];
  tgrPutAt(svg, scale, at[0], at[1], at[2], at[3]);
}

/* Zoom so that `element` is in the middle at about its natural size (readable, with its
   neighbours in view), or smaller where it would not fit. */
function tgrZoomTo(R, element) {
  const svg = R.svg, rect = element.getBoundingClientRect(), outer = svg.getBoundingClientRect();
  const scale = tgrScale(svg);
  const width = rect.width * scale, height = rect.height * scale;
  const wanted = Math.max(0.9, width / (outer.width * 0.8), height / (outer.height * 0.8));
  const [x, y] = tgrCentre(svg, element);
  tgrPutAt(svg, wanted, x, y, outer.left + outer.width / 2, outer.top + outer.height / 2);
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

/* Put `svg` on screen. With an anchor ({id, x, y, scale}: an element's old screen point),
   the element with that id (or its other form) stays there at the same zoom; else fit. */
function tgrSwap(R, svg, anchor) {
  R.host.replaceChildren(svg);
  R.svg = svg;
  if (!svg.dataset.fitted) svg.dataset.fitted = svg.getAttribute("viewBox");
  else svg.setAttribute("viewBox", svg.dataset.fitted);
  const element = anchor && tgrFindAnchor(svg, anchor.ids);
  if (!element) { tgrOpeningView(R); return; }
  const [x, y] = tgrCentre(svg, element);
  tgrPutAt(svg, anchor.scale, x, y, anchor.x, anchor.y);
}

function tgrFindAnchor(svg, ids) {
  for (const id of ids) {
    const found = svg.querySelector(`[id="${CSS.escape(id)}"]`);
    if (found) return found;
  }
  return null;
}

/* Where an element is on screen now, to keep it there after a re-layout. */
function tgrAnchor(R, element, ids) {
  if (!element || !R.svg) return null;
  const rect = element.getBoundingClientRect();
  return {ids, x: rect.left + rect.width / 2, y: rect.top + rect.height / 2, scale: tgrScale(R.svg)};
}
