"""Turning one finished top-level forward into op, param and edge records."""

from __future__ import annotations

from typing import Any

from torchgraphrec.capture.autograd import is_leaf_accumulator, op_name, place, walk
from torchgraphrec.capture.events import Attrs, CallRecord, Events
from torchgraphrec.capture.hooks import CallTracker

__all__ = ["finish_session"]


def finish_session(tracker: CallTracker) -> list[Any]:
    """Walk the autograd graph of the forward that just ended and record what it shows.

    Ops are attributed to the innermost call open when autograd made them, edges follow
    autograd's ``next_functions`` in data-flow direction, and the session's grad_fn
    references are dropped at the end so that nothing is kept alive. Returns the autograd
    nodes of the new op records, in the same order, for the caller to use and drop.
    """
    tracker.describe_pending()
    builder = _SessionBuilder(tracker)
    try:
        nodes = builder.record_ops()
        builder.mark_roles()
        builder.link_untracked_inputs()
        return nodes
    finally:
        builder.release()


class _SessionBuilder:
    def __init__(self, tracker: CallTracker) -> None:
        self.tracker = tracker
        self.events: Events = tracker.events
        self.first = tracker.session_start  # the session's calls are the last ones
        self.calls: list[CallRecord] = self.events.calls[self.first:]
        seen: list[int] = []
        for call in self.calls:
            seen += call.inputs
            seen += call.outputs
        self.tensor_indices = list(dict.fromkeys(seen))
        # (grad_fn, output_nr) -> the first boundary tensor autograd knows by it
        self.boundary: dict[tuple[Any, int], str] = {}
        tensors = self.events.tensors
        for index in self.tensor_indices:
            record = tensors[index]
            if record.grad_fn is not None:
                self.boundary.setdefault((record.grad_fn, record.output_nr), record.node_id)
        self.op_ids: dict[Any, str] = {}  # autograd node -> op node id
        self.op_owner: dict[str, int] = {}  # op node id -> the call that ran it
        self.op_time: dict[str, int] = {}
        self.empty_slots: set[str] = set()  # ops with an input autograd keeps no node for
        self.produced: set[str] = set()  # tensor nodes an op of this session produced

    def edge(self, source: str, target: str, t: int) -> None:
        events = self.events
        events.seq += 1
        events.edges.append((source, target, {"kind": "flow", "seq": events.seq,
                                              "t_ns": t - events.t0}))

    def record_ops(self) -> list[Any]:
        root, events = self.calls[0], self.events
        found = walk([events.tensors[i].grad_fn for i in self.tensor_indices],
                     root.seq_start, root.seq_end)
        placed = place(self.tracker.breaks, [number for number, _, _ in found])
        targets = self._add_ops(found, placed)
        self._link_ops(found, targets, placed)
        self._link_producers()
        return [node for _, node, _ in found]

    def _add_ops(self, found: list[tuple[int, Any, tuple]],
                 placed: list[tuple[int, int]]) -> list[str]:
        """An op record for each autograd node found; returns their node ids, in order."""
        events = self.events
        calls, ops = events.calls, events.ops
        op_ids, op_owner, op_time = self.op_ids, self.op_owner, self.op_time
        seq = events.seq
        ids: list[str] = []
        for (_, node, _), (owner, t) in zip(found, placed):
            grad_fn = type(node).__name__
            name = op_name(grad_fn)
            node_id = f"op:{name}#{len(ops)}"
            op_ids[node] = node_id
            op_owner[node_id] = owner
            op_time[node_id] = t
            ids.append(node_id)
            call = calls[owner]  # never -1: the root's leave lies at the window's end
            seq += 1
            ops.append((node_id, {
                "kind": "op", "label": name, "parent": call.node_id, "depth": call.depth + 1,
                "seq": seq, "name": name, "grad_fn": grad_fn, "args": "",
                "t_start_ns": t - events.t0, "t_end_ns": t - events.t0,
            }))
        events.seq = seq
        return ids

    def _link_ops(self, found: list[tuple[int, Any, tuple]], targets: list[str],
                  placed: list[tuple[int, int]]) -> None:
        """An edge into each op from each of its autograd inputs: a boundary tensor if
        there is one (the edge then runs op -> tensor -> op), else the op that made it, a
        parameter or another leaf."""
        events = self.events
        edges, params, t0 = events.edges, events.params, events.t0
        op_ids, boundary, empty_slots = self.op_ids, self.boundary, self.empty_slots
        param_names = self.tracker.table.param_names
        seq = events.seq
        for (_, _, next_functions), target, (_, t) in zip(found, targets, placed):
            t_ns = t - t0
            for source_node, output_nr in next_functions:
                if source_node is None:
                    empty_slots.add(target)
                    continue
                kind = "flow"
                source = boundary.get((source_node, output_nr)) or op_ids.get(source_node)
                if source is None:
                    if not is_leaf_accumulator(source_node):
                        continue  # autograd made it outside this forward
                    variable = source_node.variable
                    qualname = param_names.get(id(variable))
                    if qualname is None:
                        events.seq = seq
                        source = self._leaf_tensor(variable, t)
                        seq = events.seq
                    else:
                        kind, source = "param", "param:" + qualname
                        if source not in params:
                            seq += 1
                            params[source] = self._param_attrs(qualname, variable, target, seq)
                seq += 1
                edges.append((source, target, {"kind": kind, "seq": seq, "t_ns": t_ns}))
        events.seq = seq

    def _link_producers(self) -> None:
        """An edge from each op to the boundary tensor autograd knows as its output."""
        tensors = self.events.tensors
        op_ids, boundary, produced = self.op_ids, self.boundary, self.produced
        for index in self.tensor_indices:
            record = tensors[index]
            producer = op_ids.get(record.grad_fn)
            if producer is not None and \
                    boundary.get((record.grad_fn, record.output_nr)) == record.node_id:
                self.edge(producer, record.node_id, record.t)
                produced.add(record.node_id)

    def _leaf_tensor(self, variable: Any, t: int) -> str:
        tracker = self.tracker
        index = tracker.lookup(variable)
        if index is None:  # a leaf the model reached by itself (a closure, a global)
            index = tracker.see(variable, -1, t)
            tracker.describe_pending()
            self.events.tensors[index].attrs["role"] = "constant"
        return self.events.tensors[index].node_id

    def _param_attrs(self, qualname: str, variable: Any, user_op: str, seq: int) -> Attrs:
        tracker = self.tracker
        owner_module = tracker.table.param_owner[qualname]
        parent = self.events.calls[tracker.first_call.get(owner_module, self.op_owner[user_op])]
        shape, dtype = tracker.describe.shape_and_dtype(variable.shape, variable.dtype)
        return {
            "kind": "param", "label": qualname, "parent": parent.node_id,
            "depth": parent.depth + 1, "seq": seq, "qualname": qualname,
            "shape": shape, "dtype": dtype, "requires_grad": variable.requires_grad,
            "buffer": False,
        }

    def mark_roles(self) -> None:
        root, tensors, names = self.calls[0], self.events.tensors, self.tracker.names
        for index in root.inputs:
            if tensors[index].call < 0:
                attrs = tensors[index].attrs
                attrs["role"] = "input"
                attrs["name"] = names.get(index, f"input[{root.inputs.index(index)}]")
        for index in root.outputs:
            attrs = tensors[index].attrs
            if attrs["role"] == "intermediate":
                attrs["role"] = "output"
                attrs["name"] = names.get(index, "output")

    def link_untracked_inputs(self) -> None:
        """Give tensors that autograd does not see (no grad, int ids) a path through calls:
        each feeds the ops of the innermost call it was handed to."""
        tensors = self.events.tensors
        untracked = {i for i in self.tensor_indices
                     if tensors[i].grad_fn is None and not tensors[i].attrs["requires_grad"]}
        if untracked:
            self._link_untracked(untracked)
        self._feed_orphans()

    def _link_untracked(self, untracked: set[int]) -> None:
        tensors = self.events.tensors
        receivers = {index: call for index, call in enumerate(self.calls, self.first)
                     if not untracked.isdisjoint(call.inputs)}
        handed_down: dict[int, set[int]] = {}
        for call in receivers.values():
            if call.parent >= 0:
                handed_down.setdefault(call.parent, set()).update(untracked.intersection(call.inputs))
        own_ops: dict[int, list[str]] = {}
        for node_id, owner in self.op_owner.items():
            if owner in receivers:
                own_ops.setdefault(owner, []).append(node_id)
        for index, call in receivers.items():
            mine = [i for i in call.inputs if i in untracked and i not in handed_down.get(index, ())]
            ops = own_ops.get(index, [])
            targets = [op for op in ops if op in self.empty_slots] or ops[:1]
            for tensor in mine:
                for op in targets:
                    self.edge(tensors[tensor].node_id, op, self.op_time[op])

    def _feed_orphans(self) -> None:
        """Feed each tensor a call produced without autograd (under ``no_grad``, say) from
        what that call had last: its latest finished child's outputs, else its inputs."""
        tensors, calls = self.events.tensors, self.events.calls
        session_start = self.calls[0].seq
        orphans = [i for i in sorted(self.tensor_indices) if tensors[i].call >= 0
                   and tensors[i].attrs["seq"] > session_start
                   and tensors[i].node_id not in self.produced]
        if not orphans:
            return
        children: dict[int, list[int]] = {}
        for index, call in enumerate(self.calls, self.first):
            children.setdefault(call.parent, []).append(index)
        for index in orphans:
            record = tensors[index]
            finished = [c for c in children.get(record.call, []) if calls[c].t_end <= record.t
                        and calls[c].outputs and index not in calls[c].outputs]
            sources = calls[finished[-1]].outputs if finished else calls[record.call].inputs
            for source in sources:
                if source != index:
                    self.edge(tensors[source].node_id, record.node_id, record.t)

    def release(self) -> None:
        for index in self.tensor_indices:
            self.events.tensors[index].grad_fn = None
        self.boundary.clear()
        self.op_ids.clear()
