"""The page's composer writes to_dot's exact DOT for every state a static drawing can express."""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

import pytest
import torch

import torchgraphrec as tgr
from compare.cases import gpt2, recorded, train_and_eval
from helpers import fresh
from torchgraphrec.report.describe import describe
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.options import RenderOptions

MODELS = ("resnet_like", "gpt2", "reused_module", "looped_linear", "recurrent",
          "transformer_encoder", "structured_outputs", "two_inputs_kwargs", "bert", "llama",
          "multihead_attention")
STATES: tuple[dict[str, Any], ...] = (
    {"depth": 0}, {"depth": 1}, {"depth": 2}, {"depth": None},
    {"depth": None, "fold_repeats": False}, {"depth": 1, "include_tensors": True},
    {"depth": None, "include_ops": False}, {"depth": 2, "include_params": True},
    {"depth": None, "expand_leaves": True, "include_params": True, "include_tensors": True},
    {"depth": 1, "rankdir": "LR"}, {"depth": None, "rankdir": "LR"},
    {"depth": None, "include_ops": "all"},
    {"depth": 2, "include_ops": "all", "fold_repeats": False},
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
    script = (resources.files("torchgraphrec.report") / "templates" / "compose.js").read_text()
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


def _same_as_to_dot(composer: Any, graph: Any, states: tuple[dict[str, Any], ...],
                    **fixed: Any) -> None:
    description = describe(graph, replace(RenderOptions(), **fixed))
    options = [_options({**fixed, **state}) for state in states]
    composed = composer(description, [_state(o) for o in options])
    for option, dot in zip(options, composed):
        assert dot == to_dot(graph, **vars(option)), option


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.fc(x).view(2, 2, 2).flatten(1) * scale


class _Shared(torch.nn.Module):
    """Eleven blocks taking one ``scale`` made once (as rotary tables are): markers."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Linear(1, 4)
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(11))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.table(torch.ones(1, 1))
        for block in self.blocks:
            x = block(x, scale)
        return x


def test_shared_inputs_markers_and_reshape_labels_are_to_dots(composer: Any) -> None:
    torch.manual_seed(0)
    graph = tgr.record(_Shared(), torch.randn(2, 4)).graph
    assert "tgr-marker" in to_dot(graph, fold_repeats=False, depth=1)
    assert " label=reshape" in to_dot(graph, expand_leaves=True)
    _same_as_to_dot(composer, graph, (*STATES, {"depth": None, "expand_leaves": True},
                                      {"depth": None, "fold_repeats": False,
                                       "expand_leaves": True}))


def test_cost_lines_and_their_legend_are_to_dots(composer: Any) -> None:
    graph = tgr.record(*fresh("resnet_like"), backward=True, flops=True).graph
    _same_as_to_dot(composer, graph, STATES, show_costs=True)


DIFFS = {
    "widened": lambda: (recorded(width=16), recorded(width=32)),
    "added block": lambda: (recorded(blocks=1), recorded(blocks=2)),
    "removed dropout": lambda: (recorded(), recorded(dropout=False)),
    "changed activation": lambda: (recorded(), recorded(act=torch.nn.GELU)),
    "train and eval": train_and_eval,
    "gpt2 2 and 3 layers": lambda: (gpt2(2), gpt2(3)),
}


@pytest.mark.parametrize("name", DIFFS)
def test_a_diffs_marks_are_to_dots(composer: Any, name: str) -> None:
    union = tgr.diff(*DIFFS[name]()).union
    _same_as_to_dot(composer, union, STATES)


class _FusedAttention(torch.nn.Module):
    """Query, key and value split from one projection (GPT-2 without its cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (part.view(1, 4, 2, 4).transpose(1, 2) for part in self.qkv(x).split(8, -1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_edges_of_several_roles_merged_into_one_keep_them_all(composer: Any) -> None:
    torch.manual_seed(0)
    graph = tgr.record(_FusedAttention(), torch.randn(1, 4, 8)).graph
    # the three arguments' edges all come from the split once their reshapes are bridged:
    # one edge, which is each of them (before, whichever came first named it alone)
    labelled = [line for line in to_dot(graph, depth=None).splitlines()
                if "scaled_dot_product_attention" in line and "->" in line and "label=" in line]
    assert len(labelled) == 1 and 'label="query/key/value"' in labelled[0]
    _same_as_to_dot(composer, graph, (*STATES, {"depth": None, "rankdir": "LR"}))


def test_calls_drawn_feeding_each_other_are_drawn_as_to_dot_draws_them(composer: Any) -> None:
    # FSDP's unshard drawing once fed a later call's box into an earlier one: lifted to
    # what is drawn, such edges close a cycle, where networkx's topological sort raised
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    graph = tgr.record(model, torch.randn(2, 4)).graph
    late = max((n for n, a in graph.nodes(data=True) if a["kind"] == "op"),
               key=lambda n: graph.nodes[n]["seq"])
    graph.add_edge(late, "param:0.weight", kind="flow", seq=graph.nodes[late]["seq"], t_ns=0)
    assert "->" in to_dot(graph)
    _same_as_to_dot(composer, graph, STATES)
