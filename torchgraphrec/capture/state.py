"""What the hooks and the op mode share while a forward runs: records, producers, open calls."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import is_lazy

from torchgraphrec._torch import dtensor_local, dtensor_type, functorch_unwrapped
from torchgraphrec.capture.chains import ChainGuard
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.events import OP_CALL, OP_SEQ, TENSOR_SEQ, Events, Ref, raw_tensor
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.capture.values import ENTRY_NUMBER, ENTRY_REF, ENTRY_TENSOR, ENTRY_VERSION, \
    Values, grad_fn_of, version_of

__all__ = ["CaptureState", "read_shape", "regular_dims", "Uninitialized"]


_PLAIN = torch.Tensor
_NOT_LAZY = (torch.nn.Parameter, torch.Tensor)  # exactly these types: is_lazy need not ask


class Uninitialized(Exception):
    """A lazy module's parameter was used before it was materialized (while the module
    initializes itself): such calls are not recorded as ops."""


def read_shape(tensor: torch.Tensor) -> Any:
    """``tensor.shape``; for a nested tensor, a tuple of its regular leading dimensions
    (which ``.shape`` refuses to give).

    >>> read_shape(torch.zeros(2, 3))
    torch.Size([2, 3])
    >>> import warnings
    >>> with warnings.catch_warnings():  # "nested tensors are a prototype"
    ...     warnings.simplefilter("ignore")
    ...     nested = torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)])
    >>> read_shape(nested)
    (2,)
    """
    try:
        return tensor.shape
    except RuntimeError:
        regular = []
        for dim in range(tensor.dim()):
            try:
                regular.append(int(tensor.size(dim)))
            except RuntimeError:
                break
        return tuple(regular)


def regular_dims(shape: Any) -> tuple[int, ...]:
    """The dimensions of ``shape`` up to the first that is no int: a jagged nested tensor's
    ``shape`` holds its ragged dimension as a symbol.

    >>> import warnings
    >>> with warnings.catch_warnings():  # "nested tensors are a prototype"
    ...     warnings.simplefilter("ignore")
    ...     jagged = torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)],
    ...                                         layout=torch.jagged)
    >>> regular_dims(jagged.shape)
    (2,)
    """
    regular = []
    for dim in shape:
        try:
            regular.append(int(dim))
        except Exception:  # noqa: BLE001 - a symbol says so in its own way
            break
    return tuple(regular)


class CaptureState:
    """Records, the producers of live values and the stack of open calls, for one recorder.

    Args:
        table: the model's modules, parameters and buffers.
        events: where records are appended.
        autograd: keep each boundary tensor's ``grad_fn`` (the autograd view walks from them).

    :attr:`clock` is the one clock every time recorded is read from: every part of the
    recorder adds its own work to it (see :class:`~torchgraphrec.capture.clock.Clock`).
    """

    __slots__ = ("table", "events", "values", "stack", "autograd", "nested", "chains", "clock",
                 "sharded", "links", "running", "wrapped")

    def __init__(self, table: ModuleTable, events: Events, autograd: bool = False) -> None:
        self.table = table
        self.events = events
        self.values = Values()
        self.stack: list[int] = []
        self.autograd = autograd
        self.nested: set[int] = set()  # indices of tensor records of nested tensors
        #: tensor record index -> (local shape, placements) of those that are DTensors
        self.sharded: dict[int, tuple] = {}
        #: joins DTensors and their local tensors by ops (a ShardLinks; with the op mode only)
        self.links: Any = None
        self.chains = ChainGuard(events)
        self.clock = Clock()
        #: how many recorded ops are running now (an op's call, between its handler's
        #: before and after): what autograd saves while none is, a custom Function saved
        self.running = 0
        #: whether a torch.func transform's wrapper was met in the forward running (vmap
        #: or grad inside it; reset as each forward begins): from then on the op mode
        #: notes what each result wraps
        self.wrapped = False

    def tensor_node(self, tensor: torch.Tensor, version: int, number: int, call: int, t: int,
                    role: str | None = None) -> int:
        """A new tensor record for ``tensor`` as it is now; returns its index."""
        events = self.events
        index = len(events.tensors)
        try:
            shape = tensor.shape
        except RuntimeError:  # a nested tensor
            shape = read_shape(tensor)
            self.nested.add(index)
        if type(tensor) is not _PLAIN:
            shape = self._note_subclass(index, tensor, shape)
        grad_fn = grad_fn_of(tensor) if self.autograd else None
        events.seq += 1
        events.tensors.append(raw_tensor(number, version, shape, tensor.dtype, tensor.device,
                                         tensor.requires_grad, call, events.seq, t, grad_fn,
                                         tensor.output_nr if grad_fn is not None else 0))
        if role is not None:
            events.roles[index] = role
        return index

    def unknown(self, tensor: torch.Tensor, version: int, call: int, t: int,
                role: str | None, aliases: bool = False) -> Ref:
        """The producer of a value no recorded op or boundary made (an earlier forward's
        values are in :attr:`values`): the model's own parameter or buffer, or a new tensor
        node with ``role`` (``input``, ``constant``, or ``None`` for one a call produced).
        With ``aliases`` (the ATen level, where a detach may go unseen), a tensor that is a
        parameter's memory exactly is that parameter."""
        table = self.table
        node = table.tensor_ids.get(id(tensor))
        if node is None and table.swaps and self.stack:
            calls = self.events.calls
            node = table.swapped_in(tensor, [calls[call].module for call in self.stack])
        described = tensor
        if node is None and aliases and self.stack:
            found = table.aliased_in(tensor, self.events.calls[self.stack[-1]].module)
            if found is not None:  # described by the parameter, if it is its first use
                node, described = found
        if node is not None:
            # the type first: is_lazy's isinstance costs more, at each parameter's first use
            if type(tensor) not in _NOT_LAZY and is_lazy(tensor):
                raise Uninitialized(node)
            events = self.events
            if node not in events.params:  # described as the forward first used it
                events.seq += 1
                events.params[node] = (call, events.seq, described.shape, described.dtype,
                                       described.requires_grad)
            self.values.set(tensor, version, node, None)
            return node
        if self.links is not None:
            linked = self.links.link(tensor, version, call, t)
            if linked is not None:
                return linked
        inner = functorch_unwrapped(tensor)
        if inner:
            self.wrapped = True
            held = self._held_by(inner, call, t)
            if held is not None:  # a wrapper of a value known: that value
                self.values.set(tensor, version, held[ENTRY_REF], held[ENTRY_NUMBER])
                return held[ENTRY_REF]
        number = self.values.new_number()
        index = self.tensor_node(tensor, version, number, call, t, role)
        self.values.set(tensor, version, ~index, number)
        return ~index

    def take_value(self, tensor: torch.Tensor, source: Any, call: int, t: int) -> None:
        """``tensor.data = source`` in call ``call`` at ``t``: ``tensor`` holds ``source``'s
        value from now on, whatever made it (a parameter not read yet: its param node)."""
        if not isinstance(source, torch.Tensor) or is_lazy(tensor):
            return  # (a lazy module filling its parameter in: its param node is its value)
        entry = self.values.lookup(source)
        ref = entry[ENTRY_REF] if entry is not None else \
            self.unknown(source, version_of(source), call, t, "constant")
        self.values.take_value(tensor, source, ref)

    def _held_by(self, inner: list, call: int, t: int) -> Any:
        """The entry of the value a transform's wrapper holds (``inner``: what it holds,
        level by level), where it is known or a parameter: vmap hands the function each
        input so, and ``grad`` its own. ``None`` for a value from outside the recording (a
        transform around the model: the wrapper is the model's input, as the model sees
        it)."""
        values = self.values
        for held in inner:
            entry = values.lookup(held)
            if entry is None and id(held) in self.table.tensor_ids:
                self.unknown(held, version_of(held), call, t, None)
                entry = values.lookup(held)
            if entry is not None:
                return entry
        return None

    def note_unwrapped(self, results: Any, index: int) -> None:
        """What each of op ``index``'s ``results`` wraps, where it is a transform's wrapper,
        is that op's too: the transform hands it out as it returns (vmap's result, the
        gradient ``grad`` returns)."""
        values = self.values
        for tensor in results:
            for held in functorch_unwrapped(tensor):
                if values.lookup(held) is None:  # not a value known already (an input)
                    values.set(held, version_of(held), index, None)

    def boundary(self, tensor: torch.Tensor, t: int, call: int, role: str | None) -> Ref:
        """The node standing for ``tensor`` at a call boundary: an op's result becomes a
        tensor node (with an edge from the op); a value nothing produced gets a node for
        ``call`` with ``role`` (see :meth:`unknown`)."""
        try:
            version = self.values.read(tensor)
        except RuntimeError:  # an inference tensor keeps no version counter
            version = self.values.read_safely()(tensor)
        current = self.values.current
        entry = current.get(id(tensor))
        if entry is None or entry[ENTRY_TENSOR]() is not tensor:
            return self._unknown_at_boundary(tensor, version, call, t, role)
        if entry[ENTRY_VERSION] != version:
            entry = self.values.written(tensor, version, entry)
            if entry is None:
                return self._unknown_at_boundary(tensor, version, call, t, role)
        op = entry[ENTRY_REF]
        if type(op) is not int or op < 0:
            return op
        # an op's result crosses a boundary: it becomes a tensor node, fed by the op (inline
        # but for the record's layout: this runs between layers, where every call costs
        # several times its microbenchmark)
        events, number = self.events, entry[ENTRY_NUMBER]
        if number is None:
            number = self.values.numbers
            self.values.numbers += 1
        index = len(events.tensors)
        try:
            shape = tensor.shape
        except RuntimeError:  # a nested tensor
            shape = read_shape(tensor)
            self.nested.add(index)
        if type(tensor) is not _PLAIN:
            shape = self._note_subclass(index, tensor, shape)
        seq = events.seq + 1
        events.seq = seq + 1
        events.tensors.append(raw_tensor(number, version, shape, tensor.dtype, tensor.device,
                                         tensor.requires_grad, events.ops[op][OP_CALL], seq, t))
        events.boundary_edges.append((op, ~index, seq + 1, t))
        current[id(tensor)] = (entry[ENTRY_TENSOR], version, ~index, number)
        return ~index

    def passed_through(self, tensor: torch.Tensor, source: Ref, call: int, t: int) -> int:
        """A new tensor node for ``tensor``, which ``call`` returned just as it was before
        (a model input, a parameter, an earlier forward's output): fed by an edge from
        ``source``, the node it was, so that the output is a node of its own. Returns its
        index."""
        version = version_of(tensor)
        index = self.tensor_node(tensor, version, self.values.new_number(), call, t)
        self.events.boundary_edges.append((source, ~index, self.events.next_seq(), t))
        return index

    def _unknown_at_boundary(self, tensor: torch.Tensor, version: int, call: int, t: int,
                             role: str | None) -> Ref:
        """:meth:`unknown` for a boundary, where an op it put in (a DTensor's ``to_local``)
        makes a tensor node as any op's result does."""
        ref = self.unknown(tensor, version, call, t, role)
        if type(ref) is int and ref >= 0:
            return self.boundary(tensor, t, call, role)
        return ref

    def _note_subclass(self, index: int, tensor: torch.Tensor, shape: Any) -> Any:
        """The shape to record for the tensor record ``index`` of a tensor that is not a
        plain ``Tensor``: a jagged nested tensor's regular leading dimensions (it is noted
        as nested, as a strided one is); a DTensor's local shape is noted besides."""
        if tensor.is_nested:
            self.nested.add(index)
            return regular_dims(shape)
        self._note_shard(index, tensor)
        return shape

    def _note_shard(self, index: int, tensor: torch.Tensor) -> None:
        """Note the local shape and placements of the tensor record ``index`` where its
        tensor is a ``DTensor`` (its ``shape`` is the global one)."""
        found = dtensor_type()
        if found is not None and isinstance(tensor, found):
            local = dtensor_local(tensor)
            self.sharded[index] = (tuple(int(d) for d in local.shape),
                                   tuple(repr(p) for p in tensor.placements))

    def seq_of(self, ref: Ref) -> int:
        """When the node ``ref`` names was observed (params: before everything)."""
        if type(ref) is str:
            return -1
        if ref >= 0:  # type: ignore[operator]
            return self.events.ops[ref][OP_SEQ]  # type: ignore[index]
        return self.events.tensors[~ref][TENSOR_SEQ]  # type: ignore[operator]
