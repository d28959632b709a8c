"""GraphDiff.summary(): a headline, grouped lines, biggest first, capped."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgraphrec as tgr
from torchgraphrec.compare.summary import SHARED


def recorded(*widths: int, relu_after: bool = True) -> tgr.Recording:
    layers: list[nn.Module] = []
    for before, after in zip(widths, widths[1:]):
        layers += [nn.Linear(before, after)] + ([nn.ReLU()] if relu_after else [])
    torch.manual_seed(0)
    return tgr.record(nn.Sequential(*layers), torch.randn(2, widths[0]))


def test_the_headline_counts_what_differs_by_kind() -> None:
    found = tgr.diff(recorded(4, 8, 2), recorded(4, 8, 8, 2))
    headline = found.summary().splitlines()[0]
    calls = [n for n in found.added if found.b.nodes[n]["kind"] == "layer"]
    assert headline.startswith(f"calls {len(calls)} added")
    assert "param tensors 2 added, 2 changed" in headline


def test_many_calls_sharing_a_change_make_one_line() -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2)) for _ in range(4)])
    batch = torch.randn(2, 4)
    found = tgr.diff(tgr.record(model.train(), batch), tgr.record(model.eval(), batch))
    lines = found.summary().splitlines()
    assert "  training True -> False in 13 calls" in lines
    assert not [line for line in lines if line.startswith("  changed") and "training" in line]


def test_the_summary_is_capped_and_says_how_much_is_left() -> None:
    found = tgr.diff(recorded(4, 8, 8, 8, 8, 2), recorded(4, 6, 6, 6, 6, 2, relu_after=False))
    full = found.summary(max_lines=100).splitlines()
    short = found.summary(max_lines=3).splitlines()
    assert len(full) > 4 and len(short) == 4
    assert short[:3] == full[:3]
    assert short[3] == (f"  … {len(full) - 3} more lines: GraphDiff.added, .removed and .changed "
                        "hold every node")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_lines_must_be_a_positive_whole_number(bad) -> None:
    with pytest.raises(ValueError, match=f"max_lines must be a whole number >= 1, got {bad!r}"):
        tgr.diff(recorded(4, 2), recorded(4, 3)).summary(max_lines=bad)


def test_the_models_inputs_and_outputs_are_compared_by_name() -> None:
    found = tgr.diff(recorded(4, 8, 2), recorded(4, 8, 3))
    assert "  model output 'output': 2×2 -> 2×3" in found.summary().splitlines()


def test_the_top_level_call_is_named_once() -> None:
    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).view(x.shape[0], -1)

    found = tgr.diff(tgr.record(Flat(), torch.randn(4, 8)), tgr.record(Flat(), torch.randn(6, 8)))
    [root] = [n for n, a in found.b.nodes(data=True) if a["kind"] == "layer" and not a["qualname"]]
    assert root in found.changed  # its shapes: its line could add its type to its name
    [line] = [line for line in found.summary().splitlines() if line.startswith("  changed ")]
    assert line.startswith(f"  changed {found.b.graph['model']}: ops view ")


def test_a_long_change_many_calls_share_keeps_its_count() -> None:
    def convs(*settings: int, **more) -> tgr.Recording:
        model = nn.Sequential(*[nn.Conv2d(*settings, **more) for _ in range(SHARED)])
        return tgr.record(model, torch.zeros(1, settings[0], 32, 32), ops="none")

    found = tgr.diff(convs(4, 4, 3), convs(4, 4, 5, stride=1, padding=2, dilation=1,
                                           bias=False, padding_mode="reflect"))
    old, new = found.changed["layer:0#0"]["settings"]
    assert len(old) + len(new) > 110  # too long for one line: something must be clipped
    [line] = [line for line in found.summary().splitlines() if line.startswith("  settings ")]
    assert line.endswith(f" in {SHARED} calls") and len(line) <= 110
    # item by item; padding and bias, left out of Conv2d's first settings, from their defaults
    assert line.startswith("  settings kernel_size=(3, 3) -> (5, 5), padding=default -> (2, 2), ")


def test_a_param_frozen_says_what_changed_in_it() -> None:
    def model(freeze: bool) -> tgr.Recording:
        torch.manual_seed(0)
        made = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        made[0].weight.requires_grad_(not freeze)
        return tgr.record(made, torch.randn(4, 8))

    found = tgr.diff(model(False), model(True))
    assert found.changed == {"param:0.weight": {"requires_grad": (True, False)}}
    assert "  changed 0: weight requires_grad True -> False" in found.summary().splitlines()


def test_the_calls_that_only_followed_come_after_the_models_inputs() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    found = tgr.diff(tgr.record(model, torch.randn(4, 8)), tgr.record(model, torch.randn(6, 8)))
    assert found.summary(max_lines=2).splitlines()[1] == "  model input 'input': 4×8 -> 6×8"
    assert found.summary().splitlines()[-1].startswith("  shapes or parameter counts follow in ")


def test_an_op_argument_changed_to_its_default_says_so() -> None:
    def dropout(p: float) -> tgr.Recording:
        torch.manual_seed(0)
        return tgr.record(nn.Sequential(nn.Linear(8, 8), nn.Dropout(p)).train(), torch.randn(2, 8))

    found = tgr.diff(dropout(0.1), dropout(0.5))  # F.dropout's p defaults to 0.5: left out
    assert found.changed["op:dropout#1"] == {"args": ("p=0.1", "")}
    assert found.summary().splitlines()[1] == (
        "  changed 1 Dropout: p=0.1 -> 0.5; ops dropout p=0.1 -> default")
