"""The page's composer writes to_dot's exact DOT for every state a static drawing can express."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

import pytest

import torchgraphrec as tgr
from helpers import fresh
from torchgraphrec.render.describe import describe
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.options import RenderOptions

MODELS = ("resnet_like", "gpt2", "reused_module", "looped_linear", "recurrent",
          "transformer_encoder", "structured_outputs", "two_inputs_kwargs", "bert")
STATES: tuple[dict[str, Any], ...] = (
    {"depth": 0}, {"depth": 1}, {"depth": 2}, {"depth": None},
    {"depth": None, "fold_repeats": False}, {"depth": 1, "include_tensors": True},
    {"depth": None, "include_ops": False}, {"depth": 2, "include_params": True},
    {"depth": None, "expand_leaves": True, "include_params": True, "include_tensors": True},
    {"depth": 1, "rankdir": "LR"},
)


def _state(options: RenderOptions) -> dict[str, Any]:
    """The page's state for a static drawing's options (open: every call above the depth)."""
    return {"depth": options.depth, "tensors": options.include_tensors,
            "params": options.include_params, "ops": options.include_ops,
            "leaves": options.expand_leaves, "fold": options.fold_repeats,
            "rankdir": options.rankdir, "side": "both"}


_COMPOSE = """([D, states]) => {
  const P = tgrPrepare(D);
  return states.map((s) => {
    const open = new Set();
    for (let i = 0; i < D.ids.length; i++) {
      if (D.kind[i] === "L" && (s.depth === null || D.depth[i] < s.depth)) open.add(i);
    }
    return tgrCompose(P, {...s, open, unfolded: new Set(), leafOps: new Set()}).dot;
  });
}"""


@pytest.fixture(scope="module")
def composer(browser: Any) -> Any:
    page = browser.new_page()
    script = (resources.files("torchgraphrec.render") / "templates" / "compose.js").read_text()
    page.set_content("<!DOCTYPE html><html><body></body></html>")
    page.add_script_tag(content=script)
    yield lambda description, states: page.evaluate(_COMPOSE, [description, states])
    page.close()


def _options(state: dict[str, Any]) -> RenderOptions:
    return replace(RenderOptions(), **state)


@pytest.mark.parametrize("name", MODELS)
def test_composer_writes_to_dots_bytes(composer: Any, name: str) -> None:
    graph = tgr.record(*fresh(name)).graph
    description = describe(graph, RenderOptions())
    options = [_options(state) for state in STATES]
    # the description is made once: the options the page changes are not in it
    composed = composer(description, [_state(o) for o in options])
    for option, dot in zip(options, composed):
        assert dot == to_dot(graph, **vars(option)), (name, option)
