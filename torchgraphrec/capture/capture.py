"""Capture: the hooks, the op mode and the records of one recording, started and stopped together."""

from __future__ import annotations

import sys
from typing import Any, Callable

import networkx as nx
import torch
from torch import nn

from torchgraphrec._torch import autograd_sequence_number, compiled_code_eager
from torchgraphrec.capture.autograd import MAX_CHAIN, is_function_node, walk
from torchgraphrec.capture.backward import BackwardClock, owners
from torchgraphrec.capture.build import build_graph
from torchgraphrec.capture.bwdcoll import BackwardCollectives
from torchgraphrec.capture.calibrate import dispatch_costs
from torchgraphrec.capture.calls import CallTracker
from torchgraphrec.capture.collectives import ForwardCollectives
from torchgraphrec.capture.events import OP_NUMBER, Events
from torchgraphrec.capture.fastpath import ATEN_LEVEL_TYPES, AtenMode, FastPathSwitch
from torchgraphrec.capture.flops.counts import FlopCounts
from torchgraphrec.capture.flops.opmode import CountingOpMode
from torchgraphrec.capture.growth import Growth
from torchgraphrec.capture.headroom import FRAMES_PER_LEVEL, MARGIN, RecursionHeadroom
from torchgraphrec.capture.naming import Namer
from torchgraphrec.capture.opcosts import OpCosts
from torchgraphrec.capture.ops import OpMode
from torchgraphrec.capture.saved import SavedBytes
from torchgraphrec.capture.session import autograd_ops
from torchgraphrec.capture.shardlinks import ShardLinks, has_dtensors, move_pending
from torchgraphrec.capture.state import CaptureState
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.capture.values import grad_fn_of
from torchgraphrec.capture.weakcall import weak_method
from torchgraphrec.errors import warn
from torchgraphrec.gcpause import gc_paused
from torchgraphrec.schema import OpsMode

__all__ = ["Capture", "OPS"]

#: The values ``ops=`` takes: every torch-level call, autograd's nodes, or no ops at all.
OPS = (OpsMode.TORCH.value, OpsMode.AUTOGRAD.value, None)
_autograd_number: Callable[[], int] = autograd_sequence_number


def check_ops(ops: Any) -> str:
    """The graph's ``ops`` attribute for the ``ops=`` option, or a ``ValueError``.

    >>> check_ops("torch"), check_ops(None)
    ('torch', 'none')
    >>> check_ops("aten")
    Traceback (most recent call last):
    ValueError: unknown ops: 'aten' (must be one of ['torch', 'autograd', None])
    """
    if ops == OpsMode.NONE.value:  # already checked
        return ops
    if ops not in OPS:
        raise ValueError(f"unknown ops: {ops!r} (must be one of {list(OPS)})")
    return OpsMode.NONE.value if ops is None else ops


class Capture:
    """Records the forwards of ``model`` between :meth:`start` and :meth:`stop`.

    Each top-level call is one forward: the op mode is pushed when it starts and popped
    when it ends, the collector is paused meanwhile, and its records are named when it
    ends. With ``backward``, the autograd nodes each op made are hooked so that backward
    passes are timed per op. ``first_only`` stops recording after the first forward.
    """

    def __init__(self, model: nn.Module, *, ops: str = "torch", backward: bool = False,
                 first_only: bool = False, flops: bool = False, memory: bool = False,
                 collectives: bool | str = False) -> None:
        self.ops = check_ops(ops)
        self.table = ModuleTable(model)
        self.events = Events()
        self.state = CaptureState(self.table, self.events, autograd=self.ops == "autograd")
        self.state.clock.use_costs(dispatch_costs())  # before the modes read them
        self.namer = Namer(self.table, self.events, self.state.nested)
        # the parts call back through weak references: see weak_method
        self.tracker = CallTracker(self.state, weak_method(self._begin), weak_method(self._end),
                                   "constant" if self.ops == "torch" else None)
        self.tracker.call_edges = self.ops == "none"
        self.clock = BackwardClock(self.state.clock) if backward else None
        # the collectives only a dispatch mode sees: only where ops are recorded (they
        # become op nodes); the backward's where autograd scopes the mode to a node
        self.watch = BackwardCollectives(self, backward=backward and collectives == "all") \
            if collectives and self.ops == "torch" else None
        self.mode: OpMode | None = None
        self.costs: OpCosts | None = None
        if self.ops == "torch":
            self._make_op_modes(flops, memory)
            self.state.links = ShardLinks(self.state.values, self.events,
                                          has_dtensors(self.table.parameters()),
                                          weak_method(self._costs_follow))
        self.tracker.keep_grad_fns = backward and self.ops == "torch"
        self.first_only = first_only
        self.collectives = ForwardCollectives()  # read at each forward's end (the watch's)
        self.growth = Growth(self.table, weak_method(self._registered), self.tracker.adopt)
        self._gc: gc_paused | None = None
        self._eager = compiled_code_eager()  # entered with the collector's pause
        self._headroom: RecursionHeadroom | None = None
        self.first_op = 0  # the index of the current forward's first op
        self.forward_number = 0  # autograd's sequence number when this forward began
        self.forwards = 0  # forwards finished (recorded or failed)

    def _make_op_modes(self, flops: bool, memory: bool) -> None:
        """The op mode, the ATen-level one for fast-path and scripted modules, and the op
        costs asked for."""
        counts = FlopCounts(self.events.ops, self.state.clock, self.tracker, self.clock) \
            if flops else None
        fail = weak_method(self.tracker.fail)  # the tracker holds the modes (its switch)
        self.mode = OpMode(self.state, fail) if counts is None else \
            CountingOpMode(self.state, fail, counts)
        # asked of each module only where one of the model's classes is such a type
        fast = {i for i, m in enumerate(self.table.modules) if isinstance(m, ATEN_LEVEL_TYPES)} \
            if any(issubclass(t, ATEN_LEVEL_TYPES) for t in self.table.module_types) else set()
        if fast:  # the switch is asked at the end of every call: only where it can act
            aten = AtenMode(self.state, fail)
            self.tracker.switch = FastPathSwitch(self.mode, aten, fast)
        if counts is None and not memory:
            return
        saved_bytes = SavedBytes(self.events.ops, self.state.clock, self.state) \
            if memory else None
        self.costs = OpCosts(counts, saved_bytes, self.table.modules)
        self.namer.op_costs = self.costs.put
        if memory:
            self.tracker.on_input = self.costs.exclude

    def _costs_follow(self, index: int) -> None:
        """The costs counted under op ``index`` follow the op being recorded to the next
        index (an op was put in before it: see :class:`ShardLinks`)."""
        costs = self.costs
        if costs is not None:
            tables = [part.by_op for part in (costs.saved_bytes, costs.flops)
                      if part is not None]
            move_pending(tables, index)

    @property
    def failure(self) -> BaseException | None:
        """The recorder's own failure, if one happened (the user's forward went on)."""
        return self.tracker.failure

    def start(self) -> None:
        """Attach the hooks (and start counting FLOPs, forward and backward)."""
        self.events.t0 = self.state.clock.now()
        self.tracker.attach()
        if self.watch is not None:
            self.watch.attach()
        self.growth.attach()
        if self.costs is not None:
            self.costs.start()

    def stop(self) -> None:
        """Detach everything; name what an interrupted forward left (its calls stay open).
        Every step runs, also where one before it raised (a KeyboardInterrupt landing in
        it, say); the first error is raised after the last step."""
        _each(self.tracker.detach,
              self.watch.detach if self.watch is not None else None,
              self.growth.detach,
              self._finish_interrupted,
              # a forward whose end failed halfway (out of stack deep in a model) left
              # these on
              self._take_off,
              self._resume,
              self.clock.detach if self.clock is not None else None,
              self.costs.stop if self.costs is not None else None)

    def _finish_interrupted(self) -> None:
        if self.tracker.in_forward:  # no hook ran at the end (a KeyboardInterrupt, say)
            self.state.stack.clear()
            self.tracker.in_forward = False
            self._finish()

    def _registered(self, tensor: torch.Tensor) -> None:
        """A parameter or buffer the model made while recorded: its next use is its param
        node (not the ops that filled it in), and it is no saved activation."""
        self.state.values.current.pop(id(tensor), None)
        if self.costs is not None:
            self.costs.exclude(tensor)

    def _begin(self) -> None:
        # The collector's passes over the many small records made during capture cost
        # about half a forward on deep models; it is off for the forward only.
        if self._gc is None:
            self._gc = gc_paused()
            self._gc.__enter__()
            # the op mode goes on below: compiled code must not meet it (see compiled_code_eager)
            self._eager.__enter__()
        # what the last forward left that a later one must not read (done here rather
        # than as it ended: a recording of one forward never needs it)
        self.state.values.end_forward(self.table.tensor_ids)
        if self._headroom is None:  # (one a forward out of stack left raised stays)
            self._headroom = RecursionHeadroom(
                FRAMES_PER_LEVEL * self.state.table.nesting() + MARGIN)
            self._headroom.__enter__()
        self.first_op = len(self.events.ops)
        self.state.wrapped = False  # a transform's wrappers live in the forward that met them
        self.forward_number = _autograd_number()
        self.state.chains.start(self.forward_number)
        if self.costs is not None:
            self.costs.begin_forward()
        if self.mode is not None:
            self.mode.push()

    def _end(self) -> None:
        self._finish()
        if self.first_only:
            self.tracker.done = True
            self.growth.detach()
            # nothing more to record: the later forwards (a training run's) run unhooked.
            # Not while an exception is handled: torch may be walking the live table of
            # global hooks to unwind a raising forward, which our hooks leaving would turn
            # into an error of their own (they do nothing once done, and go at stop())
            if sys.exc_info()[1] is None:
                self.tracker.detach()

    def _finish(self) -> None:
        try:
            self._take_off()
            if self.state.links is not None:
                self.state.links.settle()
            if self.tracker.failure is None:
                self.namer.name_pending()
                self._follow_autograd()
        finally:
            self.forwards += 1
            self.tracker.breaks = []
            self.tracker.output_grad_fns = []
            self._resume()

    def _take_off(self) -> None:
        """Take off what a forward put on: the ATen-level mode, the op mode and the
        saved-tensor hooks (each is left as it is where it is off already)."""
        if self.tracker.switch is not None:
            self.tracker.switch.reset()
        if self.mode is not None:
            self.mode.pop()
        if self.costs is not None:
            self.costs.end_forward()

    def _resume(self) -> None:
        """The collector and the recursion limit as they were before the forward."""
        self._eager.__exit__()  # (nothing where not entered; a failed leaving may try again)
        if self._gc is not None:
            self._gc.__exit__()
            self._gc = None
        if self._headroom is not None:
            self._headroom.__exit__()
            if self._headroom.restored:
                self._headroom = None

    def _follow_autograd(self) -> None:
        """The autograd view's ops, and the backward clock's hooks, while the forward's
        autograd graph is alive."""
        start = self.tracker.forward_start
        if self.ops == "autograd":
            pairs = autograd_ops(self.state, self.namer, self.tracker.breaks, start)
        elif self.clock is not None and self.mode is not None:
            pairs = self._op_nodes()
        else:
            pairs = []
        if self.state.chains.too_deep:
            warn(f"this forward chains more than {MAX_CHAIN:,} autograd nodes one after another: "
                 "the recording has every op, but no grad_fn names past that depth and no "
                 "backward times, since touching such a chain's nodes from Python makes "
                 "PyTorch crash when it frees them (pytorch/pytorch#109948)")
            return
        if self.clock is not None and pairs:
            self.clock.attach(pairs)

    def _op_nodes(self) -> list[tuple[Any, str]]:
        """``(autograd node, op id)`` for the nodes the forward's ops made."""
        ops = self.events.ops[self.first_op:]
        roots, self.tracker.output_grad_fns = self.tracker.output_grad_fns, []
        if not ops or self.state.chains.too_deep:
            return []
        high = _autograd_number()
        # and from every value the forward made that lives on: a loss term it kept instead
        # of returning (a router's balance loss on its module), or an output in an object
        # the output walk cannot see into, is backed through too
        roots += [grad_fn_of(tensor) for tensor in self.state.values.alive()]
        found = walk(roots, self.forward_number, high)
        pairs = owners([op[OP_NUMBER] for op in ops], found, self.first_op, is_function_node)
        return [(node, self.namer.op_ids[index]) for node, index in pairs]

    def _annotate_shards(self, graph: nx.DiGraph) -> None:
        """Give the tensor nodes of ``DTensor`` s ``local_shape`` and ``placements``."""
        ids, nodes = self.namer.tensor_ids, graph.nodes
        for index, (local_shape, placements) in self.state.sharded.items():
            attrs = nodes.get(ids[index]) if index < len(ids) else None
            if attrs is not None:
                attrs["local_shape"], attrs["placements"] = local_shape, placements

    def graph(self, *, share: bool = False) -> nx.DiGraph:
        """The recorded graph (a new one each time; ``share``: see :func:`build_graph`), with
        the costs as recorded (what follows from them is
        :func:`torchgraphrec.costs.add_costs`'s, which works on any graph)."""
        graph = build_graph(self.events, self.table, self.namer, self.ops, share=share)
        self._annotate_shards(graph)
        if self.clock is not None:
            self.clock.annotate(graph, self.events.t0)
        if self.costs is not None:
            self.costs.annotate(graph)
        return graph


def _each(*steps: Callable[[], Any] | None) -> None:
    """Run every step given; raise the first error any raised once all have run."""
    failure: BaseException | None = None
    for step in steps:
        if step is None:
            continue
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - raised below, after the other steps
            failure = failure or exc
    if failure is not None:
        raise failure
