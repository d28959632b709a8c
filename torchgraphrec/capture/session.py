"""Turning one finished top-level forward into op, param and edge records."""

from __future__ import annotations

from typing import Any

from torchgraphrec.capture.autograd import Timeline, is_leaf_accumulator, op_name, walk
from torchgraphrec.capture.events import Events, ParamRecord
from torchgraphrec.capture.hooks import CallTracker

__all__ = ["finish_session"]


def finish_session(tracker: CallTracker) -> list[Any]:
    """Walk the autograd graph of the forward that just ended and record what it shows.

    Ops are attributed to the innermost call open when autograd made them, edges follow
    autograd's ``next_functions`` in data-flow direction, and the session's grad_fn
    references are dropped at the end so that nothing is kept alive. Returns the autograd
    nodes of the new op records, in the same order, for the caller to use and drop.
    """
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
        self.calls = [self.events.calls[i] for i in tracker.session_calls]
        self.timeline = Timeline(tracker.breaks)
        seen: list[int] = []
        for call in self.calls:
            seen += call.inputs
            seen += call.outputs
        self.tensor_indices = list(dict.fromkeys(seen))
        self.boundary: dict[tuple[Any, int], str] = {}
        tensors = self.events.tensors
        for index in self.tensor_indices:
            record = tensors[index]
            if record.grad_fn is not None:
                self.boundary.setdefault((record.grad_fn, record.output_nr), record.node_id)
        self.op_ids: dict[Any, str] = {}
        self.op_owner: dict[str, int] = {}
        self.op_time: dict[str, int] = {}
        self.empty_slots: set[str] = set()
        self.has_input: set[str] = set()
        self.param_names = tracker.table.param_names

    def edge(self, source: str, target: str, t: int, kind: str = "flow") -> None:
        self.has_input.add(target)
        events = self.events
        events.edges.append((source, target, {"kind": kind, "seq": events.next_seq(),
                                              "t_ns": t - events.t0}))

    def record_ops(self) -> list[Any]:
        root = self.calls[0]
        tensors = self.events.tensors
        found = walk([tensors[i].grad_fn for i in self.tensor_indices],
                     root.seq_start, root.seq_end)
        place = self.timeline.place
        for number, node, _ in found:
            self._add_op(node, *place(number))
        for _, node, next_functions in found:
            self._link_op_inputs(self.op_ids[node], next_functions)
        for index in self.tensor_indices:
            record = tensors[index]
            producer = self.op_ids.get(record.grad_fn)
            node_id = record.node_id
            if producer is not None and \
                    self.boundary.get((record.grad_fn, record.output_nr)) == node_id:
                self.edge(producer, node_id, record.t)
        return [node for _, node, _ in found]

    def _add_op(self, node: Any, owner: int, t: int) -> None:
        grad_fn = type(node).__name__
        name = op_name(grad_fn)
        events = self.events
        node_id = f"op:{name}#{len(events.ops)}"
        self.op_ids[node] = node_id
        self.op_owner[node_id] = owner
        self.op_time[node_id] = t
        events.ops.append((node_id, name, grad_fn, owner, events.next_seq(), t))

    def _link_op_inputs(self, target: str, next_functions: tuple) -> None:
        t = self.op_time[target]
        for source_node, output_nr in next_functions:
            if source_node is None:
                self.empty_slots.add(target)
                continue
            # a boundary tensor comes first: the edge then runs op -> tensor -> op
            source = self.boundary.get((source_node, output_nr)) or self.op_ids.get(source_node)
            if source is not None:
                self.edge(source, target, t)
            elif is_leaf_accumulator(source_node):
                self._link_leaf(source_node.variable, target, t)

    def _link_leaf(self, variable: Any, target: str, t: int) -> None:
        qualname = self.param_names.get(id(variable))
        if qualname is not None:
            self.edge(self._param_id(qualname, variable, target), target, t, kind="param")
            return
        index = self.tracker.lookup(variable)
        if index is None:  # a leaf the model reached by itself (a closure, a global)
            index = self.tracker.see(variable, -1, t)
            self.events.tensors[index].role = "input"
        self.edge(self.events.tensors[index].node_id, target, t)

    def _param_id(self, qualname: str, variable: Any, user_op: str) -> str:
        params = self.events.params
        if qualname not in params:
            owner_module = self.tracker.table.param_owner[qualname]
            parent = self.tracker.first_call.get(owner_module, self.op_owner[user_op])
            params[qualname] = ParamRecord(qualname, variable, parent, self.events.next_seq())
        return f"param:{qualname}"

    def mark_roles(self) -> None:
        root = self.calls[0]
        if root.parent >= 0:
            return
        tensors = self.events.tensors
        for index in root.inputs:
            if tensors[index].parent < 0:
                tensors[index].role = "input"
        for index in root.outputs:
            if tensors[index].role == "intermediate":
                tensors[index].role = "output"

    def link_untracked_inputs(self) -> None:
        """Give tensors that autograd does not see (no grad, int ids) a path through calls:
        each feeds the ops of the innermost call it was handed to."""
        tensors = self.events.tensors
        untracked = {i for i in self.tensor_indices
                     if tensors[i].grad_fn is None and not tensors[i].requires_grad}
        if untracked:
            self._link_untracked(untracked)
        self._feed_orphans()

    def _link_untracked(self, untracked: set[int]) -> None:
        tensors = self.events.tensors
        handed_down: dict[int, set[int]] = {}
        for call in self.calls:
            if call.parent >= 0:
                handed_down.setdefault(call.parent, set()).update(untracked.intersection(call.inputs))
        own_ops: dict[int, list[str]] = {}
        for node_id, owner in self.op_owner.items():
            own_ops.setdefault(owner, []).append(node_id)
        for index, call in zip(self.tracker.session_calls, self.calls):
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
        orphans = [i for i in sorted(set(self.tensor_indices)) if tensors[i].parent >= 0
                   and tensors[i].seq > session_start
                   and tensors[i].node_id not in self.has_input]
        if not orphans:
            return
        children: dict[int, list[int]] = {}
        for index, call in zip(self.tracker.session_calls, self.calls):
            children.setdefault(call.parent, []).append(index)
        for index in orphans:
            record = tensors[index]
            finished = [c for c in children.get(record.parent, []) if calls[c].t_end <= record.t
                        and calls[c].outputs and index not in calls[c].outputs]
            sources = calls[finished[-1]].outputs if finished else calls[record.parent].inputs
            for source in sources:
                if source != index:
                    self.edge(tensors[source].node_id, record.node_id, record.t)

    def release(self) -> None:
        for index in self.tensor_indices:
            self.events.tensors[index].grad_fn = None
        self.boundary.clear()
        self.op_ids.clear()
