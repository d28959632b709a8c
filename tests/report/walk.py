"""A reader's random walk through a loaded report: open, close, unfold, fold, depth, search,
table rows; after each action, whether anything drawn (and what was acted on) is in view."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["Walk", "walk", "settle", "in_view"]

ROOT = "#tgr"

# What is drawn inside the canvas now: the drawn boxes and clusters meeting it, and
# whether the element with ``id`` (if given) meets it.
_IN_VIEW = """(id) => {
  const R = document.querySelector('%s').tgr, canvas = R.host.getBoundingClientRect();
  const meets = (e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.right > canvas.left && r.left < canvas.right && r.bottom > canvas.top && r.top < canvas.bottom; };
  const all = [...R.svg.querySelectorAll('g.node, g.cluster')];
  const target = id ? R.svg.querySelector(`[id="${CSS.escape(id)}"]`) : null;
  return {drawn: all.length, seen: all.filter(meets).length, target: target ? meets(target) : null};
}""" % ROOT

# Drawn elements a reader could act on where they are: id, form, and a screen point on it
# (a cluster's title, a box's middle), only those whose point is inside the canvas.
_TARGETS = """() => {
  const R = document.querySelector('%s').tgr, canvas = R.host.getBoundingClientRect();
  const found = [];
  for (const e of R.svg.querySelectorAll('g.node, g.cluster')) {
    if (!/^(n|c|g)-/.test(e.id) || e.id.startsWith('n-op:') || e.id.startsWith('n-tensor')) continue;
    const part = e.classList.contains('cluster') ? e.querySelector('text') : e;
    if (!part) continue;
    const r = part.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (x > canvas.left + 2 && x < canvas.right - 2 && y > canvas.top + 2 && y < canvas.bottom - 2) found.push([e.id, x, y]);
  }
  return found;
}""" % ROOT


def settle(page: Any) -> None:
    """Wait until no re-layout is in flight and the next frame is painted."""
    page.wait_for_function(f"!document.querySelector('{ROOT}').tgr.inFlight", timeout=60_000)
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)))")


def in_view(page: Any, element_id: Optional[str] = None) -> dict[str, Any]:
    return page.evaluate(_IN_VIEW, element_id)


@dataclass
class Walk:
    """What a walk did: each action, and the states where nothing drawn was in view or the
    element acted on was not."""

    actions: list[str] = field(default_factory=list)
    blank: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def _double_click(page: Any, rng: random.Random) -> Optional[tuple[str, str]]:
    targets = page.evaluate(_TARGETS)
    if not targets:
        return None
    element_id, x, y = rng.choice(targets)
    page.mouse.dblclick(x, y)
    return f"double-click {element_id}", None  # a box becomes a cluster: checked by "any"


def _button(page: Any, rng: random.Random) -> Optional[tuple[str, str]]:
    targets = page.evaluate(_TARGETS)
    if not targets:
        return None
    element_id, x, y = rng.choice(targets)
    page.mouse.click(x, y)
    settle(page)
    buttons = page.locator(f"{ROOT} .tgr-actions button")
    if not buttons.count():
        return f"click {element_id}", element_id
    button = buttons.nth(rng.randrange(buttons.count()))
    text = button.text_content()
    button.click()
    return f"{text} on {element_id}", None


def _depth(page: Any, rng: random.Random) -> tuple[str, None]:
    options = page.eval_on_selector_all(f"{ROOT} .tgr-depth option", "os => os.map(o => o.value)")
    value = rng.choice(options)
    page.select_option(f"{ROOT} .tgr-depth", value)
    return f"depth {value}", None


def _search(page: Any, rng: random.Random, words: list[str]) -> tuple[str, None]:
    word = rng.choice(words)
    search = page.locator(f"{ROOT} .tgr-search")
    if search.input_value() != word:
        search.fill(word)
    search.press("Enter")
    return f"search {word!r} Enter", None


def _row(page: Any, rng: random.Random) -> tuple[str, None]:
    rows = page.locator(f"{ROOT} .tgr-calls tbody tr")
    row = rows.nth(rng.randrange(rows.count()))
    text = row.locator("td").first.text_content()
    row.click()
    return f"table row {text}", None


def walk(page: Any, steps: int, words: list[str], seed: int = 0,
         after: Callable[[Any, str], None] = lambda page, label: None) -> Walk:
    """``steps`` random actions on the loaded report in ``page`` (search ``words`` among
    them); ``after(page, label)`` runs after each one settles (a screenshot, a timing)."""
    rng, found = random.Random(seed), Walk()
    kinds = [_double_click] * 5 + [_button] * 2 + [_depth, _row] + [
        lambda page, rng: _search(page, rng, words)] * 2
    for step in range(steps):
        done = rng.choice(kinds)(page, rng)
        if done is None:
            done = _depth(page, rng)
        label, target = done
        settle(page)
        seen = in_view(page, target)
        found.actions.append(label)
        if not seen["seen"]:
            found.blank.append(f"{step}: {label} ({seen['drawn']} drawn, none in view)")
        if target and seen["target"] is False:
            found.lost.append(f"{step}: {label}")
        after(page, label)
    return found
