/* torchgraphrec report: search the recording (not the drawing). Hits inside closed modules
   or folded repeats are counted and marked on the box that holds them; Enter and
   Shift+Enter step through the hits, opening the path to each and zooming to it. */

/* What the view can show that matches: module calls always, ops, tensors and parameters
   while they are shown; a match inside a folded run's later repeat is the box that draws
   it (its counterpart in the first repeat), once. In seq order, each box once. A diff's
   side shown alone lacks what only the other side has: counted apart, never stepped to. */
function tgrMatches(R, query) {
  const {D, info, state} = R, found = new Set();
  let calls = 0, elsewhere = 0;
  const shown = {L: true, M: true, O: state.ops, T: state.tensors, P: state.params};
  const canonical = R.drawn && R.drawn.canonical ? R.drawn.canonical : (i) => i;
  for (let i = 0; i < D.ids.length; i++) {
    if (!shown[D.kind[i]] || (D.kind[i] === "O" && state.ops === true && R.P.isLayout[i])) continue;
    const attrs = info[i] || {};
    // what the page shows of it, never its node id (every call's ends in #0, every op's
    // starts with op:); a module's later call also as its title numbers it, relu#1
    const fields = [attrs.label, attrs.qualname, attrs.type, attrs.name];
    if (attrs.call_index > 0) fields.push(`${attrs.qualname}#${attrs.call_index}`);
    if (!fields.some((f) => f !== undefined && f !== null && String(f).toLowerCase().includes(query))) continue;
    if (!tgrOnSide(R, i)) { elsewhere++; continue; }
    found.add(canonical(i));
    calls++;
  }
  R.searchCalls = calls;
  R.searchElsewhere = elsewhere;
  return [...found].sort((a, b) => a - b);
}

/* The matches again for a new view (what is shown or folded changed), the current one kept. */
function tgrSearchAgain(R) {
  const search = R.search;
  if (!search || !search.query) return;
  const current = search.current >= 0 ? search.list[search.current] : undefined;
  search.list = tgrMatches(R, search.query);
  search.current = current === undefined ? -1 : search.list.indexOf(current);
  tgrCount(R);
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
  if (!query) { count.textContent = count.title = ""; return; }
  let drawn = 0, held = 0;
  for (const i of list) {
    const element = tgrHolder(R, i);
    if (element && R.elements.get(i) === element) drawn++;
    else if (element) held++;
  }
  const where = list.length ? ` · ${drawn} drawn, ${held} inside closed boxes (marked)` : "";
  const position = current >= 0 ? `${current + 1} of ${list.length}` : `${list.length} match${list.length === 1 ? "" : "es"}`;
  const folded = R.searchCalls > list.length ? ` (${R.searchCalls} with the folded repeats)` : "";
  const other = {a: "B", b: "A"}[R.state.side];
  const elsewhere = R.searchElsewhere ? ` · ${R.searchElsewhere} only in side ${other}` : "";
  count.textContent = count.title = position + folded + where + elsewhere;
}

async function tgrStep(R, direction) {
  const search = R.search;
  if (!search.list.length) return;
  const n = search.list.length;
  search.current = search.current < 0 ? (direction > 0 ? 0 : n - 1) : (search.current + direction + n) % n;
  const i = search.list[search.current];
  await tgrReveal(R, i, true);
  tgrSelect(R, i, {});
  search.current = search.list.indexOf(i);  // the list follows the view (tgrSearchAgain)
  tgrCount(R);
}
