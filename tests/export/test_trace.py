"""rec.render("run.trace.json"): Chrome trace events for Perfetto, nested as the calls ran."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Optional

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import drive_capture_clock, fresh, nodes_of
from torchgraphrec.export import to_model_explorer, to_trace


def events_of(graph: nx.DiGraph) -> list[dict]:
    return json.loads(to_trace(graph))["traceEvents"]


def ns(value: float) -> int:
    return round(value * 1000)


def check_nesting(graph: nx.DiGraph, slices: list[dict], start: str, end: str) -> None:
    """Each slice is its node's recorded interval, inside its parent call's slice."""
    by_node = {event["args"]["id"]: event for event in slices}
    for node, event in by_node.items():
        attrs = graph.nodes[node]
        assert (ns(event["ts"]), ns(event["ts"]) + ns(event["dur"])) == (attrs[start], attrs[end])
        parent = by_node.get(attrs["parent"])
        if parent is not None:
            assert ns(parent["ts"]) <= ns(event["ts"])
            assert ns(event["ts"] + event["dur"]) <= ns(parent["ts"] + parent["dur"])


def perfetto_parents(slices: list[dict]) -> dict[str, Optional[str]]:
    """Each slice's parent as Perfetto nests a track: events by start, the longer first,
    then as written; a slice closed at its start and open at its end (one that ends as
    another starts is done), but instants at one time stack; never a partial overlap."""
    tracks = defaultdict(list)
    for index, event in enumerate(slices):
        start = ns(event["ts"])
        tracks[event["tid"]].append((start, -ns(event["dur"]), index, start + ns(event["dur"]),
                                     event["args"]["id"]))
    parents: dict[str, Optional[str]] = {}
    for events in tracks.values():
        stack: list[tuple[int, int, str]] = []
        for start, _, _, end, node in sorted(events):
            while stack and (stack[-1][1] < start or stack[-1][1] == start
                             and not (stack[-1][0] == stack[-1][1] and start == end)):
                stack.pop()
            assert not stack or end <= stack[-1][1], (node, start, end, stack[-1])
            parents[node] = stack[-1][2] if stack else None
            stack.append((start, end, node))
    return parents


def timed_parent(graph: nx.DiGraph, node: str, timed: set[str]) -> Optional[str]:
    up = graph.nodes[node]["parent"]
    while up is not None and up not in timed:
        up = graph.nodes[up]["parent"]
    return up


def check_tracks(graph: nx.DiGraph, slices: list[dict]) -> None:
    """Read as Perfetto reads it, every slice sits directly under its parent call (the
    nearest one with a slice) where that is on its track, else under nothing: never under
    a call that did not run it."""
    tids = {event["args"]["id"]: event["tid"] for event in slices}
    for node, seen in perfetto_parents(slices).items():
        parent = timed_parent(graph, node, set(tids))
        assert seen == (parent if tids.get(parent) == tids[node] else None), (node, seen)


@pytest.mark.parametrize("name", ["mlp", "resnet_like", "gpt2", "reused_module", "recurrent"])
@pytest.mark.parametrize("backward", [False, True])
def test_one_nested_slice_per_call_and_op_and_direction(name: str, backward: bool) -> None:
    if name == "gpt2":
        pytest.importorskip("transformers")
    graph = tgr.record(*fresh(name), backward=backward).graph
    events = events_of(graph)
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    assert all(e["pid"] == 1 and e["tid"] in threads for e in slices)
    timed = {**nodes_of(graph, "layer"), **nodes_of(graph, "op")}
    for direction, (start, end) in (("forward", ("t_start_ns", "t_end_ns")),
                                    ("backward", ("t_backward_start_ns", "t_backward_end_ns"))):
        mine = [e for e in slices if threads[e["tid"]].startswith(direction)]
        # an end before the start is no time (the capture may stamp one): no slice
        expected = sorted(n for n, a in timed.items() if start in a and a[end] >= a[start])
        assert sorted(e["args"]["id"] for e in mine) == expected
        assert bool(expected) == (direction == "forward" or backward)
        check_nesting(graph, mine, start, end)
        check_tracks(graph, mine)
    assert set(threads.values()) == ({"forward", "backward"} if backward else {"forward"})


def test_args_hold_shapes_and_costs() -> None:
    graph = tgr.record(*fresh("mlp")).graph
    graph.nodes["layer:0#0"]["flops"] = 768
    events = {e["args"]["id"]: e for e in events_of(graph) if e["ph"] == "X"}
    first = events["layer:0#0"]
    assert first["name"] == "0: Linear" and first["cat"] == "layer,forward"
    assert first["args"]["input_shapes"] == [[3, 8]] and first["args"]["output_shapes"] == [[3, 16]]
    assert first["args"]["flops"] == 768 and first["args"]["num_params"] == 8 * 16 + 16
    assert "seq" not in first["args"] and "t_start_ns" not in first["args"]


def test_slices_that_would_overlap_go_to_a_further_track() -> None:
    graph = tgr.record(*fresh("mlp")).graph
    ops = sorted(nodes_of(graph, "op"), key=lambda n: graph.nodes[n]["seq"])
    parent = graph.nodes[graph.nodes[ops[1]]["parent"]]
    graph.nodes[ops[0]].update(t_start_ns=parent["t_start_ns"], t_end_ns=parent["t_start_ns"] + 10)
    graph.nodes[ops[1]].update(t_start_ns=parent["t_start_ns"] + 5,
                               t_end_ns=parent["t_start_ns"] + 20)
    events = events_of(graph)
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["forward", "forward (overlapping 1)"]
    check_tracks(graph, [e for e in events if e["ph"] == "X"])


def test_an_end_before_the_start_is_no_slice_as_model_explorer_leaves_out_its_time() -> None:
    graph = tgr.record(*fresh("mlp"), backward=True).graph
    op = min(nodes_of(graph, "op"), key=lambda n: graph.nodes[n]["seq"])
    attrs = graph.nodes[op]
    attrs["t_backward_end_ns"] = attrs["t_backward_start_ns"] - 250  # a stamp that cannot be
    slices = [e for e in events_of(graph) if e["ph"] == "X"]
    assert all(e["dur"] >= 0 for e in slices)
    assert [e["cat"] for e in slices if e["args"]["id"] == op] == ["op,forward"]
    [me_op] = [n for n in json.loads(to_model_explorer(graph))["graphs"][0]["nodes"]
               if n["id"] == op]
    keys = {item["key"] for item in me_op["attrs"]}
    assert "forward_ms" in keys and "backward_ms" not in keys


@pytest.fixture
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock that moves a microsecond at each read, with nothing calibrated to take off:
    the boundaries lie far enough apart for every estimate between them, as on a quiet
    machine (on a loaded one, a boundary the calibrated costs overshot is a nanosecond after
    the one before, and two autograd estimates between them may share a nanosecond)."""
    import itertools

    from torchgraphrec.capture import calibrate

    ticks = itertools.count(10**9, 1_000)
    drive_capture_clock(monkeypatch, lambda: next(ticks), calibrate.NO_COSTS)


def hand_graph(*slices: tuple[str, Optional[str], int, int]) -> nx.DiGraph:
    """A recording of ops and calls ``(id, parent, t_start_ns, t_end_ns)``, in run order."""
    graph = nx.DiGraph(model="Hand")
    for seq, (node, parent, start, end) in enumerate(slices):
        depth = 0 if parent is None else graph.nodes[parent]["depth"] + 1
        kind = "layer" if node.startswith("layer:") else "op"
        more = ({"qualname": node[6:-2], "type": "M", "call_index": 0} if kind == "layer"
                else {"name": node[3:-2], "args": "", "grad_fn": None})
        graph.add_node(node, kind=kind, label=node, parent=parent, depth=depth, seq=seq,
                       t_start_ns=start, t_end_ns=end, **more)
    return graph


def slices_of(graph: nx.DiGraph) -> list[dict]:
    return [e for e in events_of(graph) if e["ph"] == "X"]


@pytest.mark.usefixtures("ticking_clock")
def test_an_instant_as_a_call_ends_sits_under_its_own_parent() -> None:
    # ops="autograd" records ops as instants: relu, run by the root after fc returned, is
    # estimated after fc's end, and must not read as inside fc
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x))

    graph = tgr.record(Net(), torch.randn(2, 4), ops="autograd").graph
    [relu] = [n for n, a in nodes_of(graph, "op").items() if a["name"] == "relu"]
    slices = slices_of(graph)
    assert perfetto_parents(slices)[relu] == graph.nodes[relu]["parent"] == "layer:#0"
    assert len({e["tid"] for e in slices}) == 1
    check_tracks(graph, slices)


@pytest.mark.usefixtures("ticking_clock")
@pytest.mark.parametrize("name", ["mlp", "resnet_like", "reused_module", "recurrent"])
def test_autograd_instants_sit_under_their_parents(name: str) -> None:
    graph = tgr.record(*fresh(name), ops="autograd").graph
    slices = slices_of(graph)
    check_tracks(graph, slices)
    assert len({e["tid"] for e in slices}) == 1  # the times allow one track: no overflow


def test_an_instant_as_a_sibling_call_starts_is_not_drawn_inside_it() -> None:
    # the root's op "a" ran in the nanosecond the call "b" started: b is not its parent
    graph = hand_graph(("layer:#0", None, 0, 100), ("op:a#0", "layer:#0", 40, 40),
                       ("layer:b#0", "layer:#0", 40, 60), ("op:c#0", "layer:b#0", 45, 50))
    slices = slices_of(graph)
    assert perfetto_parents(slices)["op:a#0"] != "layer:b#0"
    check_tracks(graph, slices)


def test_what_a_call_moved_to_a_further_track_ran_follows_it_there() -> None:
    # the call "b" overlaps the op "a" before it, so it goes to a further track; the op it
    # ran sits under b there, not under the root on the first track
    graph = hand_graph(("layer:#0", None, 0, 100), ("op:a#0", "layer:#0", 10, 30),
                       ("layer:b#0", "layer:#0", 20, 60), ("op:c#0", "layer:b#0", 40, 50))
    slices = slices_of(graph)
    tids = {e["args"]["id"]: e["tid"] for e in slices}
    assert tids["op:c#0"] == tids["layer:b#0"] != tids["layer:#0"]
    assert perfetto_parents(slices)["op:c#0"] == "layer:b#0"
    check_tracks(graph, slices)


@pytest.mark.parametrize("ops", ["torch", "autograd"])
@pytest.mark.parametrize("name", ["reused_module", "resnet_like", "recurrent"])
def test_where_every_gap_gave_up_all_each_slice_still_nests_under_its_parent(
        monkeypatch: pytest.MonkeyPatch, name: str, ops: str) -> None:
    # calibrated costs above every gap make each boundary's time the latest one before it
    # (on a loaded machine some do): the times still nest every slice under its parent
    from torchgraphrec.capture import calibrate

    costs = calibrate.DispatchCosts(call=10**9, op=10**9, python_op=10**9, pack=10**9)
    monkeypatch.setattr("torchgraphrec.capture.capture.dispatch_costs", lambda: costs)
    graph = tgr.record(*fresh(name), ops=ops, backward=True).graph
    events = events_of(graph)
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for tid in threads:
        check_tracks(graph, [e for e in events if e["ph"] == "X" and e["tid"] == tid])
    if ops == "torch":  # every op observed at its own nanoseconds: one track a direction
        assert sorted(threads.values()) == ["backward", "forward"]
    else:  # a call a nanosecond long made two autograd ops: their estimates tie, and stack
        assert {"backward", "forward", "forward (overlapping 1)"} <= set(threads.values())
        ops_at = defaultdict(list)
        for node, attrs in nodes_of(graph, "op").items():
            ops_at[attrs["parent"], attrs["t_start_ns"]].append(node)
        moved = [e["args"]["id"] for e in events
                 if e["ph"] == "X" and threads[e["tid"]].startswith("forward (")]
        assert all(len(ops_at[graph.nodes[n]["parent"], graph.nodes[n]["t_start_ns"]]) > 1
                   for n in moved)


@pytest.mark.usefixtures("ticking_clock")
def test_autograd_estimates_never_fall_on_a_calls_boundary() -> None:
    # an autograd op is estimated between the calls' boundaries around it: the add of a
    # residual, made after the Linear returned, fell on that Linear's end, which a viewer
    # reading both ends as closed (chrome://tracing) draws inside the Linear
    import torch

    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.lin(x)

    model = torch.nn.Sequential(Residual(), Residual())
    graph = tgr.record(model, torch.randn(2, 4, requires_grad=True), ops="autograd").graph
    boundaries = {t for attrs in nodes_of(graph, "layer").values()
                  for t in (attrs["t_start_ns"], attrs["t_end_ns"])}
    ops = nodes_of(graph, "op")
    assert sorted(attrs["name"] for attrs in ops.values()).count("add") == 2
    assert all(attrs["t_start_ns"] not in boundaries for attrs in ops.values())
    check_tracks(graph, slices_of(graph))
