"""Driving a loaded report in the browser: wait for it, act on drawn elements, read its state."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from report.browser import BrowserPage, open_page

__all__ = ["loaded_report", "element", "centre", "act", "drawn_ids", "state", "timings",
           "open_in_place", "open_where_it_is", "big_model_actions", "measure"]

ROOT = "#tgr"


@contextmanager
def loaded_report(browser: Any, path: Path, suffix: str = "", fit: bool = True,
                  width: int = 1280, height: int = 900) -> Iterator[BrowserPage]:
    """The report at ``path`` (``suffix``: a fragment such as ``#d=1``), its data read and
    its layout engine ready; with ``fit``, the whole drawing in view, so that every element
    can be clicked where it is drawn."""
    with open_page(browser, path, width, height, suffix) as loaded:
        page = loaded.page
        page.wait_for_selector(f"{ROOT}[data-ready][data-engine=ready]", timeout=60_000)
        if fit:
            page.click(f"{ROOT} .tgr-fit")
        yield loaded


def element(page: Any, node_id: str, form: str = "") -> Any:
    """The drawn element of ``node_id``: its box (``n``), cluster (``c``), or either."""
    if form:
        return page.locator(f'{ROOT} .tgr-canvas [id="{form}-{node_id}"]')
    return page.locator(f'{ROOT} .tgr-canvas [id="n-{node_id}"], '
                        f'{ROOT} .tgr-canvas [id="c-{node_id}"]')


def centre(locator: Any) -> tuple[float, float]:
    box = locator.bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def act(page: Any, action: Any, *args: Any) -> int:
    """Run ``action(*args)`` (a click, a key, an option) and wait for the re-layout it
    starts to be painted; the milliseconds from the reader's action to that paint."""
    before = int(page.get_attribute(ROOT, "data-layouts") or 0)
    action(*args)
    page.wait_for_function(
        f"Number(document.querySelector('{ROOT}').dataset.layouts || 0) > {before}",
        timeout=60_000)
    return int(page.get_attribute(ROOT, "data-last-ms"))


def each_flow(page: Any) -> Iterator[str]:
    """The flow directions in turn, ``TB`` (the page's default) then ``LR``, the page laid
    out in each before it is yielded."""
    yield "TB"
    act(page, page.select_option, f"{ROOT} select.tgr-rankdir", "LR")
    yield "LR"


def drawn_ids(page: Any, kind: str = "node") -> set[str]:
    """Ids of the drawn ``node`` or ``cluster`` elements (``n-...``, ``c-...``)."""
    return set(page.eval_on_selector_all(f"{ROOT} .tgr-canvas g.{kind}",
                                         "els => els.map(e => e.id)"))


def state(page: Any) -> dict[str, Any]:
    """What the page shows: the DOT it composed, the selection, the search counter."""
    return page.evaluate(f"""() => {{
      const R = document.querySelector('{ROOT}').tgr;
      return {{dot: R.drawn.dot, selected: R.selected === undefined ? null : R.D.ids[R.selected],
               count: R.$('.tgr-count').textContent, hash: location.hash}};
    }}""")


def timings(page: Any) -> dict[str, Optional[float]]:
    """Milliseconds from navigation: first contentful paint (the opening drawing is in the
    first paint), the page's data read (``tgr-ready``) and its layout engine ready."""
    return page.evaluate("""() => {
      const paint = performance.getEntriesByName('first-contentful-paint')[0];
      const mark = (name) => {
        const found = performance.getEntriesByName(name)[0];
        return found ? found.startTime : null;
      };
      return {paint: paint ? paint.startTime : null, ready: mark('tgr-ready'),
              engine: mark('tgr-engine-ready')};
    }""")


def open_in_place(page: Any, node_id: str) -> int:
    """Double-click ``node_id`` where it is drawn (a cluster on its title, a box anywhere),
    the whole drawing in view first; the milliseconds until the new drawing is painted."""
    page.click(f"{ROOT} .tgr-fit")
    target = element(page, node_id)
    if (target.first.get_attribute("class") or "").startswith("cluster"):
        target = target.first.locator("text").first
    return act(page, target.first.dblclick)


def open_where_it_is(page: Any, node_id: str) -> int:
    """Double-click ``node_id`` at the zoom the reader has (a cluster on its title, a box in
    its middle), panned to the canvas's middle first; the milliseconds until painted."""
    x, y = page.evaluate("""(id) => {
      const R = document.querySelector('%s').tgr, svg = R.svg;
      const e = svg.querySelector(`[id="n-${CSS.escape(id)}"], [id="c-${CSS.escape(id)}"]`);
      const part = e.classList.contains('cluster') ? e.querySelector('text') : e;
      const canvas = R.host.getBoundingClientRect(), [cx, cy] = tgrCentre(svg, part);
      tgrPutAt(svg, tgrScale(svg), cx, cy, canvas.left + canvas.width / 2, canvas.top + canvas.height / 2);
      const r = part.getBoundingClientRect();
      return [r.left + r.width / 2, r.top + r.height / 2];
    }""" % ROOT, node_id)
    return act(page, page.mouse.dblclick, x, y)


def big_model_actions(fold_first: str, block: str) -> list[tuple[str, Any]]:
    """What a reader does first in a big model: show a folded run's repeats (its leader
    ``fold_first``), open one ``block`` in place, close it again, show tensors."""
    return [
        (f"show the repeats of {fold_first}", lambda page: open_in_place(page, fold_first)),
        (f"open {block}", lambda page: open_in_place(page, block)),
        (f"close {block}", lambda page: open_in_place(page, block)),
        ("show tensors", lambda page: act(page, page.locator(
            f'{ROOT} .tgr-opt[data-opt="tensors"]').click)),
    ]


def measure(browser: Any, path: Path, actions: list[tuple[str, Any]],
            fit: bool = True) -> dict[str, float]:
    """Load the report at ``path``, run ``actions`` (label, function of the page returning
    its milliseconds) and return every time: ``paint``, ``ready``, ``engine`` (from
    navigation) and one per action (from the reader's input to the painted drawing).
    The first action comes a second after the engine is ready, as a reader's would."""
    with loaded_report(browser, path, fit=fit) as loaded:
        found: dict[str, float] = dict(timings(loaded.page))
        loaded.page.wait_for_timeout(1000)
        for label, action in actions:
            found[label] = action(loaded.page)
    if loaded.problems:
        raise AssertionError(f"the page reported errors: {loaded.problems[:3]}")
    return found
