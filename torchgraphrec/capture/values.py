"""Which node produced each tensor value a forward has seen, by the tensor's identity and version."""

from __future__ import annotations

import operator
import weakref
from typing import Any, Callable, Container, Optional

import torch

from torchgraphrec.capture.events import Ref

__all__ = ["Values", "Entry", "grad_fn_of", "version_of", "inference_written", "memory_of",
           "ENTRY_TENSOR", "ENTRY_VERSION", "ENTRY_REF", "ENTRY_NUMBER"]

#: ``(weak reference, version, ref, number)``, read through the ``ENTRY_*`` indices:
#: ``ref`` produced the tensor at ``version``; ``number`` is the tensor number its node ids
#: use (``None`` until it first crosses a call boundary).
Entry = tuple[Any, int, Ref, Optional[int]]
ENTRY_TENSOR, ENTRY_VERSION, ENTRY_REF, ENTRY_NUMBER = range(4)


def grad_fn_of(tensor: torch.Tensor) -> Any:
    """The tensor's ``grad_fn``, or ``None`` where reading it raises: a view made under
    ``no_grad`` whose base was then written in place refuses to say (the forward that made
    it runs on; only a backward through it would fail).

    >>> leaf = torch.zeros(2, requires_grad=True)
    >>> type(grad_fn_of(leaf * 2)).__name__
    'MulBackward0'
    >>> with torch.no_grad():
    ...     view = (leaf * 2)[0]
    >>> base = view._base
    >>> _ = base.add_(1)  # in grad mode: the view's grad_fn cannot be rebuilt
    >>> grad_fn_of(view) is None
    True
    """
    try:
        return tensor.grad_fn
    except RuntimeError:
        return None


def version_of(tensor: torch.Tensor) -> int:
    """The tensor's in-place version counter. Inference tensors keep none: theirs is
    ``-1``, less the in-place changes of their memory a recording saw
    (:func:`inference_written`), which a base and its views share as they share a counter.

    >>> x = torch.zeros(2)
    >>> version_of(x), version_of(x.add_(1))
    (0, 1)
    >>> with torch.inference_mode():
    ...     y = torch.zeros(2)
    ...     before = version_of(y[:1])
    ...     after = inference_written(y[1:].add_(1))
    >>> before, after, version_of(y), version_of(y[:1])
    (-1, -2, -2, -2)
    """
    if not tensor.is_inference():  # asked first: reading an inference tensor's raises,
        try:  # which costs several microseconds
            return tensor._version
        except RuntimeError:
            return -1
    memory = memory_of(tensor)
    written = _INFERENCE_WRITES.get(id(memory))
    if written is None or written[0]() is not memory:
        return -1
    return -1 - written[1]


def memory_of(tensor: torch.Tensor) -> Any:
    """What ``tensor`` shares its memory and its version counter with: its base if it is
    a view, else itself; an inference tensor's views are not tracked as views (no
    ``_base``): its storage, whose Python object lives as long as the memory does.

    >>> with torch.inference_mode():
    ...     y = torch.zeros(2)
    ...     memory_of(y[1:]) is memory_of(y) is y.untyped_storage()
    True
    """
    base = tensor._base
    if base is not None:
        return base
    if tensor.is_inference():
        try:
            return tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a sparse or nested tensor's
            return tensor
    return tensor


#: What an inference tensor's version counter would read (see :func:`version_of`), by the
#: ``id()`` of the memory written (:func:`memory_of`): ``(weak reference, changes)``.
_INFERENCE_WRITES: dict[int, tuple[Any, int]] = {}
_INFERENCE_WRITES_CHECKED = 1024  # pruned of dead bases whenever it holds twice this many


def inference_written(tensor: torch.Tensor) -> int:
    """Count an in-place change of the inference tensor ``tensor``'s memory; its version
    now (see :func:`version_of`)."""
    global _INFERENCE_WRITES_CHECKED
    memory = memory_of(tensor)
    written = _INFERENCE_WRITES.get(id(memory))
    changes = written[1] + 1 if written is not None and written[0]() is memory else 1
    _INFERENCE_WRITES[id(memory)] = (weakref.ref(memory), changes)
    if len(_INFERENCE_WRITES) >= 2 * _INFERENCE_WRITES_CHECKED:
        for key in [key for key, (ref, _) in _INFERENCE_WRITES.items() if ref() is None]:
            del _INFERENCE_WRITES[key]
        _INFERENCE_WRITES_CHECKED = max(1024, len(_INFERENCE_WRITES))
    return -1 - changes


_read_version: Callable[[torch.Tensor], int] = operator.attrgetter("_version")


class Values:
    """The producers of the tensor values the recorded forwards made, while they live.

    Tensors are held by weak reference only: a dead tensor's ``id()`` may be reused, which
    the reference tells apart, and no activation is kept alive. In-place changes made
    through a view show up as a version the entry does not know; ``writers`` remember,
    per base tensor, which op last changed it, since a base and its views share one
    version counter. ``x.data`` shares ``x``'s memory but keeps a version counter of its
    own: ``data_of`` remembers whose ``.data`` each is, so that a write through it is
    ``x``'s too. ``x.detach()`` shares ``x``'s memory and version counter without being a
    view of it (no ``_base``): ``detached`` remembers whose memory each detached tensor
    is, so that a write through either is found by a read of the other.
    """

    __slots__ = ("current", "writers", "data_of", "detached", "numbers", "read")

    def __init__(self) -> None:
        self.current: dict[int, Entry] = {}
        # laid out as an entry's first three fields
        self.writers: dict[int, tuple[Any, int, Ref]] = {}
        #: id(x.data) -> (its weak reference, x's)
        self.data_of: dict[int, tuple[Any, Any]] = {}
        #: id(x.detach()) -> (its weak reference, one to the memory it shares with x)
        self.detached: dict[int, tuple[Any, Any]] = {}
        self.numbers = 0
        #: reads a tensor's version: the attribute itself, which raises for an inference
        #: tensor, until one is seen (:meth:`read_safely`)
        self.read: Callable[[torch.Tensor], int] = _read_version

    def read_safely(self) -> Callable[[torch.Tensor], int]:
        """Read versions with :func:`version_of` from now on (an inference tensor was met:
        raising for each would cost more than asking each tensor first); returns it."""
        self.read = version_of
        return version_of

    def lookup(self, tensor: torch.Tensor) -> Optional[Entry]:
        """The entry for ``tensor`` as it is now, or ``None`` if its producer is unknown."""
        entry = self.current.get(id(tensor))
        if entry is None or entry[ENTRY_TENSOR]() is not tensor:
            return None
        version = version_of(tensor)
        if version == entry[ENTRY_VERSION]:
            return entry
        return self.written(tensor, version, entry)

    def written(self, tensor: torch.Tensor, version: int, entry: Entry) -> Optional[Entry]:
        """The entry for a version made by an in-place change through a view or a base."""
        memory = self.memory_of(tensor)
        writer = self.writers.get(id(memory))
        if writer is None or writer[ENTRY_TENSOR]() is not memory or \
                writer[ENTRY_VERSION] != version:
            return None  # changed where the recorder could not see (inside a hook, say)
        # an inference tensor's node ids cannot tell its values apart by version: its
        # changed value gets a new number, as in changed()
        return self.set(tensor, version, writer[ENTRY_REF],
                        entry[ENTRY_NUMBER] if version >= 0 else None)

    def set(self, tensor: torch.Tensor, version: int, ref: Ref, number: Optional[int]) -> Entry:
        """Record that ``ref`` produced ``tensor`` at ``version``."""
        entry = self.current[id(tensor)] = (weakref.ref(tensor), version, ref, number)
        return entry

    def changed(self, tensor: torch.Tensor, version: int, ref: Ref) -> None:
        """Record an in-place change of ``tensor`` by op ``ref``, seen through its version."""
        entry = self.current.get(id(tensor))
        if entry is not None and entry[ENTRY_TENSOR]() is not tensor:
            entry = None
        # an inference tensor keeps no version counter: its new value gets a new number
        number = entry[ENTRY_NUMBER] if entry is not None and version >= 0 else None
        self.set(tensor, version, ref, number)
        # at the version given, which an ATen-level write reaches only after its handler;
        # a collective's write, which moves no counter, is given as -1: at the version now
        memory = self.memory_of(tensor)
        self.writers[id(memory)] = (weakref.ref(memory),
                                    version if version >= 0 else version_of(tensor), ref)
        if self.data_of:
            self._written_through_data(tensor, ref)

    def memory_of(self, tensor: torch.Tensor) -> Any:
        """:func:`memory_of`, where a detached tensor's is that of what it was detached
        from."""
        memory = memory_of(tensor)
        if self.detached:
            found = self.detached.get(id(memory))
            if found is not None and found[0]() is memory:
                shared = found[1]()
                return memory if shared is None else shared
        return memory

    def note_alias(self, name: str, alias: torch.Tensor, tensor: torch.Tensor) -> None:
        """Remember that ``alias`` is ``tensor.data`` (``name`` ``"data"``) or
        ``tensor.detach()`` (``"detach"``)."""
        if name == "data":
            self.data_of[id(alias)] = (weakref.ref(alias), weakref.ref(tensor))
        elif not tensor.is_inference():  # an inference tensor's memory is its storage
            self.detached[id(alias)] = (weakref.ref(alias), weakref.ref(self.memory_of(tensor)))

    def take_value(self, tensor: torch.Tensor, source: torch.Tensor, ref: Ref) -> None:
        """``tensor.data = source``, whose value ``ref`` produced: ``tensor`` holds that value
        now, and shares ``source``'s memory (a write through either is the other's too)."""
        self.set(tensor, version_of(tensor), ref, None)
        if not source.is_inference() and not tensor.is_inference():
            self.data_of[id(source)] = (weakref.ref(source), weakref.ref(tensor))
            self.data_of[id(tensor)] = (weakref.ref(tensor), weakref.ref(source))

    def _written_through_data(self, written: torch.Tensor, ref: Ref) -> None:
        """Where ``written`` is some ``x.data``, ``x``'s value is ``ref``'s too: a new value
        (its version, which the write did not move, names the old one). An inference
        tensor's writes are known by its memory already."""
        found = self.data_of.get(id(written))
        if found is None or found[0]() is not written:
            return
        source = found[1]()
        if source is not None and not source.is_inference():
            self.set(source, version_of(source), ref, None)

    def number(self, tensor: torch.Tensor, entry: Entry) -> int:
        """The tensor number of ``entry``'s value, given one now if it had none."""
        if entry[ENTRY_NUMBER] is not None:
            return entry[ENTRY_NUMBER]
        number = self.new_number()
        self.current[id(tensor)] = (entry[ENTRY_TENSOR], entry[ENTRY_VERSION], entry[ENTRY_REF],
                                    number)
        return number

    def new_number(self) -> int:
        """A tensor number for a value that has no entry."""
        number = self.numbers
        self.numbers += 1
        return number

    def remember(self, tensor: torch.Tensor, index: int) -> None:
        """Remember a forward's output (tensor record ``index``), so that a later forward it
        feeds links to it (and not to what it was before: an input returned as it came)."""
        self.current[id(tensor)] = (weakref.ref(tensor), version_of(tensor), ~index, None)

    def alive(self) -> list[torch.Tensor]:
        """The tensors whose values are known that still live, unchanged since: reading
        the ``grad_fn`` of a view whose base was written since would make autograd build
        a node the plain run never makes."""
        found = []
        for entry in self.current.values():
            tensor = entry[ENTRY_TENSOR]()
            if tensor is not None and not tensor.is_inference() and \
                    tensor._version == entry[ENTRY_VERSION]:
                found.append(tensor)
        return found

    def end_forward(self, named: Container[int] = ()) -> None:
        """Forget the forward's values that died, those of the tensors ``named`` (by
        ``id()``: the model's parameters and buffers, which each forward reads from their
        param node again), the ops that wrote through views, and the ``.data`` tensors that
        died. A later forward that reads a value still alive (a cache a module keeps, the
        keys and values an attention layer kept for the next token) links to the op that
        made it."""
        current = self.current
        for key in [key for key, entry in current.items()
                    if key in named or entry[ENTRY_TENSOR]() is None]:
            del current[key]
        self.writers.clear()
        for aliases in (self.data_of, self.detached):  # one kept alive may still be written
            for key in [key for key, (alias, _) in aliases.items() if alias() is None]:
                del aliases[key]
