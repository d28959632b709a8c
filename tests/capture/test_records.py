"""The raw records' fields read what the handler and hooks wrote; attributes named from them."""

from __future__ import annotations

import typing

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec.capture import events
from torchgraphrec.capture.capture import Capture


def _fields(prefix: str) -> list[int]:
    return [value for name, value in vars(events).items()
            if name.startswith(prefix) and name.isupper()]


def test_every_field_has_one_index_and_every_index_a_field() -> None:
    for prefix, record in (("OP_", events.RawOp), ("TENSOR_", events.RawTensor)):
        assert sorted(_fields(prefix)) == list(range(len(typing.get_args(record))))


def test_the_named_fields_are_the_graphs_attributes() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    capture = Capture(model)
    capture.start()
    try:
        model(torch.ones(2, 3))
    finally:
        capture.stop()
    graph = capture.graph()
    ops, tensors = capture.events.ops, capture.events.tensors
    for index, op in enumerate(ops):
        attrs = graph.nodes[capture.namer.op_ids[index]]
        assert (op[events.OP_NAME], op[events.OP_SEQ]) == (attrs["name"], attrs["seq"])
        assert graph.nodes[attrs["parent"]]["seq"] == capture.events.calls[op[events.OP_CALL]].seq
        assert op[events.OP_T_START] - capture.events.t0 == attrs["t_start_ns"]
    for index, record in enumerate(tensors):
        attrs = graph.nodes[capture.namer.tensor_ids[index]]
        assert tuple(record[events.TENSOR_SHAPE]) == attrs["shape"]
        assert (record[events.TENSOR_SEQ], record[events.TENSOR_VERSION]) == \
            (attrs["seq"], attrs["version"])
    # the input (no call), the Linear's output, the ReLU's (also the model's)
    assert [record[events.TENSOR_CALL] for record in tensors] == [-1, 1, 2]


@pytest.mark.parametrize("text, expected", [
    ("in_features=2, out_features=3, bias=True", "in_features=2, out_features=3, bias=True"),
    ("  (0): one\n  (1): two  ", "(0): one (1): two"),
    ("a\tb\u00a0c", "a b c"),
    ("", ""),
])
def test_a_layers_settings_are_its_extra_repr_on_one_line(text: str, expected: str) -> None:
    class Described(torch.nn.Module):
        def extra_repr(self) -> str:
            return text

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    graph = tgr.record(Described(), torch.ones(2)).graph
    assert graph.nodes["layer:#0"]["settings"] == expected


def test_ops_given_tensors_only_share_their_argument_records_and_nothing_writes_them() -> None:
    from torchgraphrec.capture.opnames import ALL_TENSORS, NO_KWARGS

    class Mixed(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.add(x, x)  # tensors only, no keywords: both shared
            y = y.add_(1)  # in place, an int: its own tuple
            y = torch.sum(y, dim=0)  # a keyword: torch's own dict
            return torch.mul(y, y)

    for options in ({}, {"flops": True, "memory": True}):
        model = Mixed()
        capture = Capture(model, **options)
        capture.start()
        try:
            model(torch.ones(2, 3))
            with torch.inference_mode():  # inference tensors: changes found by the op's name
                model(torch.ones(2, 3))
        finally:
            capture.stop()
        ops = capture.events.ops
        assert [op[events.OP_NAME] for op in ops] == ["add", "add_", "sum", "mul"] * 2
        for op in ops[0::4] + ops[3::4]:
            assert op[events.OP_ARGS] is ALL_TENSORS[2] and op[events.OP_KWARGS] is NO_KWARGS
        assert all(op[events.OP_ARGS] is not ALL_TENSORS[2] for op in ops[1::4])
        assert ops[2][events.OP_KWARGS] == {"dim": 0}
        assert NO_KWARGS == {} and ALL_TENSORS[2] == (ALL_TENSORS[1][0],) * 2


def test_a_result_written_in_place_keeps_its_value_number() -> None:
    class Written(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            h.add_(1)  # returns h: the op that wrote it stays its producer
            return self.b(h)

    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            graph = tgr.record(Written(), torch.randn(1, 2)).graph
        produced = graph.nodes["layer:a#0"]["outputs"][0]
        received = graph.nodes["layer:b#0"]["inputs"][0]
        # the same value (its number) one version on, made by add_ from a's output
        assert (produced, received) == ("tensor:1@v0", "tensor:1@v1")
        writer = next(iter(graph.predecessors(received)))
        assert graph.nodes[writer]["name"] == "add_" and produced in graph.predecessors(writer)


def test_an_inference_tensor_written_through_out_is_read_from_the_op_that_wrote_it() -> None:
    class Into(nn.Module):
        def forward(self, x: torch.Tensor, into: torch.Tensor) -> torch.Tensor:
            torch.add(x, x, out=into)  # x keeps a version, into (made in inference) none
            return into * 2

    x = torch.randn(3)  # a normal tensor
    with torch.inference_mode():
        into = torch.empty(3)
        graph = tgr.record(Into(), (x, into)).graph
    ops = {attrs["name"]: node for node, attrs in graph.nodes(data=True) if attrs["kind"] == "op"}
    assert set(ops) == {"add", "mul"}
    assert ops["add"] in set(graph.predecessors(ops["mul"]))
