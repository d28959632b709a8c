"""summary(), save()/load(), and graph="first" for long runs."""

from __future__ import annotations

import json

import networkx as nx
import pandas
import pytest
import torch

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec import select as S
from torchgraphrec.recording import backward_loss


@pytest.fixture(scope="module")
def recorder() -> tgr.Recorder:
    case = fresh("resnet_like")
    probes = [tgr.probe("grad_output", where=S.type(torch.nn.Conv2d), keep=["rms", "cosine"]),
              tgr.probe("output", where=S.name("fc"), keep="full")]
    with tgr.Recorder(case.model, probes=probes) as rec:
        for _ in range(2):
            backward_loss(case.model(*case.args)).backward()
            rec.step()
    return rec


def test_summary_lists_labels_shapes_params_and_recording(recorder) -> None:
    lines = recorder.summary().splitlines()
    assert lines[0].split()[:6] == ["Layer", "(type", "(name):", "depth-idx)", "Input", "shape"]
    assert lines[0].split()[-1] == "Recording"
    first, again = (line for line in lines if line.split()[:2] in (["Conv2d", "(0):"],
                                                                   ["Conv2d", "(0#1):"]))
    # the labels probes select by (S.label), the parameters counted at the first call
    assert first.split()[2:6] == ["2-1", "2×3×16×16", "2×16×16×16", "432"]
    assert again.split()[2:6] == ["2-1", "2×3×16×16", "2×16×16×16", "(recursive)"]
    assert first.endswith("grad_output: rms, cosine") and again.endswith("rms, cosine")
    assert "Total params: 19,322" in lines
    assert lines[-1] == "76 module calls in ResNetLike"
    assert lines[2].split()[0] == "ResNetLike"
    assert any(line.startswith("ResNetLike #1 ") for line in lines)
    assert tgr.record(*fresh("mlp")).summary().splitlines()[2].startswith("Sequential ")


def test_save_and_load_round_trip(recorder, tmp_path) -> None:
    folder = recorder.save(tmp_path / "run")
    assert sorted(p.name for p in folder.iterdir()) == ["index.json", "kept.pt"]
    loaded = tgr.load(folder)
    assert loaded.frame().equals(recorder.frame())
    assert nx.utils.graphs_equal(loaded.graph, recorder.graph)
    for before, after in zip(recorder["fc", "output"], loaded["fc", "output"]):
        assert torch.equal(before, after)
    first = loaded["stem.0", "grad_output"][1]
    assert torch.equal(first["cosine"], recorder["stem.0", "grad_output"][1]["cosine"])


def test_load_refuses_other_folders(tmp_path) -> None:
    (tmp_path / "index.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not saved probe records"):
        tgr.load(tmp_path)


def test_graph_first_records_one_forward_and_probes_them_all() -> None:
    case = fresh("mlp")
    probes = [tgr.probe("output", where=S.name("0"))]
    with tgr.Recorder(case.model, probes=probes, graph="first") as rec:
        for _ in range(4):
            case.model(*case.args)
    assert len(nodes_of(rec.graph, "layer")) == 4  # one forward: root and three modules
    assert len(rec["0", "output"]) == 4
    with pytest.raises(ValueError, match="unknown graph: 'some'"):
        tgr.Recorder(case.model, graph="some")


def _strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _overflowed(tensor: torch.Tensor) -> torch.Tensor:
    return torch.tensor(float("-inf"))


def test_saved_index_is_strict_json_and_non_finite_values_load_back(tmp_path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 1))  # one element: its std is nan
    probes = [tgr.probe("output", where=S.name("0"), keep=["cosine", "std", _overflowed])]
    with tgr.Recorder(model, probes=probes) as rec:
        for _ in range(2):
            model(torch.randn(1, 4))
            rec.step()
    frame = rec.frame()
    assert frame.value.isna().tolist() == [True, True, False, False, True, False]
    folder = rec.save(tmp_path / "run")
    _strict_json((folder / "index.json").read_text(encoding="utf-8"))
    pandas.testing.assert_frame_equal(tgr.load(folder).frame(), frame)


def test_a_gradient_site_whose_calls_all_went_without_one_loads_back_as_nones(tmp_path) -> None:
    model = torch.nn.Linear(2, 2)
    with tgr.Recorder(model, probes=[tgr.probe("grad_output", keep="l2")]) as rec:
        with torch.no_grad():
            model(torch.randn(1, 2))
        model(torch.randn(1, 2)).detach()  # a call whose output reached no loss
    assert rec["", "grad_output"] == [None, None]
    assert tgr.load(rec.save(tmp_path / "run"))["", "grad_output"] == [None, None]
