"""The autograd view (``ops="autograd"``): a finished forward's autograd nodes as op nodes."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from torchgraphrec.capture.autograd import is_leaf_accumulator, op_name, place, walk
from torchgraphrec.capture.events import TENSOR_GRAD_FN, TENSOR_OUTPUT_NR, raw_tensor
from torchgraphrec.capture.naming import Namer
from torchgraphrec.capture.state import CaptureState

__all__ = ["autograd_ops"]

_first = itemgetter(0)


def autograd_ops(state: CaptureState, namer: Namer, breaks: list[tuple[int, int, int]],
                 first_call: int) -> list[tuple[Any, str]]:
    """Add an op node per autograd node the forward made, with autograd's own names, and
    the edges autograd knows: from each node's inputs (boundary tensors, other nodes,
    parameters, leaves) and into the boundary tensors it produced. Tensors autograd does
    not see get no edges: nothing is guessed. Returns ``(autograd node, op id)`` pairs for
    the backward clock; the records' ``grad_fn`` references are dropped.
    """
    events = state.events
    calls = events.calls[first_call:]
    crossing: list[int] = []  # the tensor records at the calls' boundaries
    for call in calls:
        crossing += [~ref for ref in call.inputs if type(ref) is int]
        crossing += [~ref for ref in call.outputs if type(ref) is int]
    indices = list(dict.fromkeys(crossing))
    boundary: dict[tuple[Any, int], int] = {}
    for index in indices:
        record = events.tensors[index]
        if record[TENSOR_GRAD_FN] is not None:
            boundary.setdefault((record[TENSOR_GRAD_FN], record[TENSOR_OUTPUT_NR]), index)
    try:
        found = walk([events.tensors[i][TENSOR_GRAD_FN] for i in indices], calls[0].seq_start,
                     calls[0].seq_end)
        placed = place(breaks, [number for number, _, _ in found])
        ids = {node: _add_op(state, namer, node, owner, t) for (_, node, _), (owner, t)
               in zip(found, placed)}
        edges: list[tuple[int, str, str]] = []
        for (_, node, next_functions), (owner, t) in zip(found, placed):
            edges += _inputs(state, namer, boundary, ids, ids[node], next_functions, owner, t)
        edges += _producers(state, namer, boundary, ids, indices)
        edges.sort(key=_first)  # placed times: sorted by seq, t_ns rises
        seq, t0, append = events.seq, events.t0, events.edges.append
        for t, source, target in edges:
            seq += 1
            append((source, target, {"kind": "param" if source.startswith("param:") else "flow",
                                     "seq": seq, "t_ns": t - t0}))
        events.seq = seq
        return [(node, ids[node]) for _, node, _ in found]
    finally:
        for index in indices:
            # the same record without its grad_fn
            events.tensors[index] = raw_tensor(*events.tensors[index][:TENSOR_GRAD_FN])


def _add_op(state: CaptureState, namer: Namer, node: Any, owner: int, t: int) -> str:
    events = state.events
    grad_fn = type(node).__name__
    name = op_name(grad_fn)
    node_id = f"op:{name}#{len(namer.op_ids)}"
    namer.op_ids.append(node_id)
    call = events.calls[owner]
    events.nodes.append((node_id, {
        "kind": "op", "label": name, "parent": call.node_id, "depth": call.depth + 1,
        "seq": events.next_seq(), "name": name, "grad_fn": grad_fn, "args": "",
        "t_start_ns": t - events.t0, "t_end_ns": t - events.t0,
    }))
    return node_id


def _inputs(state: CaptureState, namer: Namer, boundary: dict, ids: dict, target: str,
            next_functions: tuple, owner: int, t: int) -> list[tuple[int, str, str]]:
    found = []
    for source_node, output_nr in next_functions:
        if source_node is None:
            continue
        index = boundary.get((source_node, output_nr))
        source = namer.tensor_ids[index] if index is not None else ids.get(source_node)
        if source is None and is_leaf_accumulator(source_node):
            ref = state.boundary(source_node.variable, t, owner, "constant")
            if type(ref) is str:  # a parameter: its node id, nothing new to name
                source = ref
            else:
                namer.name_pending()
                source = namer.ref_id(ref)
        if source is not None:  # else autograd made it outside this forward
            found.append((t, source, target))
    return found


def _producers(state: CaptureState, namer: Namer, boundary: dict, ids: dict,
               indices: list[int]) -> list[tuple[int, str, str]]:
    found = []
    for index in indices:
        *_, t, grad_fn, output_nr = state.events.tensors[index]
        producer = ids.get(grad_fn)
        if producer is not None and boundary.get((grad_fn, output_nr)) == index:
            found.append((t, producer, namer.tensor_ids[index]))
    return found
