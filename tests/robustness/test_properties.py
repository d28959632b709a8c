"""Property-based tests: random module programs keep every promise of the recorder."""

from __future__ import annotations

import copy
from typing import Any

import networkx as nx
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn

import torchgraphrec as tgr
from helpers import assert_same_tensors, hook_state
from torchgraphrec.graph import from_json, to_json
from torchgraphrec.recording import backward_loss
from torchgraphrec.render.engine import run_engine

WIDTH = 4
KINDS = ["linear", "shared", "relu_", "residual", "cat", "iadd", "mask", "identity", "keyword",
         "nested_keyword", "buffer"]
MODES = ["grad", "no_grad", "frozen"]


@st.composite
def programs(draw: Any, depth: int = 0) -> list:
    """A list of steps; a step may nest a sub-program (a child module)."""
    kinds = KINDS + (["nest"] if depth < 2 else [])
    steps = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(kinds))
        steps.append(("nest", draw(programs(depth=depth + 1))) if kind == "nest" else (kind,))
    return steps


class Gate(nn.Module):
    """Called with keyword tensors, plain or nested in a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None,
                extras: dict | None = None) -> torch.Tensor:
        gate = gate if gate is not None else extras["gate"]
        return self.mix(x) * torch.sigmoid(gate)


class Counted(nn.Module):
    """Uses a buffer and changes another in place, as BatchNorm's running stats do."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((WIDTH,), 0.5))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.scale


class Block(nn.Module):
    """Runs a program; ``shared`` is one Linear reused wherever a step says so."""

    def __init__(self, program: list, shared: nn.Linear) -> None:
        super().__init__()
        self.program = program
        self.parts = nn.ModuleList()
        for step in program:
            kind = step[0]
            if kind == "nest":
                self.parts.append(Block(step[1], shared))
            elif kind == "shared":
                self.parts.append(shared)
            elif kind == "relu_":
                self.parts.append(nn.ReLU(inplace=True))
            elif kind == "identity":
                self.parts.append(nn.Identity())
            elif kind in ("keyword", "nested_keyword"):
                self.parts.append(Gate())
            elif kind == "buffer":
                self.parts.append(Counted())
            else:
                self.parts.append(nn.Linear(2 * WIDTH if kind == "cat" else WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for step, part in zip(self.program, self.parts):
            kind = step[0]
            if kind == "relu_":
                x = part(x * 1.0)  # in place on a fresh tensor, as models do after a layer
            elif kind == "residual":
                x = x + part(x)
            elif kind == "cat":
                x = part(torch.cat([x, x.flip(0)], dim=1))
            elif kind == "iadd":
                y = x * 2.0
                y += part(x)
                x = y
            elif kind == "mask":
                x = torch.where(x > 0, x, part(x))
            elif kind == "keyword":
                x = part(x=x, gate=x.flip(1))
            elif kind == "nested_keyword":
                x = part(x, extras={"gate": x + 1})
            else:
                x = part(x)
        return x


class Program(nn.Module):
    def __init__(self, program: list) -> None:
        super().__init__()
        self.shared = nn.Linear(WIDTH, WIDTH)
        self.body = Block(program, self.shared)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> Any:
        out = self.body(x) * scale
        return out, {"ids": out.argmax(dim=1), "count": 3, "total": out.sum()}, None


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _roles_hold(graph: nx.DiGraph) -> None:
    tensors = {n: a for n, a in graph.nodes(data=True) if a["kind"] == "tensor"}
    inputs = [a for a in tensors.values() if a["role"] == "input"]
    assert [a["name"] for a in inputs] == ["x"]  # keyword or not, named by its parameter
    assert {a["name"] for a in tensors.values() if a["role"] == "output"} <= {
        "output[0]", "output[1]['ids']", "output[1]['total']"}
    for node, attrs in tensors.items():
        if attrs["role"] == "intermediate":
            assert graph.in_degree(node), node  # every value between calls was made by an op


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), seed=st.integers(0, 2**16), needs_grad=st.booleans(),
       mode=st.sampled_from(MODES), keyword=st.booleans(), memory=st.booleans())
@example(program=[("relu_",)], seed=0, needs_grad=False, mode="grad",
         keyword=False, memory=True)  # found by hypothesis: no grad at all
@example(program=[("shared",), ("nest", [("shared",), ("relu_",)]), ("shared",)], seed=1,
         needs_grad=True, mode="grad", keyword=False,
         memory=False)  # one module reused at two depths
@example(program=[("keyword",), ("buffer",), ("nested_keyword",)], seed=2, needs_grad=False,
         mode="no_grad", keyword=True, memory=True)
def test_random_programs_keep_every_promise(program: list, seed: int, needs_grad: bool,
                                            mode: str, keyword: bool, memory: bool) -> None:
    torch.manual_seed(seed)
    model = Program(program)
    if mode == "frozen":
        model.body.requires_grad_(False)
    x = torch.randn(3, WIDTH, requires_grad=needs_grad)
    args, kwargs = ((), {"x": x, "scale": 0.5}) if keyword else ((x,), {"scale": 0.5})
    reference = copy.deepcopy(model)
    with torch.set_grad_enabled(mode != "no_grad"):
        expected = reference(*args, **kwargs)
    backward = expected[0].requires_grad  # a program with no parameter and no grad has none
    if backward:
        backward_loss(expected).backward()

    before = hook_state(model)
    with torch.set_grad_enabled(mode != "no_grad"):
        recording = tgr.record(model, args, kwargs, backward=backward, memory=memory)
    assert_same_tensors(recording.output, expected)
    assert _grads(model).keys() == _grads(reference).keys()
    for name, grad in _grads(model).items():
        assert torch.equal(grad, _grads(reference)[name]), name
    assert hook_state(model) == before and x.requires_grad == needs_grad

    graph = recording.graph
    tgr.validate(graph)
    _roles_hold(graph)
    assert nx.is_directed_acyclic_graph(graph)
    assert nx.utils.graphs_equal(from_json(to_json(graph)), graph)
    deepest = max(depth for _, depth in graph.nodes(data="depth"))
    for depth in range(deepest + 1):
        tgr.validate(tgr.collapse(graph, depth))
    run_engine(recording.to_dot(), "json0")
    run_engine(recording.to_dot(fold_repeats=False, depth=1), "json0")
