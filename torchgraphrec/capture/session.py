"""Turning one finished top-level forward into op, param and edge records."""

from __future__ import annotations

from typing import Any

from torchgraphrec.capture.autograd import Timeline, is_leaf_accumulator, op_name, walk
from torchgraphrec.capture.events import EdgeRecord, Events, OpRecord, ParamRecord
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
        self.boundary: dict[tuple[Any, int], int] = {}
        self.tensor_indices: list[int] = []
        for call in self.calls:
            self.tensor_indices += call.inputs + call.outputs
        for index in self.tensor_indices:
            record = self.events.tensors[index]
            if record.grad_fn is not None:
                self.boundary.setdefault((record.grad_fn, record.output_nr), index)
        self.op_ids: dict[Any, str] = {}
        self.op_owner: dict[str, int] = {}
        self.op_time: dict[str, int] = {}
        self.empty_slots: set[str] = set()
        self.has_input: set[str] = set()

    def edge(self, source: str, target: str, t: int, kind: str = "flow") -> None:
        self.has_input.add(target)
        self.events.edges.append(EdgeRecord(source, target, kind, self.events.next_seq(), t))

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

    def record_ops(self) -> list[Any]:
        root = self.calls[0]
        starts = [self.events.tensors[i].grad_fn for i in self.tensor_indices]
        nodes = walk(starts, root.seq_start, root.seq_end)
        for node in nodes:
            self._add_op(node)
        for node in nodes:
            self._link_op_inputs(node)
        for index in self.tensor_indices:
            record = self.events.tensors[index]
            producer = self.op_ids.get(record.grad_fn)
            if producer is not None and self.boundary.get((record.grad_fn, record.output_nr)) == index:
                self.edge(producer, record.node_id, record.t)
        return nodes

    def _add_op(self, node: Any) -> None:
        number = node._sequence_nr()
        grad_fn = type(node).__name__
        name = op_name(grad_fn)
        node_id = f"op:{name}#{len(self.events.ops)}"
        owner = self.timeline.owner(number)
        self.op_ids[node] = node_id
        self.op_owner[node_id] = owner
        self.op_time[node_id] = t = self.timeline.time(number)
        self.events.ops.append(OpRecord(node_id, name, grad_fn, owner, self.events.next_seq(), t))

    def _link_op_inputs(self, node: Any) -> None:
        target = self.op_ids[node]
        t = self.timeline.time(node._sequence_nr())
        for source_node, output_nr in node.next_functions:
            if source_node is None:
                self.empty_slots.add(target)
                continue
            tensor_index = self.boundary.get((source_node, output_nr))
            if tensor_index is not None:
                self.edge(self.events.tensors[tensor_index].node_id, target, t)
            elif source_node in self.op_ids:
                self.edge(self.op_ids[source_node], target, t)
            elif is_leaf_accumulator(source_node):
                self._link_leaf(source_node.variable, target, t)

    def _link_leaf(self, variable: Any, target: str, t: int) -> None:
        qualname = self.tracker.table.param_name(variable)
        if qualname is not None:
            self.edge(self._param_id(qualname, variable, target), target, t, kind="param")
            return
        index = self.tracker.lookup(variable)
        if index is None:  # a leaf the model reached by itself (a closure, a global)
            index = self.tracker.see(variable, -1, t)
            self.events.tensors[index].role = "input"
        self.edge(self.events.tensors[index].node_id, target, t)

    def _param_id(self, qualname: str, variable: Any, user_op: str) -> str:
        node_id = f"param:{qualname}"
        if qualname not in self.events.params:
            self.events.params[qualname] = ParamRecord(
                qualname, tuple(variable.shape), str(variable.dtype).replace("torch.", ""),
                variable.requires_grad, self._param_parent(qualname, user_op),
                self.events.next_seq())
        return node_id

    def _param_parent(self, qualname: str, user_op: str) -> int:
        owner_module = self.tracker.table.module_by_qualname(qualname.rpartition(".")[0])
        first_call = self.tracker.first_call.get(owner_module)  # type: ignore[arg-type]
        return self.op_owner[user_op] if first_call is None else first_call

    def link_untracked_inputs(self) -> None:
        """Give tensors that autograd does not see (no grad, int ids) a path through calls."""
        own_ops: dict[int, list[str]] = {}
        for node_id, owner in self.op_owner.items():
            own_ops.setdefault(owner, []).append(node_id)
        child_inputs: dict[int, set[int]] = {}
        for call in self.calls:
            if call.parent >= 0:
                child_inputs.setdefault(call.parent, set()).update(call.inputs)
        for index, call in zip(self.tracker.session_calls, self.calls):
            self._link_untracked(call, own_ops.get(index, []), child_inputs.get(index, set()))
        self._feed_orphans()

    def _link_untracked(self, call: Any, ops: list[str], consumed_by_children: set[int]) -> None:
        tensors = self.events.tensors
        untracked = [i for i in call.inputs if tensors[i].grad_fn is None
                     and not tensors[i].requires_grad and i not in consumed_by_children]
        if not untracked:
            return
        targets = [op for op in ops if op in self.empty_slots] or ops[:1]
        for index in untracked:
            for op in targets:
                self.edge(tensors[index].node_id, op, self.op_time[op])

    def _feed_orphans(self) -> None:
        """Feed each tensor a call produced without autograd (under ``no_grad``, say) from
        what that call had last: its latest finished child's outputs, else its inputs."""
        tensors, calls = self.events.tensors, self.events.calls
        children: dict[int, list[int]] = {}
        for index, call in zip(self.tracker.session_calls, self.calls):
            children.setdefault(call.parent, []).append(index)
        session_start = self.calls[0].seq
        for index in sorted(set(self.tensor_indices)):
            record = tensors[index]
            if record.parent < 0 or record.seq < session_start or record.node_id in self.has_input:
                continue
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
