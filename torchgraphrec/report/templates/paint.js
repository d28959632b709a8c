/* torchgraphrec report: what is painted over a laid-out drawing without laying it out
   again: colour by a cost or statistic (with its legend), search marks, the selection. */

/* Numbers as people read them, as torchgraphrec/units.py writes them: 1.2 GFLOPs,
   34.5 MB, 3.1 ms, 52 µs; a parameter count without its word (1.2M). */
var TGR_UNITS = {flops: "FLOPs", backward_flops: "FLOPs", saved_bytes: "B", bytes: "B",
  output_bytes: "B", param_bytes: "B", forward_ms: "ms", self_ms: "ms", backward_ms: "ms",
  params: "", num_params: ""};

function tgrNumber(value) {
  const text = value < 99.95 ? value.toFixed(1) : value.toFixed(0);
  return text.endsWith(".0") ? text.slice(0, -2) : text;
}

function tgrFormat(name, value) {
  if (value === undefined || value === null || !Number.isFinite(value)) return "";
  const unit = TGR_UNITS[name];
  if (unit === undefined) return String(Number(value.toPrecision(3)));
  if (unit === "ms") {
    for (const [limit, word, scale] of [[1000, "s", 1e-3], [1, "ms", 1], [1e-3, "µs", 1e3]]) {
      if (value >= limit * 0.99995) return `${tgrNumber(value * scale)} ${word}`;
    }
    return value === 0 ? "0 ms" : `${tgrNumber(value * 1e6)} ns`;
  }
  // counts of parameters as people say them (text/units.py): 2B params, not 2G
  const prefixes = unit === "" ? [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"], [1, ""]]
    : [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]];
  for (const [limit, prefix] of prefixes) {
    if (Math.abs(value) >= limit * 0.99995) return `${tgrNumber(value / limit)}${unit ? " " : ""}${prefix}${unit}`;
  }
  return `${tgrNumber(value)}${unit ? " " + unit : ""}`;
}

/* The drawing's scale (render/scale.py): logarithmic where the values span two decades;
   zeros, which a log scale cannot place, take its lowest colour. */
function tgrScaleOf(values) {
  const found = values.filter((v) => Number.isFinite(v));
  if (!found.length) return null;
  const low = Math.min(...found), high = Math.max(...found);
  const positive = found.filter((v) => v > 0);
  const logarithmic = (a, b) => a > 0 && b >= 100 * a;
  if (low === 0 && positive.length && logarithmic(Math.min(...positive), high)) {
    return {low: Math.min(...positive), high, log: true, zeros: true};
  }
  return {low, high, log: logarithmic(low, high), zeros: false};
}

/* render/theme.py's scale_color: the palette's step for `value`, and its text colour. */
function tgrColourOf(R, scale, value) {
  const {scale: steps, text} = R.config.colour;
  let [v, low, high] = [Math.max(value, scale.low), scale.low, scale.high];
  if (scale.log) { v = Math.log10(v); low = Math.log10(low); high = Math.log10(high); }
  const share = high <= low ? 0 : (v - low) / (high - low);
  const step = Math.min(steps.length - 1, Math.max(0, Math.floor(share * steps.length)));
  return [steps[step], text[step]];
}

function tgrValue(R, i) {
  const name = R.colourBy;
  const value = name && R.info[i] ? R.info[i][name] : undefined;
  return typeof value === "number" ? value : undefined;
}

function tgrColourControl(R) {
  const select = R.$(".tgr-colour"), colour = R.config.colour;
  for (const name of colour.names) select.add(new Option(colour.headings[name], name));
  select.closest("label").hidden = !colour.names.length;  // nothing recorded to colour by
  select.value = R.colourBy || "";
  select.addEventListener("change", () => {
    R.colourBy = select.value || null;
    tgrDecorate(R, false);
    tgrTimeline(R);
    tgrWriteUrl(R);
  });
}

/* Colour, search marks and selection over a drawing (a diff's marks are in its DOT). */
function tgrDecorate(R, fresh) {
  if (!R.svg) return;
  tgrPaintColour(R);
  tgrPaintMarks(R);
}

function tgrShape(element) { return element.querySelector("path, polygon, ellipse"); }

/* Boxes filled and clusters outlined by the chosen value, on a scale over what is drawn. */
function tgrPaintColour(R) {
  for (const element of R.svg.querySelectorAll(".tgr-coloured")) {
    element.classList.remove("tgr-coloured");
    const shape = tgrShape(element);
    if (shape) shape.style.fill = shape.style.stroke = shape.style.strokeWidth = "";
    element.querySelectorAll("text").forEach((text) => { text.style.fill = ""; });
  }
  // as the drawing does: a sum (FLOPs, time) paints boxes only, a cluster holding them
  // would squash them all; a statistic outlines clusters too
  const sums = R.config.colour.inclusive.includes(R.colourBy);
  const drawn = [...R.elements.keys()].filter((i) => tgrValue(R, i) !== undefined &&
    !(sums && R.elements.get(i).classList.contains("cluster")));
  R.scale = R.colourBy ? tgrScaleOf(drawn.map((i) => tgrValue(R, i))) : null;
  tgrLegend(R);
  if (!R.scale) return;
  for (const i of drawn) {
    const element = R.elements.get(i), shape = tgrShape(element);
    if (!shape) continue;
    const [fill, text] = tgrColourOf(R, R.scale, tgrValue(R, i));
    element.classList.add("tgr-coloured");
    if (element.classList.contains("cluster")) {
      shape.style.stroke = fill;
      shape.style.strokeWidth = "3";
    } else {
      shape.style.fill = fill;
      element.querySelectorAll("text").forEach((t) => { t.style.fill = text; });
    }
  }
}

function tgrLegend(R) {
  const legend = R.$(".tgr-legend");
  legend.replaceChildren();
  legend.hidden = !R.scale;
  if (!R.scale) return;
  const name = R.colourBy, low = document.createElement("span"), high = document.createElement("span");
  low.textContent = (R.scale.zeros ? "≤ " : "") + tgrFormat(name, R.scale.low);
  high.textContent = tgrFormat(name, R.scale.high) + (R.scale.log ? " (log scale)" : "");
  const ramp = document.createElement("span");
  ramp.className = "tgr-ramp";
  ramp.style.background = `linear-gradient(to right, ${R.config.colour.scale.join(", ")})`;
  legend.append(low, ramp, high);
  legend.title = `${R.config.colour.headings[name] || name}, over what is drawn`;
}

/* Search hits drawn as themselves, boxes holding hidden hits (with how many), the current
   hit and the selection. */
function tgrPaintMarks(R) {
  R.svg.querySelectorAll(".tgr-hit, .tgr-holds, .tgr-current, .tgr-selected").forEach((element) =>
    element.classList.remove("tgr-hit", "tgr-holds", "tgr-current", "tgr-selected"));
  R.svg.querySelectorAll(".tgr-badge").forEach((badge) => badge.remove());
  const search = R.search;
  if (search && search.list.length) {
    const held = new Map();
    for (const i of search.list) {
      const element = tgrHolder(R, i);
      if (!element) continue;
      if (R.elements.get(i) === element) element.classList.add("tgr-hit");
      else held.set(element, (held.get(element) || 0) + 1);
    }
    for (const [element, count] of held) tgrBadge(element, count);
    const current = search.current >= 0 ? tgrHolder(R, search.list[search.current]) : null;
    if (current) current.classList.add("tgr-current");
  }
  if (R.selected !== undefined) {
    const element = tgrHolder(R, R.selected);
    if (element) element.classList.add("tgr-selected");
  }
}

function tgrBadge(element, count) {
  const shape = tgrShape(element);
  if (!shape) return;
  element.classList.add("tgr-holds");
  const box = shape.getBBox(), ns = shape.namespaceURI;
  const badge = document.createElementNS(ns, "g"), circle = document.createElementNS(ns, "circle");
  const text = document.createElementNS(ns, "text");
  badge.setAttribute("class", "tgr-badge");
  circle.setAttribute("cx", box.x + box.width);
  circle.setAttribute("cy", box.y);
  circle.setAttribute("r", 8);
  text.setAttribute("x", box.x + box.width);
  text.setAttribute("y", box.y + 3.5);
  text.setAttribute("text-anchor", "middle");
  text.textContent = count > 99 ? "99+" : String(count);
  const title = document.createElementNS(ns, "title");
  title.textContent = `${count} match${count === 1 ? "" : "es"} inside`;
  badge.append(title, circle, text);
  shape.parentNode.appendChild(badge);
}
