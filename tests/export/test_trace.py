"""rec.render("run.trace.json"): Chrome trace events for Perfetto, nested as the calls ran."""

from __future__ import annotations

import json
from collections import defaultdict

import networkx as nx
import pytest

import torchgraphrec as tgr
from helpers import fresh, nodes_of
from torchgraphrec.export import to_trace


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


def check_tracks(slices: list[dict]) -> None:
    """On one track, slices nest or follow one another: never a partial overlap."""
    tracks = defaultdict(list)
    for event in slices:
        tracks[event["tid"]].append((ns(event["ts"]), ns(event["ts"] + event["dur"])))
    for intervals in tracks.values():
        intervals.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[int, int]] = []
        for start, end in intervals:
            while stack and stack[-1][1] <= start and not (stack[-1][0] <= start
                                                           and end <= stack[-1][1]):
                stack.pop()
            assert not stack or end <= stack[-1][1], (start, end, stack[-1])
            stack.append((start, end))


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
        expected = sorted(n for n, a in timed.items() if start in a)
        assert sorted(e["args"]["id"] for e in mine) == expected
        assert bool(expected) == (direction == "forward" or backward)
        check_nesting(graph, mine, start, end)
        check_tracks(mine)
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
    check_tracks([e for e in events if e["ph"] == "X"])
