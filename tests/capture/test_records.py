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
