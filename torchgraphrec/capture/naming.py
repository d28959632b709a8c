"""Turning a finished forward's raw records into nodes and edges in the schema's plain values."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from math import prod
from operator import is_not
from typing import Any, ClassVar

from torchgraphrec.capture.events import Attrs, Events, Ref
from torchgraphrec.capture.opnames import ALL_TENSORS, SHARED_COUNTS, TENSOR, op_args_text
from torchgraphrec.capture.state import regular_dims
from torchgraphrec.capture.tables import ModuleTable

__all__ = ["Describer", "Namer"]


class Describer:
    """Shapes, dtypes and devices as the schema's plain values, each distinct one converted
    once. The conversions are shared by all describers (up to :attr:`LIMIT` shapes): the
    same shape tuples then serve every recording, and once the collector has seen that they
    hold only integers it stops tracking them, and the node dicts that hold them.

    >>> import torch
    >>> describe = Describer()
    >>> describe.shape(torch.Size([2, 3])), describe.name(torch.float32)
    ((2, 3), 'float32')
    """

    LIMIT = 4096
    _shapes: ClassVar[dict[Any, tuple[tuple[int, ...], str]]] = {}
    _names: ClassVar[dict[Any, str]] = {}
    _sizes: ClassVar[dict[Any, int]] = {}

    def shape(self, shape: Any) -> tuple[int, ...]:
        """``torch.Size`` (or a tuple) as a plain tuple of int."""
        return (self._shapes.get(shape) or self.shape_and_label(shape))[0]

    def shape_and_label(self, shape: Any) -> tuple[tuple[int, ...], str]:
        """The plain shape and its text, ``((2, 3), '(2, 3)')``."""
        described = self._shapes.get(shape)
        if described is None:
            try:
                plain = tuple(int(dim) for dim in shape)
            except Exception:  # noqa: BLE001 - a jagged nested tensor's ragged dimension
                plain = regular_dims(shape)
                return plain, str(plain)  # not remembered: it holds the tensor's offsets
            if len(self._shapes) >= self.LIMIT:
                self._shapes.clear()
            described = self._shapes[shape] = (plain, str(plain))
        return described

    def nbytes(self, shape: tuple[int, ...], dtype: Any) -> int:
        """``numel × element size`` of a tensor of ``shape`` and ``dtype``.

        >>> import torch
        >>> Describer().nbytes((2, 3), torch.float16)
        12
        """
        return prod(shape) * (self._sizes.get(dtype) or self.item_size(dtype))

    def item_size(self, dtype: Any) -> int:
        """The size of one element of ``dtype``, in bytes."""
        size = self._sizes[dtype] = dtype.itemsize
        return size

    def name(self, value: Any) -> str:
        """A dtype's or device's name without the ``torch.`` prefix."""
        name = self._names.get(value)
        if name is None:
            name = self._names[value] = str(value).replace("torch.", "")
        return name


class Namer:
    """Gives the records of each finished forward their node ids and attributes.

    Node ids depend only on names and counters, so two recordings of the same model and
    inputs give the same ids. Calls keep their attrs on their records (``num_params`` is
    counted when the graph is built); tensor and op nodes and all edges go to
    :attr:`Events.nodes` and :attr:`Events.edges`. Param nodes are described when the
    graph is built (:meth:`param_nodes`).
    """

    def __init__(self, table: ModuleTable, events: Events, nested: set[int]) -> None:
        self.table, self.events, self.nested = table, events, nested
        #: puts the costs of the ops from index ``first`` on their attrs (a list, in
        #: order), or ``None``
        self.op_costs: Callable[[int, list[Attrs]], None] | None = None
        self.describe = Describer()
        self.tensor_ids: list[str] = []
        self.op_ids: list[str] = []
        self.first_call: dict[int, int] = {}  # module index -> index of its first call
        self._counts: dict[int, int] = {}
        self._settings: dict[int, str] = {}  # module index -> its settings at its first call
        self._named_calls = 0

    def name_pending(self) -> None:
        """Name everything recorded since the last time (the calls first: tensors and ops
        refer to them)."""
        self._name_calls()
        self._name_tensors()
        self._name_ops()
        self._name_boundary_edges()
        self._name_call_ends()

    def ref_id(self, ref: Ref) -> str:
        """The node id a ref names."""
        if type(ref) is str:
            return ref  # type: ignore[return-value]
        if type(ref) is tuple:  # ("call", index), for edges without ops
            return self.events.calls[ref[1]].node_id  # type: ignore[index]
        return self.op_ids[ref] if ref >= 0 else self.tensor_ids[~ref]  # type: ignore[operator]

    def _name_calls(self) -> None:
        events, table = self.events, self.table
        calls, t0, counts, first_call = events.calls, events.t0, self._counts, self.first_call
        qualnames, labels, types = table.qualnames, table.labels, table.types
        settings = self._settings
        for index in range(self._named_calls, len(calls)):
            call = calls[index]
            module = call.module
            call_index = counts.get(module, 0)
            counts[module] = call_index + 1
            if not call_index:
                first_call[module] = index
                # read once per module, at its first call: extra_repr() costs microseconds
                settings[module] = table.settings(module)
            qualname = qualnames[module]
            parent = call.parent
            call.node_id = f"layer:{qualname}#{call_index}"
            call.attrs = {
                "kind": "layer", "label": labels[module],
                "parent": calls[parent].node_id if parent >= 0 else None,
                "depth": call.depth, "seq": call.seq, "qualname": qualname,
                "type": types[module], "call_index": call_index,
                "t_start_ns": call.t_start - t0, "t_end_ns": call.t_end - t0,
                "num_params": 0, "settings": settings[module],
                "training": call.training,
            }

    def _name_tensors(self) -> None:
        events, ids = self.events, self.tensor_ids
        calls, roles, names, nested = events.calls, events.roles, events.names, self.nested
        shapes, describe = Describer._shapes, self.describe
        type_names, item_sizes = Describer._names, Describer._sizes
        nodes = events.nodes
        for index in range(len(ids), len(events.tensors)):
            # unpacked in RawTensor's order (events.TENSOR_*): half the cost of reading
            # each field by its index, for every tensor
            number, version, shape, dtype, device, requires_grad, call, seq, _, _, _ = \
                events.tensors[index]
            node_id = f"tensor:{number}@v{version}"
            ids.append(node_id)
            plain, label = shapes.get(shape) or describe.shape_and_label(shape)
            if call >= 0:
                producer = calls[call]
                parent, depth = producer.node_id, producer.depth + 1
            else:
                parent, depth = None, 0
            attrs = {
                "kind": "tensor", "label": label, "parent": parent, "depth": depth, "seq": seq,
                "shape": plain, "dtype": type_names.get(dtype) or describe.name(dtype),
                "device": type_names.get(device) or describe.name(device),
                "requires_grad": requires_grad, "role": roles.get(index, "intermediate"),
                "version": version,
            }
            if index in names:
                attrs["name"] = names[index]
            if index in nested:
                attrs["nested"] = True
            else:  # describe.nbytes, inline: this runs for every tensor
                attrs["bytes"] = prod(plain) * (item_sizes.get(dtype) or describe.item_size(dtype))
            nodes.append((node_id, attrs))

    def _name_ops(self) -> None:
        events, ids, tensor_ids = self.events, self.op_ids, self.tensor_ids
        calls, t0, edges, nodes = events.calls, events.t0, events.edges, events.nodes
        shapes, describe, type_names = Describer._shapes, self.describe, Describer._names
        all_tensors = ALL_TENSORS
        first = len(ids)
        for index in range(first, len(events.ops)):
            # unpacked in RawOp's order (events.OP_*), as the tensors above
            (name, call, seq, t_start, t_end, refs, args, kwargs, shape, dtype, grad_fn,
             _, t_edges, func) = events.ops[index]
            node_id = f"op:{name}#{index}"
            ids.append(node_id)
            owner = calls[call]
            attrs = {
                "kind": "op", "label": name, "parent": owner.node_id, "depth": owner.depth + 1,
                "seq": seq, "name": name, "grad_fn": grad_fn,
                # by identity: an argument's own == may not give a bool (a NumPy array's);
                # the usual op's arguments are a shared tuple of tensors only
                "args": op_args_text(name, func, args, kwargs)
                if kwargs or (args is not all_tensors[len(args)] if len(args) < SHARED_COUNTS
                              else any(map(is_not, args, repeat(TENSOR)))) else "",
                "t_start_ns": t_start - t0, "t_end_ns": t_end - t0,
                "shape": (shapes.get(shape) or describe.shape_and_label(shape))[0],
                "dtype": type_names.get(dtype) or describe.name(dtype),
            }
            nodes.append((node_id, attrs))
            t_ns = t_edges - t0
            # one edge per distinct source (a ref names one source, and its kind follows)
            distinct = refs if len(refs) < 2 else dict.fromkeys(refs)
            for ref in distinct:
                seq += 1
                if type(ref) is str:
                    edges.append((ref, node_id, {"kind": "param", "seq": seq, "t_ns": t_ns}))
                else:
                    edges.append((ids[ref] if ref >= 0 else tensor_ids[~ref], node_id,
                                  {"kind": "flow", "seq": seq, "t_ns": t_ns}))
            if len(distinct) < len(refs):  # a source given more than once (x * x, h as q, k, v)
                _note_positions(edges[-len(distinct):], refs)
        if self.op_costs is not None and first < len(ids):  # in one pass, after the loop
            self.op_costs(first, [attrs for _, attrs in nodes[first - len(ids):]])

    def _name_boundary_edges(self) -> None:
        events, ops, tensors = self.events, self.op_ids, self.tensor_ids
        edges, ref_id, t0 = events.edges, self.ref_id, events.t0
        for source, target, seq, t in events.boundary_edges:
            # inline for the usual edge, op -> tensor: this runs for every tensor node
            if type(source) is int and source >= 0 and type(target) is int and target < 0:
                edges.append((ops[source], tensors[~target],
                              {"kind": "flow", "seq": seq, "t_ns": t - t0}))
            else:  # a parameter only where a model returns it as it is
                edges.append((ref_id(source), ref_id(target),
                              {"kind": "param" if type(source) is str else "flow", "seq": seq,
                               "t_ns": t - t0}))
        events.boundary_edges.clear()

    def _name_call_ends(self) -> None:
        """The calls' ``inputs`` and ``outputs`` (inline for the usual single tensor: this
        runs for every call)."""
        calls, tensor_ids, ids_of = self.events.calls, self.tensor_ids, self._ids_of
        for index in range(self._named_calls, len(calls)):
            call = calls[index]
            attrs = call.attrs
            # the two ends written out rather than looped over: a loop costs more here
            refs = call.inputs
            ref = refs[0] if len(refs) == 1 else None
            attrs["inputs"] = (tensor_ids[~ref],) if type(ref) is int and ref < 0 \
                else ids_of(refs)
            refs = call.outputs
            ref = refs[0] if len(refs) == 1 else None
            attrs["outputs"] = (tensor_ids[~ref],) if type(ref) is int and ref < 0 \
                else ids_of(refs)
        self._named_calls = len(calls)

    def _ids_of(self, refs: Sequence[Ref]) -> tuple[str, ...]:
        """The distinct node ids ``refs`` name, in order."""
        return tuple(dict.fromkeys([self.ref_id(ref) for ref in refs]))

    def param_nodes(self) -> list[tuple[str, Attrs]]:
        """The param nodes of the parameters and buffers used so far, each described as it is
        now, under the first call of its module (or of the call that first used it)."""
        events, table, describe = self.events, self.table, self.describe
        calls, first_call, owners, buffers = events.calls, self.first_call, table.tensor_owner, \
            table.buffers
        # the describer's tables inline, as for the tensors: this runs for every parameter
        shapes, type_names, item_sizes = Describer._shapes, Describer._names, Describer._sizes
        found = []
        for node_id, (first_user, seq, shape, dtype, requires_grad) in events.params.items():
            owner = first_call.get(owners[node_id], first_user)
            parent = calls[owner] if owner >= 0 else None
            if parent is not None and not parent.node_id:
                continue  # first used by a forward still running: shown once it ends
            qualname = node_id.removeprefix("param:")
            plain = (shapes.get(shape) or describe.shape_and_label(shape))[0]
            found.append((node_id, {
                "kind": "param", "label": qualname,
                "parent": parent.node_id if parent else None,
                "depth": parent.depth + 1 if parent else 0, "seq": seq, "qualname": qualname,
                "shape": plain, "dtype": type_names.get(dtype) or describe.name(dtype),
                "requires_grad": requires_grad, "buffer": node_id in buffers,
                "bytes": prod(plain) * (item_sizes.get(dtype) or describe.item_size(dtype)),
            }))
        return found


def _note_positions(edges: list, refs: Sequence) -> None:
    """Give each of an op's ``edges`` (one per distinct source of ``refs``, in order of first
    use) the argument positions its source was given at (``positions``): the edge of a
    tensor given as query, key and value stands for all three.

    >>> edges = [("h", "op", {}), ("w", "op", {})]
    >>> _note_positions(edges, [0, 0, "w", 0])
    >>> [attrs["positions"] for *_, attrs in edges]
    [(0, 1, 3), (2,)]
    """
    found: dict = {}
    for position, ref in enumerate(refs):
        found.setdefault(ref, []).append(position)
    for (*_, attrs), places in zip(edges, found.values()):
        attrs["positions"] = tuple(places)
