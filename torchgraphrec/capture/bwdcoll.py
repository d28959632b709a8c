"""The collectives only a dispatch mode sees (the backward's; ``barrier`` and C++-issued ones in a forward) as op nodes.

They run from autograd hooks, most from C++ (DDP's reducer), below any torch-function mode,
but every one passes torch's dispatcher as a ``c10d`` or ``_c10d_functional`` op. A listening
dispatch mode is pushed from hooks the backward runs: autograd restores its dispatch modes
after each node and after its final callbacks, so the mode lives exactly as long as the node
(or the callbacks) that pushed it, and is gone when ``backward()`` returns. It passes every
op through untouched and notes only the collectives. The same mode is kept on the stack
while a forward is recorded (see :mod:`~torchgraphrec.capture.fwdcoll`).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Optional

import networkx as nx
import torch

from torchgraphrec._torch import ACCUMULATE_GRAD, DisableTorchFunction, TorchDispatchMode, \
    function_mode_depth, \
    autograd_sequence_number, dispatch_mode_at, dtensor_type, dispatch_mode_depth, \
    graph_task_id, push_dispatch_mode, queue_backward_callback, unbox_process_group
from torchgraphrec.capture.autograd import is_function_node, walk
from torchgraphrec.capture.collectives import C10D, FUNCTIONAL, group_attrs, ranks_of
from torchgraphrec.capture.events import OP_NAME
from torchgraphrec.capture.fwdcoll import ForwardListening
from torchgraphrec.capture.structures import flatten_tensors
from torchgraphrec.capture.values import grad_fn_of
from torchgraphrec.errors import CaptureError

__all__ = ["BackwardCollectives", "DISPATCHED"]

#: The collectives as the dispatcher runs them: ``op -> (collective, the argument holding
#: this rank's input tensors, or None)``.
DISPATCHED: dict[str, tuple[str, Optional[int]]] = {
    "c10d::allreduce_": ("all_reduce", 0), "c10d::allreduce_coalesced_": ("all_reduce", 0),
    "c10d::allgather_": ("all_gather", 1), "c10d::_allgather_base_": ("all_gather", 1),
    "c10d::allgather_coalesced_": ("all_gather", 1),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 1),
    "c10d::reduce_scatter_": ("reduce_scatter", 1),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "c10d::broadcast_": ("broadcast", 0), "c10d::reduce_": ("reduce", 0),
    "c10d::gather_": ("gather", 1), "c10d::scatter_": ("scatter", 1),
    "c10d::alltoall_": ("all_to_all", 1), "c10d::alltoall_base_": ("all_to_all", 1),
    "c10d::send": ("send", 0), "c10d::recv_": ("recv", 0),
    "c10d::recv_any_source_": ("recv", 0), "c10d::barrier": ("barrier", None),
    "c10d::monitored_barrier_": ("barrier", None),
    "_c10d_functional::all_reduce": ("all_reduce", 0),
    "_c10d_functional::all_reduce_": ("all_reduce", 0),
    "_c10d_functional::all_reduce_coalesced": ("all_reduce", 0),
    "_c10d_functional::all_reduce_coalesced_": ("all_reduce", 0),
    "_c10d_functional::all_gather_into_tensor": ("all_gather", 0),
    "_c10d_functional::all_gather_into_tensor_out": ("all_gather", 0),
    "_c10d_functional::all_gather_into_tensor_coalesced": ("all_gather", 0),
    "_c10d_functional::reduce_scatter_tensor": ("reduce_scatter", 0),
    "_c10d_functional::reduce_scatter_tensor_out": ("reduce_scatter", 0),
    "_c10d_functional::reduce_scatter_tensor_coalesced": ("reduce_scatter", 0),
    "_c10d_functional::all_to_all_single": ("all_to_all", 0),
    "_c10d_functional::broadcast": ("broadcast", 0),
    "_c10d_functional::broadcast_": ("broadcast", 0),
}


def _overloads() -> dict[Any, tuple[str, str, Optional[int]]]:
    """Each overload this torch has of :data:`DISPATCHED`: ``(op name, collective, arg)``."""
    found = {}
    for name, (collective, position) in DISPATCHED.items():
        namespace, _, op = name.partition("::")
        packet = getattr(getattr(torch.ops, namespace), op, None)
        for overload in packet.overloads() if packet is not None else ():
            found[getattr(packet, overload)] = (name, collective, position)
    return found


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(item) for item in value)
    return 0


def _group(name: str, args: tuple) -> dict[str, Any]:
    """``group_name`` and ``group_ranks`` of a dispatched collective: a c10d op is handed
    its process group, a functional one its group's name (last)."""
    if name.startswith("_c10d_functional::"):
        found = args[-1] if args else ""
        if isinstance(found, str):
            return {"group_name": found, "group_ranks": ranks_of(found)}
        return group_attrs(found)
    for value in args:
        group = unbox_process_group(value)
        if group is not None:
            return group_attrs(group)
    return {"group_name": "", "group_ranks": ()}


class _Listener(TorchDispatchMode):
    """Passes every op through; notes each collective before running it."""

    def __init__(self, owner: "BackwardCollectives") -> None:
        super().__init__()
        self.owner = owner
        self.dtensor = dtensor_type() or ()  # isinstance-style: () matches nothing

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if any(issubclass(kind, self.dtensor) for kind in types):
            # let DTensor run first: the collectives it desugars into come back through
            return NotImplemented
        if function_mode_depth():  # an ATen op of C++'s, no torch-level call for the
            with DisableTorchFunction():  # function modes (the op mode's, a user's)
                return self._run(func, args, kwargs)
        return self._run(func, args, kwargs)

    def _run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        entry = self.owner.ops.get(func)
        if entry is None:
            return func(*args, **kwargs)
        start = self.owner.clock.now()
        result = func(*args, **kwargs)
        try:
            self.owner.note(entry, args, start)
        except Exception as exc:  # a recorder bug must never break the user's backward
            self.owner.capture.tracker.fail(exc)
        return result


class BackwardCollectives:
    """Notes the collectives of each recorded forward (:class:`ForwardListening`) and, with
    ``backward``, hooks each recorded forward's backward so that its collectives are noted.

    The call tracker's post-hook registers a tensor hook on every recorded call's outputs
    (before FSDP2's own where torch's global hooks serve, which run first: FSDP2
    all-gathers there) and, at the end of each forward, pre-hooks on autograd nodes
    (:meth:`_follow`). Each pushes :class:`_Listener`; the first
    of a backward also queues a callback that pushes it for the final callbacks (FSDP2
    reduce-scatters there). Every handle is removed by :meth:`detach`.
    """

    def __init__(self, capture: Any, *, backward: bool = True) -> None:
        self.capture = weakref.proxy(capture)  # which holds this watch: no cycle with it
        self.backward = backward
        self.clock = capture.state.clock
        self.ops = _overloads()
        # (name, collective, group, bytes, start, end, call, seq, phase)
        self.records: list[tuple] = []
        self.blind: Optional[str] = None  # why some backward was not watched
        self.where = -1  # the call what runs now belongs to
        self.arrived = -1  # the call whose output gradient arrived last
        self.root = -1  # the top-level call of the backward running
        self._mode = _Listener(self)
        self.forward = ForwardListening(self._mode, self.clock)
        self._begin: Any = None
        self._end: Any = None
        self._task = -2
        self._handles: list[Any] = []
        self._accumulators: dict[int, Any] = {}  # id(variable) -> its hooked AccumulateGrad

    def attach(self) -> None:
        """Listen to the forwards: the listener is on the stack while each runs, and (with
        ``backward``) the call tracker hands over each call's output."""
        tracker = self.capture.tracker
        self._begin, self._end = tracker.on_begin, tracker.on_end
        tracker.on_begin, tracker.on_end = self._on_begin, self._on_end
        if self.backward:
            tracker.on_output = self._on_output

    def _on_begin(self) -> None:
        self.forward.enter()  # before the op mode, which goes above the watch
        self._begin()

    def _on_end(self) -> None:
        try:
            self._end()
        finally:
            self.forward.leave()
        try:  # while their process groups exist: a job may destroy one before the next step
            self.capture.collectives.read(self.capture.events.ops)
        except Exception as exc:  # a recorder bug must never break the user's forward
            self.capture.tracker.fail(exc)

    def detach(self) -> None:
        """Remove every hook; safe to call twice."""
        tracker = self.capture.tracker
        self.forward.leave()
        if self._begin is not None:
            tracker.on_begin, tracker.on_end = self._begin, self._end
            self._begin = self._end = None
        tracker.on_output = None
        while self._handles:
            self._handles.pop().remove()
        self._accumulators.clear()

    def note(self, entry: tuple, args: tuple, start: int) -> None:
        """Note a collective that ran from ``start`` until now: in a backward (with
        ``backward``) in the call its hooks say, in a forward outside any torch-level call
        (those are the op mode's) in the call running."""
        name, collective, position = entry
        tracker = self.capture.tracker
        if graph_task_id() >= 0:
            if not self.backward:
                return
            phase, call = "backward", self.where
        elif tracker.in_forward and not tracker.done and not self.forward.inside:
            stack = self.capture.state.stack
            phase, call = "forward", stack[-1] if stack else -1
        else:
            return
        size = _bytes(args[position]) if position is not None and position < len(args) else 0
        if not size and collective in ("recv", "scatter"):  # off the source: what it receives
            size = _bytes(args[0])
        self.records.append((name, collective, _group(name, args), size, start,
                             self.clock.now(), call, self.capture.events.next_seq(), phase))

    def _push(self, *_: Any) -> None:
        depth = dispatch_mode_depth()
        if not depth or dispatch_mode_at(depth - 1) is not self._mode:
            push_dispatch_mode(self._mode)

    def _in_call(self, *_: Any) -> None:
        """A node's pre-hook: what it runs belongs to the call whose gradient came last."""
        self.where = self.arrived
        self._push()

    def _in_root(self, *_: Any) -> None:
        """A parameter's accumulator (DDP's reducer) or the final callbacks (FSDP2's root):
        what they run belongs to the top-level call. Under ``graph="first"``, only in a
        backward a recorded call's output gradient reached: an accumulator DDP keeps is also
        run by the backwards of the later steps' forwards, which are not recorded."""
        if self.capture.first_only and graph_task_id() != self._task:
            return
        self.where = self.root
        self._push()

    def _arrived(self, call: int, grad: Any) -> None:
        try:
            task = graph_task_id()
            if task != self._task:
                self._task = task
                calls, root = self.capture.events.calls, call
                while calls[root].parent >= 0:
                    root = calls[root].parent
                self.root = root
                queue_backward_callback(self._in_root)
            self.where = self.arrived = call
            self._push()
        except Exception as exc:  # a recorder bug must never break the user's backward
            self.capture.tracker.fail(exc)

    def _on_output(self, index: int, output: Any) -> None:
        """From the call tracker's post-hook (torch functions off, failures noted there)."""
        tensors = [t for t in flatten_tensors(output) if t.requires_grad]
        for tensor in tensors:
            self._handles.append(tensor.register_hook(functools.partial(self._arrived, index)))
        if self.capture.events.calls[index].parent == -1:
            self._follow([grad_fn_of(t) for t in tensors])

    def _follow(self, roots: list[Any]) -> None:
        """Pre-hooks on its parameters' accumulators (DDP all-reduces from their post-hooks),
        on custom Functions' nodes (FSDP2 reduce-scatters in one) and, where the forward
        ran collectives or DTensors, whose backward ops may communicate, on every node."""
        try:
            if self.capture.state.chains.too_deep:
                raise CaptureError("too deep")
            found = walk(roots, self.capture.forward_number, autograd_sequence_number())
        except CaptureError:  # touching such a chain's nodes would crash PyTorch later
            self.blind = ("not seen: a forward chained more autograd nodes one after another "
                          "than can be hooked (pytorch/pytorch#109948)")
            return
        first = self.capture.first_op
        everywhere = bool(self.capture.state.sharded) or any(
            op[OP_NAME] in C10D or op[OP_NAME] in FUNCTIONAL
            for op in self.capture.events.ops[first:])
        for _, node, next_functions in found:
            if everywhere or is_function_node(node):
                self._handles.append(node.register_prehook(self._in_call))
            for source, _ in next_functions:
                if source is not None and type(source) is ACCUMULATE_GRAD:
                    self._accumulator(source)

    def _accumulator(self, node: Any) -> None:
        key = id(node.variable)
        if self._accumulators.get(key) is node:  # DDP keeps it: hooked once
            return
        self._accumulators[key] = node
        self._handles.append(node.register_prehook(self._in_root))

    def add_nodes(self, graph: nx.DiGraph, t0: int) -> list[tuple[int, str]]:
        """Add an op node per collective noted, ``(start time, node id)`` of each; no
        backward one where some backward could not be watched (the graph says why: a part
        of them would read as all of them)."""
        if self.blind:
            graph.graph["backward_collectives"] = self.blind
        calls, placed = self.capture.events.calls, []
        for number, (name, collective, group, size, start, end, call, seq, phase) in \
                enumerate(self.records):
            if phase == "backward" and self.blind:
                continue
            parent = calls[call].node_id if 0 <= call < len(calls) else None
            depth = calls[call].depth + 1 if parent is not None else 0
            node_id = f"op:{collective}#{phase}{number}"
            label = collective if phase == "forward" else f"{collective} (backward)"
            graph.add_node(node_id, kind="op", label=label, parent=parent,
                           depth=depth, seq=seq, name=collective, grad_fn=None,
                           args=name.replace("::", "."), t_start_ns=start - t0,
                           t_end_ns=end - t0, collective=collective, comm_bytes=size,
                           phase=phase, **group)
            placed.append((start, node_id))
        return placed
