/* torchgraphrec report: pan/zoom, search, details, depth, collapse, table, timeline.
   Hand-written, no dependencies; user text is only ever set through textContent. */
function tgrReport(root) {
  "use strict";
  const data = JSON.parse(root.querySelector("script.tgr-data").textContent);
  const views = Array.from(root.querySelectorAll(".tgr-view"));
  const svgs = views.map((view) => view.querySelector("svg"));
  const fitted = svgs.map((svg) => svg.getAttribute("viewBox"));
  const search = root.querySelector(".tgr-search");
  const count = root.querySelector(".tgr-count");
  const details = root.querySelector(".tgr-details");
  const collapseButton = root.querySelector(".tgr-collapse");
  const collapsed = new Set();
  let current = 0;
  let selected = null;

  function readBox(svg) { return svg.getAttribute("viewBox").split(/[\s,]+/).map(Number); }
  function setBox(svg, box) { svg.setAttribute("viewBox", box.join(" ")); }
  function nodeOf(element) { return data.svg_ids[element.id]; }
  function attrsOf(node) { return data.nodes[node] || {}; }

  function showView(index) {
    views.forEach((view, k) => { view.hidden = k !== index; });
    current = index;
    applyCollapse();
    runSearch();
  }

  function enablePanZoom(svg) {
    let drag = null;
    svg.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = readBox(svg);
      const rect = svg.getBoundingClientRect();
      const fx = (event.clientX - rect.left) / rect.width;
      const fy = (event.clientY - rect.top) / rect.height;
      const scale = Math.exp(event.deltaY * 0.0015);
      const width = box[2] * scale, height = box[3] * scale;
      setBox(svg, [box[0] + (box[2] - width) * fx, box[1] + (box[3] - height) * fy, width, height]);
    }, { passive: false });
    svg.addEventListener("pointerdown", (event) => {
      drag = { x: event.clientX, y: event.clientY, box: readBox(svg), moved: false };
    });
    svg.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const rect = svg.getBoundingClientRect();
      const k = Math.max(drag.box[2] / rect.width, drag.box[3] / rect.height);
      const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      setBox(svg, [drag.box[0] - dx * k, drag.box[1] - dy * k, drag.box[2], drag.box[3]]);
    });
    svg.addEventListener("pointerup", () => { setTimeout(() => { drag = null; }, 0); });
    svg.addEventListener("click", (event) => {
      if (drag && drag.moved) return;
      const element = event.target.closest("g.node, g.cluster");
      if (element && nodeOf(element)) select(nodeOf(element), element);
    });
    svg.addEventListener("dblclick", (event) => {
      const element = event.target.closest("g.cluster");
      if (element && nodeOf(element)) toggleCollapse(nodeOf(element));
    });
  }

  function matches(node, query) {
    const attrs = attrsOf(node);
    return [node, attrs.label, attrs.qualname, attrs.type, attrs.name].some(
      (value) => value !== undefined && value !== null && String(value).toLowerCase().includes(query));
  }

  function runSearch() {
    root.querySelectorAll(".tgr-hit").forEach((element) => element.classList.remove("tgr-hit"));
    const query = search.value.trim().toLowerCase();
    if (!query) { count.textContent = ""; return; }
    let total = 0;
    for (const node in data.nodes) if (matches(node, query)) total += 1;
    let shown = 0;
    svgs[current].querySelectorAll("g.node, g.cluster").forEach((element) => {
      const node = nodeOf(element);
      if (node && matches(node, query)) { element.classList.add("tgr-hit"); shown += 1; }
    });
    count.textContent = `${shown} match${shown === 1 ? "" : "es"} in this view (${total} in the recording)`;
  }

  function select(node, element) {
    root.querySelectorAll(".tgr-selected").forEach((el) => el.classList.remove("tgr-selected"));
    if (element) element.classList.add("tgr-selected");
    selected = node;
    const attrs = attrsOf(node);
    root.querySelector(".tgr-details-title").textContent = attrs.qualname || attrs.label || node;
    root.querySelector(".tgr-details-hint").hidden = true;
    details.replaceChildren();
    const rows = Object.entries({ id: node, ...attrs }).filter(([key]) => key !== "probe_series");
    for (const [key, value] of rows) {
      const row = details.insertRow();
      row.insertCell().textContent = key;
      row.insertCell().textContent = typeof value === "object" && value !== null
        ? JSON.stringify(value) : String(value);
    }
    drawSeries(attrs.probe_series || {});
    const isModule = attrs.kind === "layer";
    collapseButton.hidden = !isModule;
    collapseButton.textContent = collapsed.has(node) ? "Expand" : "Collapse";
  }

  function drawSeries(series) {
    const box = root.querySelector(".tgr-series");
    box.replaceChildren();
    const ns = svgs[0].namespaceURI;
    for (const [name, points] of Object.entries(series)) {
      const values = points.map((p) => p[1]).filter((v) => Number.isFinite(v));
      if (!values.length) continue;
      const low = Math.min(...values), high = Math.max(...values);
      const steps = points.map((p) => p[0]);
      const first = Math.min(...steps), span = Math.max(1, Math.max(...steps) - first);
      const width = 260, height = 56;
      const svg = document.createElementNS(ns, "svg");
      svg.setAttribute("viewBox", `0 0 ${width} ${height + 14}`);
      svg.setAttribute("class", "tgr-chart");
      const line = document.createElementNS(ns, "polyline");
      line.setAttribute("points", points.filter((p) => Number.isFinite(p[1])).map((p) =>
        `${((p[0] - first) / span) * width},${height - (high > low ? ((p[1] - low) / (high - low)) * (height - 4) : height / 2)}`).join(" "));
      svg.appendChild(line);
      const label = document.createElementNS(ns, "text");
      label.setAttribute("x", 0);
      label.setAttribute("y", height + 12);
      label.textContent = `${name} over ${points.length} step${points.length === 1 ? "" : "s"}: ${low.toPrecision(3)} – ${high.toPrecision(3)}`;
      svg.appendChild(label);
      box.appendChild(svg);
    }
  }

  function inside(node, layer) {
    let parent = attrsOf(node).parent;
    while (parent) { if (parent === layer) return true; parent = attrsOf(parent).parent; }
    return false;
  }

  function hiddenBy(node) {
    for (const layer of collapsed) if (inside(node, layer)) return true;
    return false;
  }

  function applyCollapse() {
    const svg = svgs[current];
    const hidden = new Set();
    svg.querySelectorAll("g.node, g.cluster").forEach((element) => {
      const node = nodeOf(element);
      const hide = Boolean(node) && hiddenBy(node);
      element.style.display = hide ? "none" : "";
      if (element.classList.contains("cluster")) element.classList.toggle("tgr-collapsed", collapsed.has(node));
      const title = element.querySelector("title");
      if (hide && title) hidden.add(title.textContent);
    });
    svg.querySelectorAll("g.edge").forEach((element) => {
      const ends = (element.querySelector("title") || { textContent: "" }).textContent.split("->");
      element.style.display = ends.length === 2 && hidden.has(ends[0]) && hidden.has(ends[1]) ? "none" : "";
    });
  }

  function toggleCollapse(layer) {
    if (collapsed.has(layer)) collapsed.delete(layer); else collapsed.add(layer);
    applyCollapse();
    if (selected === layer) collapseButton.textContent = collapsed.has(layer) ? "Expand" : "Collapse";
  }

  function fillTable() {
    const body = root.querySelector(".tgr-calls tbody");
    const rows = data.layers.map((layer) => ({ ...layer, time: (layer.end - layer.start) / 1e6 }));
    let key = null, direction = 1;
    function draw() {
      body.replaceChildren();
      for (const layer of rows) {
        const row = body.insertRow();
        row.dataset.id = layer.id;
        [layer.qualname, layer.type, layer.call, layer.params.toLocaleString("en"), layer.output,
          layer.time.toFixed(3)].forEach((value) => { row.insertCell().textContent = String(value); });
        row.addEventListener("click", () => {
          const element = svgs[current].querySelector(`[id="c-${CSS.escape(layer.id)}"]`);
          select(layer.id, element);
        });
      }
    }
    root.querySelectorAll(".tgr-calls th").forEach((header) => {
      header.addEventListener("click", () => {
        const next = header.dataset.key;
        direction = key === next ? -direction : 1;
        key = next;
        rows.sort((a, b) => (a[key] < b[key] ? -direction : a[key] > b[key] ? direction : 0));
        root.querySelectorAll(".tgr-calls th").forEach((h) => h.classList.remove("tgr-sorted-up", "tgr-sorted-down"));
        header.classList.add(direction > 0 ? "tgr-sorted-up" : "tgr-sorted-down");
        draw();
      });
    });
    draw();
  }

  function drawTimeline() {
    const layers = data.layers;
    if (!layers.length) return;
    const ns = svgs[0].namespaceURI;  // the SVG namespace, without writing out its URL
    const start = Math.min(...layers.map((l) => l.start));
    const ends = layers.map((l) => Math.max(l.end, l.bend || 0));
    const span = Math.max(1, Math.max(...ends) - start);
    const depth = Math.max(...layers.map((l) => l.depth)) + 1;
    const hasBackward = layers.some((l) => l.bstart !== null && l.bstart !== undefined);
    const lanes = hasBackward ? depth * 2 + 1 : depth;
    const width = 1000, lane = 12, height = lanes * lane + 16;
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    function bar(from, to, row, cls, label) {
      const rect = document.createElementNS(ns, "rect");
      rect.setAttribute("x", ((from - start) / span) * width);
      rect.setAttribute("y", row * lane);
      rect.setAttribute("width", Math.max(0.5, ((to - from) / span) * width));
      rect.setAttribute("height", lane - 2);
      rect.setAttribute("class", cls);
      const title = document.createElementNS(ns, "title");
      title.textContent = label;
      rect.appendChild(title);
      svg.appendChild(rect);
    }
    for (const l of layers) {
      bar(l.start, l.end, l.depth, "tgr-forward", `${l.qualname} (${l.type}) forward ${((l.end - l.start) / 1e6).toFixed(3)} ms`);
      if (hasBackward && l.bstart !== null && l.bstart !== undefined) {
        bar(l.bstart, l.bend, depth + 1 + l.depth, "tgr-backward", `${l.qualname} (${l.type}) backward ${((l.bend - l.bstart) / 1e6).toFixed(3)} ms`);
      }
    }
    const caption = document.createElementNS(ns, "text");
    caption.setAttribute("x", 2);
    caption.setAttribute("y", height - 3);
    caption.textContent = `${(span / 1e6).toFixed(2)} ms in all · rows: call depth` + (hasBackward ? " · forward above, backward below" : "");
    svg.appendChild(caption);
    root.querySelector(".tgr-timeline").appendChild(svg);
  }

  svgs.forEach(enablePanZoom);
  root.querySelector(".tgr-depth").addEventListener("change", (event) => showView(Number(event.target.value)));
  root.querySelector(".tgr-fit").addEventListener("click", () => svgs[current].setAttribute("viewBox", fitted[current]));
  search.addEventListener("input", runSearch);
  collapseButton.addEventListener("click", () => { if (selected) toggleCollapse(selected); });
  fillTable();
  drawTimeline();
}
