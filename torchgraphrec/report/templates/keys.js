/* torchgraphrec report: the keyboard. "/" searches, Escape leaves the search; on the
   drawing (focused by a click or Tab) the arrows pan, + and - zoom about the middle, 0 fits,
   Enter opens or closes what holds the selection, as a double-click does. Keys typed into
   the page's own fields are theirs; each report on a page (a notebook's several) listens
   only to keys inside it, and JupyterLab's notebook shortcuts ("0 0" restarts the kernel,
   the arrows move between cells) stay out of it. */

/* How far one arrow key pans (of the canvas) and one + or - zooms. */
var TGR_KEY_PAN = 0.15, TGR_KEY_ZOOM = 1.25;

function tgrKeys(R) {
  const host = R.host, search = R.$(".tgr-search");
  R.root.setAttribute("data-lm-suppress-shortcuts", "true");  // Lumino stops its walk here
  host.tabIndex = 0;
  host.setAttribute("role", "application");
  host.setAttribute("aria-label", "the drawing: arrows pan, + and - zoom, 0 fits, Enter opens or closes the selection, / searches");
  host.addEventListener("pointerdown", () => host.focus({preventScroll: true}));
  search.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.preventDefault();
    if (search.value) {
      search.value = "";
      search.dispatchEvent(new Event("input"));
    } else {
      host.focus({preventScroll: true});
    }
  });
  R.root.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    if (event.target.closest("input, select, textarea, button, summary")) return;
    if (event.key === "/") {
      event.preventDefault();
      search.focus();
      search.select();
    } else if (host.contains(event.target) && tgrCanvasKey(R, event.key)) {
      event.preventDefault();
    }
  });
}

/* Act on a key pressed on the drawing; whether it was one of the drawing's keys. */
function tgrCanvasKey(R, key) {
  const svg = R.svg;
  if (!svg) return false;
  const pans = {ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1]};
  if (pans[key]) {  // a share of the canvas as it is on screen: the viewBox keeps the drawing's aspect
    const box = tgrBox(svg), [dx, dy] = pans[key], rect = svg.getBoundingClientRect(), scale = tgrScale(svg);
    tgrSetBox(svg, [box[0] + dx * rect.width * scale * TGR_KEY_PAN, box[1] + dy * rect.height * scale * TGR_KEY_PAN,
      box[2], box[3]]);
  } else if (key === "+" || key === "=" || key === "-") {
    const now = tgrScale(svg), rect = svg.getBoundingClientRect(), box = tgrBox(svg);
    const scale = tgrZoomBound(svg, now, key === "-" ? now * TGR_KEY_ZOOM : now / TGR_KEY_ZOOM);
    tgrPutAt(svg, scale, box[0] + box[2] / 2, box[1] + box[3] / 2, rect.left + rect.width / 2, rect.top + rect.height / 2);
  } else if (key === "0") {
    tgrFit(R);
  } else if (key === "Enter") {
    const element = R.selected === undefined || !R.D ? null : tgrHolder(R, R.selected);
    if (element) tgrDoubleClicked(R, element, undefined);
  } else {
    return false;
  }
  return true;
}
