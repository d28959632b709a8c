"""Two gloo ranks: FSDP2's unshard drawn as one all_gather box per unit, every op with include_ops="all"."""

from __future__ import annotations

from typing import Any, Iterator

import networkx as nx
import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from ranks.harness import Rank, scenario
from torchgraphrec.render.dot import to_dot
from torchgraphrec.render.options import RenderOptions
from torchgraphrec.render.view import build_view

SCENARIOS: dict[str, Any] = {}
on_ranks = scenario(SCENARIOS)
#: What FSDP runs to gather a unit's parameters, besides the collective itself.
MACHINERY = {"all_gather_copy_in", "split_with_sizes_copy", "as_strided", "empty"}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.fc1(x).relu())


class Net(nn.Module):
    """Three FSDP units: two blocks and the root (which gathers ``inp`` and ``out``)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(8, 8), nn.Linear(8, 4)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def _sharded() -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = Net()
    for block in model.blocks:
        fully_shard(block)
    return fully_shard(model)


@on_ranks
def fsdp_units(ctx: Rank) -> dict:
    from conftest import NEEDS

    if not NEEDS["fully_shard"][0]:
        return {}
    model = _sharded()

    def shard_bytes(module: nn.Module, skip: str = "\0") -> int:
        return sum(p.to_local().numel() * p.to_local().element_size()
                   for name, p in module.named_parameters() if not name.startswith(skip))

    # what each unit's collective hands over: this rank's shards of the unit's parameters
    # (read before the forward: the root keeps its parameters gathered after it)
    expected = {"": shard_bytes(model, skip="blocks."), "blocks.0": shard_bytes(model.blocks[0])}
    rec = tgr.record(model, torch.ones(4, 8))
    return {"json": tgr.to_json(rec.graph), "bytes": expected}


@on_ranks
def fsdp_mixed_two_forwards(ctx: Rank) -> dict:
    """Two forwards of units casting their parameters to bfloat16: the second reads the
    cast buffers the first made, and gathers the same parameters again."""
    from conftest import NEEDS

    if not NEEDS["fully_shard"][0]:
        return {}
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model, policy = Net(), MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    # the parameters as FSDP2 holds them: this rank's float32 shards (read before the
    # forward: the root keeps its parameters gathered after it)
    shards = {name: (str(p.dtype).replace("torch.", ""),
                     p.to_local().numel() * p.to_local().element_size())
              for name, p in model.named_parameters()}
    with tgr.Recorder(model) as rec:
        for _ in range(2):
            model(torch.ones(4, 8))
    return {"json": tgr.to_json(rec.graph), "shards": shards}


def _graph(found: dict) -> nx.DiGraph:
    return tgr.from_json(found["json"])


def _names(graph: nx.DiGraph, nodes: list[str]) -> list[str]:
    return [graph.nodes[n].get("name") for n in nodes if graph.nodes[n]["kind"] == "op"]


@pytest.mark.needs("fully_shard")
@pytest.mark.needs("unit_views_its_shards")
def test_each_unit_is_one_all_gather_box_feeding_its_parameters(ranks) -> None:
    for found in ranks("fsdp_units"):
        graph = _graph(found)
        view = build_view(graph, RenderOptions())
        names = _names(view.folded, view.nodes)
        assert not MACHINERY & set(names) and "all_gather_single" not in names
        boxes = [n for n in view.nodes if view.folded.nodes[n].get("name") == "all_gather"]
        # the root's unit and the blocks' (folded: blocks.0–1 × 2)
        assert [view.folded.nodes[view.folded.nodes[b]["parent"]]["qualname"]
                for b in boxes] == ["", "blocks.0"]
        fed = {b: sorted(t for s, t in view.edges if s == b) for b in boxes}
        assert fed[boxes[0]] == ["layer:inp#0", "layer:out#0"]
        assert fed[boxes[1]] == ["layer:blocks.0.fc1#0", "layer:blocks.0.fc2#0"]
        assert [view.folded.nodes[b]["comm_bytes"] for b in boxes] == \
            [found["bytes"][""], found["bytes"]["blocks.0"]]
        dot = to_dot(graph)
        assert dot.count("label=\"all_gather\\n") == 2
        assert f'label="all_gather\\n{found["bytes"]["blocks.0"]} B"' in dot


@pytest.mark.needs("fully_shard")
@pytest.mark.needs("unit_views_its_shards")
def test_unfolded_every_unit_has_its_box(ranks) -> None:
    graph = _graph(ranks("fsdp_units")[0])
    view = build_view(graph, RenderOptions(fold_repeats=False, include_params=True,
                                             expand_leaves=True))
    boxes = [n for n in view.nodes if view.folded.nodes[n].get("name") == "all_gather"]
    assert len(boxes) == 3
    # with parameters drawn, each box feeds its unit's parameters, which feed their ops
    fed = sorted(t for s, t in view.edges if s in boxes)
    assert fed == sorted(n for n, kind in graph.nodes(data="kind") if kind == "param")


def _inside(graph: nx.DiGraph, node: str, call: str) -> bool:
    parent = graph.nodes[node]["parent"]
    while parent is not None and parent != call:
        parent = graph.nodes[parent]["parent"]
    return parent == call


@pytest.mark.needs("fully_shard")
def test_a_second_forwards_boxes_feed_its_own_calls(ranks) -> None:
    # each box fed the unit's parameters, drawn in the first forward's calls: the second
    # forward's box fed back into the first, and with the cast buffers the second forward
    # reads from the first, the drawing's edges made a cycle (networkx raised)
    graph = _graph(ranks("fsdp_mixed_two_forwards")[0])
    tgr.validate(graph)
    for options in (RenderOptions(), RenderOptions(depth=1),
                    RenderOptions(fold_repeats=False, include_params=True, expand_leaves=True)):
        view = build_view(graph, options)
        boxes = [n for n in view.nodes if view.folded.nodes[n].get("name") == "all_gather"]
        for box in boxes:
            call = view.folded.nodes[box]["unshard_of"]
            assert all(_inside(view.folded, t, call) for s, t in view.edges if s == box), box
        to_dot(graph, **vars(options))
    view = build_view(graph, RenderOptions(fold_repeats=False, include_params=True,
                                             expand_leaves=True))
    roots = sorted((n for n, a in graph.nodes(data=True)
                    if a["kind"] == "layer" and a["parent"] is None),
                   key=lambda n: graph.nodes[n]["seq"])
    later = [n for n in view.nodes if view.folded.nodes[n].get("name") == "all_gather"
             and _inside(view.folded, n, roots[1])]
    assert len(later) == 2  # the blocks gather again (the root keeps its own gathered)
    assert all(graph.nodes[t]["kind"] == "op" for s, t in view.edges if s in later)


@pytest.mark.needs("fully_shard")
def test_a_cast_parameter_is_described_as_the_shard_it_is(ranks) -> None:
    """dtype and bytes of one tensor: the float32 shard, not the bfloat16 cast the forward
    used with the shard's size."""
    for found in ranks("fsdp_mixed_two_forwards"):
        graph = _graph(found)
        seen = {attrs["qualname"]: (attrs["dtype"], attrs["bytes"])
                for _, attrs in graph.nodes(data=True) if attrs["kind"] == "param"}
        assert seen == found["shards"]
        assert {dtype for dtype, _ in seen.values()} == {"float32"}


@pytest.mark.needs("fully_shard")
def test_include_ops_all_draws_every_op_as_recorded(ranks) -> None:
    graph = _graph(ranks("fsdp_units")[0])
    view = build_view(graph, RenderOptions(include_ops="all", fold_repeats=False,
                                             expand_leaves=True))
    recorded = sorted(n for n, kind in graph.nodes(data="kind") if kind == "op")
    assert sorted(n for n in view.nodes if view.kind(n) == "op") == recorded
    assert {"all_gather_copy_in", "split_with_sizes_copy", "as_strided"} <= \
        set(_names(graph, view.nodes))
    assert "all_gather" not in _names(graph, view.nodes)
    # the recorded edges, not the boxes' (the ops FSDP ran stand as they ran)
    copy_in = next(n for n in view.nodes if graph.nodes[n]["name"] == "all_gather_copy_in")
    assert [t for s, t in view.edges if s == copy_in] == list(graph.successors(copy_in))


@pytest.fixture(scope="module")
def composer(browser: Any) -> Iterator[Any]:
    from importlib import resources

    script = (resources.files("torchgraphrec.report") / "templates" / "compose.js").read_text()
    page = browser.new_page()
    page.set_content("<!DOCTYPE html><html><body></body></html>")
    page.add_script_tag(content=script)
    yield lambda description, states: page.evaluate(COMPOSE, [description, states])
    page.close()


COMPOSE = """([D, states]) => {
  const P = tgrPrepare(D);
  return states.map((s) => {
    const open = new Set();
    for (let i = 0; i < D.ids.length; i++) {
      if (D.kind[i] === "L" && (s.depth === null || D.depth[i] < s.depth)) open.add(i);
    }
    return tgrCompose(P, {...s, open, unfolded: new Set(), leafOps: new Set(),
                          side: "both"}).dot;
  });
}"""
STATES = ({"depth": None}, {"depth": 1}, {"depth": 0}, {"depth": None, "include_ops": "all"},
          {"depth": None, "include_ops": False}, {"depth": None, "fold_repeats": False},
          {"depth": None, "include_params": True, "expand_leaves": True},
          {"depth": 2, "include_ops": "all", "include_params": True, "fold_repeats": False})


@pytest.mark.needs("fully_shard")
def test_the_reports_composer_draws_the_boxes_as_to_dot_does(ranks, composer) -> None:
    from torchgraphrec.report.describe import describe

    graph = _graph(ranks("fsdp_units")[1])
    options = [RenderOptions(**state) for state in STATES]
    states = [{"depth": o.depth, "tensors": o.include_tensors, "params": o.include_params,
               "ops": o.include_ops, "leaves": o.expand_leaves, "fold": o.fold_repeats,
               "rankdir": o.rankdir} for o in options]
    composed = composer(describe(graph, RenderOptions()), states)
    for option, dot in zip(options, composed):
        assert dot == to_dot(graph, **vars(option)), option
