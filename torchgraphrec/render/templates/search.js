/* torchgraphrec report: search the recording (not the drawing). Hits inside closed modules
   or folded repeats are counted and marked on the box that holds them; Enter and
   Shift+Enter step through the hits, opening the path to each and zooming to it. */

function tgrMatches(R, query) {
  const {D, info} = R, found = [];
  for (let i = 0; i < D.ids.length; i++) {
    const attrs = info[i] || {};
    const fields = [D.ids[i], attrs.label, attrs.qualname, attrs.type, attrs.name];
    if (fields.some((f) => f !== undefined && f !== null && String(f).toLowerCase().includes(query))) found.push(i);
  }
  return found;
}

function tgrSearchSetup(R) {
  const input = R.$(".tgr-search");
  R.search = {query: "", list: [], current: -1};
  input.addEventListener("input", () => {
    const query = input.value.trim().toLowerCase();
    R.search = {query, list: query ? tgrMatches(R, query) : [], current: -1};
    tgrPaintMarks(R);
    tgrCount(R);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    tgrStep(R, event.shiftKey ? -1 : 1);
  });
  R.$(".tgr-next").addEventListener("click", () => tgrStep(R, 1));
  R.$(".tgr-prev").addEventListener("click", () => tgrStep(R, -1));
}

/* "3 of 40 · 12 drawn, 28 inside closed modules or repeats" */
function tgrCount(R) {
  const {list, current, query} = R.search, count = R.$(".tgr-count");
  if (!query) { count.textContent = ""; return; }
  let drawn = 0, held = 0;
  for (const i of list) {
    const element = tgrHolder(R, i);
    if (element && R.elements.get(i) === element) drawn++;
    else if (element) held++;
  }
  const where = list.length ? ` · ${drawn} drawn, ${held} inside closed boxes (marked)` : "";
  const position = current >= 0 ? `${current + 1} of ${list.length}` : `${list.length} match${list.length === 1 ? "" : "es"}`;
  count.textContent = position + where;
}

async function tgrStep(R, direction) {
  const search = R.search;
  if (!search.list.length) return;
  const n = search.list.length;
  search.current = search.current < 0 ? (direction > 0 ? 0 : n - 1) : (search.current + direction + n) % n;
  const i = search.list[search.current];
  await tgrReveal(R, i, true);
  tgrSelect(R, i, {});
  tgrCount(R);
}
