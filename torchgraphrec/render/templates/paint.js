/* torchgraphrec report: what is painted over a laid-out drawing without laying it out
   again: colour by a cost or statistic (with its legend), search marks, the selection. */

/* Numbers as people read them: 1.2 GFLOPs, 34.5 MB, 12.3 ms, 1.2M. */
function tgrFormat(name, value) {
  if (value === undefined || value === null || !Number.isFinite(value)) return "";
  const scaled = (units, base) => {
    let k = 0;
    while (Math.abs(value) >= base ** (k + 1) && k < units.length - 1) k++;
    const shown = value / base ** k;
    return `${k ? shown.toFixed(shown >= 100 ? 0 : 1) : shown}${units[k]}`;
  };
  if (/flops$/.test(name)) return scaled([" FLOPs", " kFLOPs", " MFLOPs", " GFLOPs", " TFLOPs", " PFLOPs"], 1000);
  if (/bytes$/.test(name)) return scaled([" B", " kB", " MB", " GB", " TB"], 1000);
  if (/_ms$/.test(name)) return `${value.toFixed(value >= 100 ? 0 : value >= 1 ? 2 : 3)} ms`;
  if (name === "num_params") return scaled(["", "k", "M", "G"], 1000);
  return Number.isInteger(value) ? value.toLocaleString("en") : value.toPrecision(3);
}

/* The scale of render/theme.py: ten steps of viridis, logarithmic where every value is
   positive and they span two decades or more. */
function tgrScaleOf(values) {
  const finite = values.filter((v) => Number.isFinite(v));
  if (!finite.length) return null;
  const low = Math.min(...finite), high = Math.max(...finite);
  return {low, high, log: low > 0 && high >= 100 * low};
}

function tgrColourOf(R, scale, value) {
  const steps = R.config.colour.scale;
  let [v, low, high] = [value, scale.low, scale.high];
  if (scale.log) { v = Math.log10(Math.max(v, low)); low = Math.log10(low); high = Math.log10(high); }
  const share = high <= low ? 0 : (v - low) / (high - low);
  const step = Math.min(steps.length - 1, Math.max(0, Math.floor(share * steps.length)));
  return [steps[step], step < 5 ? "#ffffff" : "#000000"];
}

function tgrValue(R, i) {
  const name = R.colourBy;
  const value = name && R.info[i] ? R.info[i][name] : undefined;
  return typeof value === "number" ? value : undefined;
}

function tgrColourControl(R) {
  const select = R.$(".tgr-colour"), colour = R.config.colour;
  for (const name of colour.names) select.add(new Option(colour.headings[name], name));
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
  if (fresh && R.colourBy) tgrTimeline(R);  // the scale follows what is drawn
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
  const drawn = [...R.elements.keys()].filter((i) => tgrValue(R, i) !== undefined);
  // the scale spans the boxes: a cluster holds them, so its sum would squash them all
  const boxes = drawn.filter((i) => !R.elements.get(i).classList.contains("cluster"));
  R.scale = R.colourBy ? tgrScaleOf((boxes.length ? boxes : drawn).map((i) => tgrValue(R, i))) : null;
  tgrLegend(R);
  if (!R.scale) return;
  for (const i of drawn) {
    const element = R.elements.get(i), shape = tgrShape(element);
    if (!shape) continue;
    const value = Math.min(R.scale.high, Math.max(R.scale.low, tgrValue(R, i)));
    const [fill, text] = tgrColourOf(R, R.scale, value);
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
  low.textContent = tgrFormat(name, R.scale.low);
  high.textContent = tgrFormat(name, R.scale.high) + (R.scale.log ? " (log scale)" : "");
  const ramp = document.createElement("span");
  ramp.className = "tgr-ramp";
  ramp.style.background = `linear-gradient(to right, ${R.config.colour.scale.join(", ")})`;
  legend.append(low, ramp, high);
  legend.title = `${R.config.colour.headings[name] || name}, over the boxes drawn (a module drawn open is outlined, its value capped to the scale)`;
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
