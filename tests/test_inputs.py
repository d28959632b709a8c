"""record(model, input_size=...): inputs made from their shapes, as torchinfo and torchview
make them, on the model's device, leaving the caller's random state alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from helpers import nodes_of
from torchgraphrec.cli import main
from torchgraphrec.inputs import example_inputs


class _Tokens(nn.Module):
    """Ids and a mask, as a language model takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids) * mask.unsqueeze(-1))


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).eval()


def _inputs(graph) -> list[dict]:
    found = [a for a in nodes_of(graph, "tensor").values() if a["role"] == "input"]
    return sorted(found, key=lambda a: a["seq"])


def test_a_shape_records_what_a_tensor_of_that_shape_records() -> None:
    model = _cnn()
    made = tgr.record(model, input_size=(2, 3, 8, 8)).graph
    given = tgr.record(model, torch.randn(2, 3, 8, 8)).graph
    assert sorted(made.nodes) == sorted(given.nodes) and sorted(made.edges) == sorted(given.edges)
    [x] = _inputs(made)
    assert (x["shape"], x["dtype"], x["device"], x["name"]) == ((2, 3, 8, 8), "float32", "cpu", "input")


def test_each_input_has_its_shape_and_dtype() -> None:
    recording = tgr.record(_Tokens(), input_size=[(1, 5), (1, 5)], dtypes=[torch.long, "bool"])
    assert [(a["name"], a["shape"], a["dtype"]) for a in _inputs(recording.graph)] == [
        ("ids", (1, 5), "int64"), ("mask", (1, 5), "bool")]
    assert recording.output.shape == (1, 5, 2)


def test_leaf_outputs_agree_with_torchinfo_on_the_same_input_size() -> None:
    torchinfo = pytest.importorskip("torchinfo")
    model = _cnn()
    theirs = torchinfo.summary(model, input_size=(2, 3, 8, 8), verbose=0)
    graph = tgr.record(model, input_size=(2, 3, 8, 8)).graph
    tensors = nodes_of(graph, "tensor")
    ours = [list(tensors[graph.nodes[layer]["outputs"][0]]["shape"])
            for layer in sorted((n for n, a in nodes_of(graph, "layer").items() if a["depth"] == 1),
                                key=lambda n: graph.nodes[n]["seq"])]
    assert ours == [layer.output_size for layer in theirs.summary_list if layer.depth == 1]


def test_a_model_on_the_meta_device_gets_meta_inputs() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 8))
    graph = tgr.record(model, input_size=(1, 4096)).graph
    assert _inputs(graph)[0]["device"] == "meta"
    assert example_inputs((2,), device="meta")[0].device.type == "meta"  # or where asked


def test_meta_inputs_of_any_size_are_shapes_alone() -> None:
    # they were drawn on the CPU and moved: 400 GB here
    with torch.device("meta"):
        model = nn.Linear(100_000, 8)
    graph = tgr.record(model, input_size=(1_000_000, 100_000)).graph
    assert _inputs(graph)[0]["shape"] == (1_000_000, 100_000)


def test_other_options_are_checked_before_any_input_is_drawn() -> None:
    # a 4 TB input drawn first would fail to allocate before the bad ops was named
    with pytest.raises(ValueError, match="unknown ops"):
        tgr.record(nn.Identity(), input_size=(1_000_000, 1_000_000), ops="bad")


def test_numpy_dimensions_and_args_none_are_taken() -> None:
    numpy = pytest.importorskip("numpy")
    shape = (numpy.int64(2), numpy.int32(3))
    assert tgr.record(nn.Identity(), None, input_size=shape).output.shape == (2, 3)


def test_the_inputs_are_the_same_each_time_and_the_callers_random_state_stays() -> None:
    state = torch.get_rng_state()
    first = tgr.record(nn.Identity(), input_size=(3, 4)).output
    second = tgr.record(nn.Identity(), input_size=(3, 4)).output
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, second) and first.std() > 0.5  # normal, not zeros
    assert example_inputs((2, 2), dtypes=torch.bfloat16)[0].dtype == torch.bfloat16


@pytest.mark.parametrize("call, error, match", [
    (lambda: tgr.record(nn.Identity(), torch.ones(1), input_size=(1,)), TypeError,
     "give the inputs as args or their shapes as input_size, not both"),
    (lambda: tgr.record(nn.Identity(), torch.ones(1), dtypes=torch.long), TypeError,
     "dtypes and device are for the inputs input_size makes"),
    (lambda: tgr.record(nn.Identity(), input_size="1,3"), TypeError,
     "input_size must be a shape"),
    (lambda: tgr.record(nn.Identity(), input_size=[(1, 3), "x"]), TypeError,
     "input_size must be a shape"),
    (lambda: tgr.record(nn.Identity(), input_size=(1, 2.5)), TypeError, "input_size must be a shape"),
    (lambda: tgr.record(nn.Identity(), input_size=(1, -3)), ValueError,
     r"input_size has a negative dimension: \(1, -3\)"),
    (lambda: tgr.record(_Tokens(), input_size=[(1, 5), (1, 5)], dtypes=[torch.long]), ValueError,
     "dtypes gives 1 dtypes for 2 input shapes"),
    (lambda: tgr.record(nn.Identity(), input_size=(1,), dtypes="float33"), TypeError,
     "a dtype must be a torch.dtype or the name of one"),
    (lambda: tgr.record(nn.Identity(), input_size=(1,), dtypes=float), TypeError,
     "a dtype must be a torch.dtype or the name of one .*, got <class 'float'>"),
])
def test_bad_input_sizes_are_refused(call, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


META_FACTORY = '''
import torch

def model():
    with torch.device("meta"):
        return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
'''


def test_the_command_line_makes_inputs_on_the_models_device(tmp_path: Path, capsys) -> None:
    # --input-shape made CPU inputs, which a model on the meta device refuses
    factory = tmp_path / "meta_factory.py"
    factory.write_text(META_FACTORY)
    assert main(["summary", f"{factory}:model", "--input-shape", "2,8"]) == 0
    assert "Linear" in capsys.readouterr().out
