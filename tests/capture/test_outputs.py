"""What a model returns: every path of its output is an output node, whatever the value was."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._pytree import keystr, tree_flatten_with_path

import torchgraphrec as tgr
from helpers import nodes_of


class PassesThrough(nn.Module):
    """Returns what it computed beside what it was given: an input, a parameter, a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.ones(4))
        self.table = torch.arange(4.0)  # a plain attribute: no parameter, no buffer

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        return {"logits": self.lin(x) * mask, "mask": mask, "scale": self.scale,
                "again": x, "table": self.table, "steps": 3}


def _outputs(graph: Any) -> dict[str, str]:
    """``{name: node}`` of the output nodes."""
    return {a["name"]: n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output"}


def _inputs(graph: Any) -> dict[str, str]:
    return {a["name"]: n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "input"}


@pytest.mark.parametrize("ops", ["torch", None, "autograd"])
def test_each_tensor_returned_is_an_output_node_named_by_its_path(ops: str | None) -> None:
    model, args = PassesThrough(), (torch.randn(2, 4), torch.ones(2, 4))
    recording = tgr.record(model, args, ops=ops)
    returned = model(*args)
    paths = {"output" + keystr(path): leaf for path, leaf in tree_flatten_with_path(returned)[0]
             if isinstance(leaf, torch.Tensor)}
    outputs = _outputs(recording.graph)
    assert set(outputs) == set(paths)
    for name, node in outputs.items():
        assert recording.graph.nodes[node]["shape"] == tuple(paths[name].shape)
    assert recording.graph.nodes["layer:#0"]["outputs"] == tuple(outputs.values())
    tgr.validate(recording.graph)


@pytest.mark.parametrize("ops", ["torch", None, "autograd"])
def test_a_value_returned_as_it_came_in_is_fed_by_the_node_it_was(ops: str | None) -> None:
    recording = tgr.record(PassesThrough(), (torch.randn(2, 4), torch.ones(2, 4)), ops=ops)
    graph, outputs, inputs = recording.graph, _outputs(recording.graph), _inputs(recording.graph)
    assert list(graph.predecessors(outputs["output['mask']"])) == [inputs["mask"]]
    assert list(graph.predecessors(outputs["output['again']"])) == [inputs["x"]]
    assert list(graph.predecessors(outputs["output['scale']"])) == ["param:scale"]
    table = list(graph.predecessors(outputs["output['table']"]))
    if ops is None:  # no op is seen: the call that returned it made it, as far as it shows
        assert table == ["layer:#0"]
    elif ops == "autograd":  # autograd's graph: a constant that needs no grad is not in it
        assert table == []
    else:
        assert graph.nodes[table[0]]["role"] == "constant"
    assert {a["role"] for a in map(graph.nodes.get, inputs.values())} == {"input"}


def test_the_identity_models_output_is_its_input_passed_on() -> None:
    class Identity(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    graph = tgr.record(Identity(), torch.randn(2, 3)).graph
    assert _inputs(graph) == {"x": "tensor:0@v0"}
    assert _outputs(graph) == {"output": "tensor:1@v0"}
    assert list(graph.edges) == [("tensor:0@v0", "tensor:1@v0")]


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        return y, y, x, x, self.scale, self.scale


def test_a_tensor_returned_at_several_paths_is_named_by_the_first() -> None:
    graph = tgr.record(Twice(), torch.randn(2, 3)).graph
    outputs = _outputs(graph)
    assert list(outputs) == ["output[0]", "output[2]", "output[4]"]
    assert list(graph.predecessors(outputs["output[2]"])) == ["tensor:0@v0"]
    assert list(graph.predecessors(outputs["output[4]"])) == ["param:scale"]
    assert graph.nodes["layer:#0"]["outputs"] == tuple(outputs.values())


def test_an_earlier_forwards_output_returned_again_is_this_forwards_output() -> None:
    class MaybeDouble(nn.Module):
        def forward(self, x: torch.Tensor, double: bool = True) -> torch.Tensor:
            return x * 2 if double else x

    model = MaybeDouble()
    with tgr.Recorder(model) as rec:
        doubled = model(torch.randn(2, 3))
        model(doubled, double=False)
    graph = rec.graph
    outputs = {n: a for n, a in nodes_of(graph, "tensor").items() if a["role"] == "output"}
    first, second = sorted(outputs, key=lambda n: outputs[n]["seq"])
    assert outputs[first]["parent"] == "layer:#0" and outputs[second]["parent"] == "layer:#1"
    assert list(graph.predecessors(second)) == [first]


class KeepsACache(nn.Module):
    """Appends each forward's keys to a cache it keeps, as attention does for the next
    token."""

    def __init__(self) -> None:
        super().__init__()
        self.key = nn.Linear(4, 4)
        self.cache: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = self.key(x)
        self.cache = keys if self.cache is None else torch.cat([self.cache, keys])
        return self.cache.sum(0)


def test_a_value_a_module_keeps_for_the_next_forward_links_to_the_op_that_made_it() -> None:
    model = KeepsACache()
    with tgr.Recorder(model) as rec:
        model(torch.randn(2, 4))
        kept = model.cache
        model(torch.randn(1, 4))
    graph = rec.graph
    [cat] = [n for n, a in nodes_of(graph, "op").items() if a["name"] == "cat"]
    [source, _] = sorted(graph.predecessors(cat), key=lambda n: graph.nodes[n]["seq"])
    # the first forward's key call made the cache the second forward's cat reads
    assert graph.nodes[source]["parent"] == "layer:key#0"
    assert [graph.nodes[n]["name"] for n in graph.predecessors(source)] == ["linear"]
    assert graph.nodes[cat]["parent"] == "layer:#1" and kept is not model.cache
    assert not [n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "constant"]
