"""The probe store's scalar rows as floats: converted once, exactly, whatever their dtypes."""

from __future__ import annotations

import math

import torch

from torchgraphrec.probes.annotate import annotate
from torchgraphrec.probes.store import Observation, Store


def _row(step: int, value: torch.Tensor, stat: str = "rms") -> tuple:
    return (Observation(0, step, "fc", "Linear", 0, "output", ""), stat, value)


def test_rows_of_mixed_dtypes_become_the_floats_each_one_holds() -> None:
    store = Store()
    values = [torch.tensor(0.1, dtype=torch.float16), torch.tensor(2 ** 40 + 1),
              torch.tensor(0.1, dtype=torch.float32), torch.tensor(float("nan")),
              torch.tensor(True)]
    store.rows += [_row(0, value) for value in values]
    expected = [value.item() for value in values]  # each on its own, as Python reads it
    found = store.floats()
    assert found[:3] == expected[:3] and math.isnan(found[3]) and found[4] == 1.0
    assert found[1] == 2 ** 40 + 1  # not rounded through a float32 neighbour


def test_later_rows_are_converted_and_earlier_ones_kept() -> None:
    store = Store()
    store.rows.append(_row(0, torch.tensor(1.5)))
    first = store.floats()
    store.rows.append(_row(1, torch.tensor(2.5)))
    assert store.floats() == [1.5, 2.5] and store.floats() is first


def test_annotated_means_leave_nan_out_as_nanmean_does() -> None:
    import networkx as nx

    store = Store()
    per_step = {0: [1.0, float("nan"), 4.0], 1: [float("nan")], 2: [3.0]}
    for step, values in per_step.items():
        store.rows += [_row(step, torch.tensor(value)) for value in values]
    graph = nx.DiGraph()
    graph.add_node("layer:fc#0", kind="layer", qualname="fc")
    annotate(graph, store)
    attrs = graph.nodes["layer:fc#0"]
    steps = {step: torch.tensor(values, dtype=torch.float64).nanmean().item()
             for step, values in per_step.items()}
    assert attrs["probe_series"] == {"output.rms": [[0, steps[0]], [2, steps[2]]]}
    assert attrs["output.rms"] == (steps[0] + steps[2]) / 2  # step 1 (all nan) is left out
