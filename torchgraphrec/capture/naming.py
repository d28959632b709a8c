"""Turning a finished forward's raw records into nodes and edges in the schema's plain values."""

from __future__ import annotations

from typing import Any

from torchgraphrec.capture.events import Attrs, Events, Ref, layer_id
from torchgraphrec.capture.opnames import args_text
from torchgraphrec.capture.tables import ModuleTable

__all__ = ["Namer", "Describer"]


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
    _shapes: dict[Any, tuple[int, ...]] = {}
    _names: dict[Any, str] = {}

    def shape(self, shape: Any) -> tuple[int, ...]:
        """``torch.Size`` (or a tuple) as a plain tuple of int."""
        plain = self._shapes.get(shape)
        if plain is None:
            if len(self._shapes) >= self.LIMIT:
                self._shapes.clear()
            plain = self._shapes[shape] = tuple(int(dim) for dim in shape)
        return plain

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
    :attr:`Events.nodes` and :attr:`Events.edges`.
    """

    def __init__(self, table: ModuleTable, events: Events, nested: set[int]) -> None:
        self.table, self.events, self.nested = table, events, nested
        self.describe = Describer()
        self.tensor_ids: list[str] = []
        self.op_ids: list[str] = []
        self.first_call: dict[int, int] = {}  # module index -> index of its first call
        self._counts: dict[int, int] = {}
        self._named_calls = 0

    def name_pending(self) -> None:
        """Name everything recorded since the last time (the calls first: tensors and ops
        refer to them)."""
        self._name_calls()
        self._name_tensors()
        self._name_ops()
        self._name_boundary_edges()
        events = self.events
        for call in events.calls[self._named_calls:]:
            call.attrs["inputs"] = self._ids(call.inputs)
            call.attrs["outputs"] = self._ids(call.outputs)
        self._named_calls = len(events.calls)

    def ref_id(self, ref: Ref) -> str:
        """The node id a ref names."""
        if type(ref) is str:
            return ref  # type: ignore[return-value]
        if type(ref) is tuple:  # ("call", index), for edges without ops
            return self.events.calls[ref[1]].node_id  # type: ignore[index]
        return self.op_ids[ref] if ref >= 0 else self.tensor_ids[~ref]  # type: ignore[operator]

    def _ids(self, refs: list) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.ref_id(ref) for ref in refs))

    def _name_calls(self) -> None:
        events, table = self.events, self.table
        calls, t0 = events.calls, events.t0
        for index in range(self._named_calls, len(calls)):
            call = calls[index]
            module = call.module
            call_index = self._counts.get(module, 0)
            self._counts[module] = call_index + 1
            self.first_call.setdefault(module, index)
            qualname = table.qualnames[module]
            call.node_id = layer_id(qualname, call_index)
            call.attrs = {
                "kind": "layer", "label": table.labels[module],
                "parent": calls[call.parent].node_id if call.parent >= 0 else None,
                "depth": call.depth, "seq": call.seq, "qualname": qualname,
                "type": table.types[module], "call_index": call_index,
                "t_start_ns": call.t_start - t0, "t_end_ns": call.t_end - t0,
                "num_params": 0, "settings": table.settings(module),
                "training": call.training,
            }

    def _name_tensors(self) -> None:
        events, describe, ids = self.events, self.describe, self.tensor_ids
        calls, roles, names, t0 = events.calls, events.roles, events.names, events.t0
        for index in range(len(ids), len(events.tensors)):
            number, version, shape, dtype, device, requires_grad, call, seq, t, _, _ = \
                events.tensors[index]
            node_id = f"tensor:{number}@v{version}"
            ids.append(node_id)
            plain = describe.shape(shape)
            producer = calls[call] if call >= 0 else None
            attrs = {
                "kind": "tensor", "label": str(plain),
                "parent": producer.node_id if producer else None,
                "depth": producer.depth + 1 if producer else 0, "seq": seq,
                "shape": plain, "dtype": describe.name(dtype), "device": describe.name(device),
                "requires_grad": requires_grad, "role": roles.get(index, "intermediate"),
                "version": version,
            }
            if index in names:
                attrs["name"] = names[index]
            if index in self.nested:
                attrs["nested"] = True
            events.nodes.append((node_id, attrs))

    def _name_ops(self) -> None:
        events, describe, ids = self.events, self.describe, self.op_ids
        calls, t0, edges = events.calls, events.t0, events.edges
        for index in range(len(ids), len(events.ops)):
            (name, call, seq, t_start, t_end, refs, args, kwargs, shape, dtype, grad_fn,
             _, t_edges) = events.ops[index]
            node_id = f"op:{name}#{index}"
            ids.append(node_id)
            owner = calls[call]
            events.nodes.append((node_id, {
                "kind": "op", "label": name, "parent": owner.node_id, "depth": owner.depth + 1,
                "seq": seq, "name": name, "grad_fn": grad_fn, "args": args_text(name, args, kwargs),
                "t_start_ns": t_start - t0, "t_end_ns": t_end - t0,
                "shape": describe.shape(shape), "dtype": describe.name(dtype),
            }))
            t_ns = t_edges - t0
            for offset, source in enumerate(dict.fromkeys(self.ref_id(ref) for ref in refs), 1):
                kind = "param" if source.startswith("param:") else "flow"
                edges.append((source, node_id, {"kind": kind, "seq": seq + offset, "t_ns": t_ns}))

    def _name_boundary_edges(self) -> None:
        events = self.events
        for source, target, seq, t in events.boundary_edges:
            events.edges.append((self.ref_id(source), self.ref_id(target),
                                 {"kind": "flow", "seq": seq, "t_ns": t - events.t0}))
        events.boundary_edges.clear()
