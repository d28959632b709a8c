"""The least a Python recorder does that returns torchgraphrec's own graph: ``floor:schema``.

``floor:graph`` (:mod:`floorgraph`) returns a true graph, but not the one the schema asks
for: its ids are ints and its nodes carry a few attributes. This floor returns the graph in
the schema, with every attribute the schema requires of every node and edge
(``torchgraphrec.validate`` accepts it) and the recorder's own node ids, so that on the
benchmark's models its nodes, their required attributes and its edges are the recorder's
(``tests/test_benchmarks.py``). It notes in the forward what those need, each fact in its
cheapest form, and builds the graph in one pass at the end:

* what ``floor:graph`` notes (ops and their producers by id, weak reference and version, in
  place changes, arguments handed back, its own time taken off, call boundaries);
* every node's observation number, every call's depth, training flag, inputs and outputs,
  each tensor node's version, device, ``requires_grad`` and role, each op's non-tensor
  arguments and autograd node;
* at the end: call indices, settings (``extra_repr()`` once per module), parameter counts,
  labels, text ids, dtype names and plain shapes, an op's argument text (torchgraphrec's own
  function, cached per arguments as there), the param nodes.

None of the optional attributes (costs, times in ms, bytes, names of inputs) and none of the
recorder's care (nested tensors, DTensors, lazy modules, fast paths, failures, user modes,
a second forward): a floor, not a recorder.
"""

from __future__ import annotations

import gc
import time
import weakref
from typing import Any, Callable, Optional

import networkx as nx
import torch

from floorgraph import global_hooks
from torchgraphrec._torch import call_kwargs, current_frame, give_call_kwargs, \
    global_pre_hook_takes_kwargs_by_id, take_call_kwargs
from torchgraphrec.capture.opnames import TENSOR, op_args_text, op_name_of
from torchgraphrec.capture.structures import flatten_tensors, input_names, output_names
from torchgraphrec.schema import SCHEMA_VERSION

__all__ = ["floor_schema"]

_Tensor = torch.Tensor
_now = time.perf_counter_ns
_ref = weakref.ref
_SEQUENCES = (list, tuple)
_NAMES: dict[Any, str] = {}  # dtype or device -> its name


def _name(value: Any) -> str:
    name = _NAMES.get(value)
    if name is None:
        name = _NAMES[value] = str(value).replace("torch.", "")
    return name


class _Model:
    """One walk over the model: each module's index, qualname, type, parent and own
    parameters; each parameter's and buffer's name and owner."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.index: dict[int, int] = {}
        self.modules: list[torch.nn.Module] = []
        self.qualnames: list[str] = []
        self.parents: list[int] = []
        self.params: dict[int, tuple[str, int, bool]] = {}  # id -> (node id, owner, buffer)
        self.owned: list[tuple[int, torch.Tensor]] = []  # (owner, parameter)
        by_qualname: dict[str, int] = {}
        for qualname, module in model.named_modules():
            self.index[id(module)] = by_qualname[qualname] = len(self.modules)
            self.parents.append(by_qualname[qualname.rpartition(".")[0]] if qualname else -1)
            self.qualnames.append(qualname)
            self.modules.append(module)
            prefix = "param:" + qualname + "." if qualname else "param:"
            owner = len(self.modules) - 1
            for buffer, slots in ((False, module._parameters), (True, module._buffers)):
                for slot, tensor in slots.items():
                    if tensor is not None and id(tensor) not in self.params:
                        self.params[id(tensor)] = (prefix + slot, owner, buffer)
                        if not buffer:
                            self.owned.append((owner, tensor))

    def totals(self) -> list[int]:
        """Each module's parameter count, its submodules' included."""
        counts = [0] * len(self.modules)
        for owner, param in self.owned:
            counts[owner] += param.numel()
        for index in range(len(counts) - 1, 0, -1):
            counts[self.parents[index]] += counts[index]
        return counts


class _SchemaFloor(torch.overrides.TorchFunctionMode):
    """The mode and the hooks, appending plain tuples. A ref is an op's index (``>= 0``),
    ``~index`` of a tensor node, or a param's node id."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = _Model(model)
        self.current: dict[int, tuple] = {}  # id -> (weak ref, version, ref, number)
        # [module, parent, depth, seq, start, end, training, inputs, outputs]
        self.calls: list[list] = []
        # (number, version, shape, dtype, device, requires_grad, call, seq)
        self.tensors: list[tuple] = []
        self.roles: dict[int, str] = {}  # tensor index -> its role, where not intermediate
        self.names: dict[int, str] = {}  # tensor index -> the name of an input or output
        self.params: dict[str, tuple[int, int, torch.Tensor]] = {}  # id -> (call, seq, param)
        # (name, call, seq, start, end, refs, args, kwargs, shape, dtype, grad_fn, func)
        self.ops: list[tuple] = []
        self.flows: list[tuple[int, int, int, int]] = []  # (op, ~tensor, seq, t)
        self.stack: list[int] = []
        self.op_names: dict[Any, str] = {}
        self.seq = self.numbers = self.spent = 0
        self.t0 = _now()
        self.quiet = torch._C.DisableTorchFunction()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        entered = _now()
        kwargs = kwargs or {}
        name = self.op_names.get(func)
        if name is None:
            name = self.op_names[func] = op_name_of(func)
        if not name:
            self.spent += _now() - entered
            return func(*args, **kwargs)
        inputs: list = []
        plain: list = []
        for value in args:
            if isinstance(value, _Tensor):
                inputs.append(value)
                plain.append(TENSOR)
            elif type(value) in _SEQUENCES and any(isinstance(v, _Tensor) for v in value):
                inputs += [v for v in value if isinstance(v, _Tensor)]
                plain.append(tuple(TENSOR if isinstance(v, _Tensor) else v for v in value))
            else:
                plain.append(value)
        given = kwargs
        if any(isinstance(v, _Tensor) for v in kwargs.values()):
            inputs += [v for v in kwargs.values() if isinstance(v, _Tensor)]
            given = {k: TENSOR if isinstance(v, _Tensor) else v for k, v in kwargs.items()}
        versions = [a._version for a in inputs]
        start = _now()
        self.spent += start - entered
        out = func(*args, **kwargs)
        end = _now()
        self._op(name, func, inputs, versions, tuple(plain), given, out, start - self.spent,
                 end - self.spent)
        self.spent += _now() - end
        return out

    def _op(self, name: str, func: Any, inputs: list, versions: list, plain: tuple,
            given: dict, out: Any, start: int, end: int) -> None:
        changed = [a for a, v in zip(inputs, versions) if a._version != v]
        if isinstance(out, _Tensor):
            if not changed and any(tensor is out for tensor in inputs):
                return  # an argument handed back as it was: no op
            results = [out]
        elif isinstance(out, _SEQUENCES):
            results = [o for o in out if isinstance(o, _Tensor)]
        else:
            results = []
        if not results and not changed:
            return
        call = self.stack[-1]
        refs = [self._producer(a, v, call) for a, v in zip(inputs, versions)]
        index = len(self.ops)
        first = results[0] if results else changed[0]
        grad_fn = first.grad_fn
        seq = self.seq + 1
        self.seq = seq + len(refs)
        self.ops.append((name, call, seq, start, end, refs, plain, given, first.shape,
                         first.dtype, None if grad_fn is None else type(grad_fn).__name__,
                         func))
        current = self.current
        for tensor in changed:
            entry = current.get(id(tensor))
            current[id(tensor)] = (_ref(tensor), tensor._version, index,
                                   entry[3] if entry is not None else None)
        for tensor in results:
            entry = current.get(id(tensor))
            if entry is None or entry[2] != index:  # not the argument it changed in place
                current[id(tensor)] = (_ref(tensor), tensor._version, index, None)

    def _producer(self, tensor: _Tensor, version: int, call: int, role: str = "constant") -> Any:
        entry = self.current.get(id(tensor))
        if entry is not None and entry[1] == version and entry[0]() is tensor:
            return entry[2]
        param = self.model.params.get(id(tensor))
        if param is not None:
            node = param[0]
            if node not in self.params:
                self.seq += 1
                self.params[node] = (call, self.seq, tensor)
            self.current[id(tensor)] = (_ref(tensor), version, node, None)
            return node
        return self._tensor_node(tensor, version, call, role, None, None)

    def _tensor_node(self, tensor: _Tensor, version: int, call: int, role: Optional[str],
                     number: Optional[int], op: Optional[int]) -> int:
        if number is None:
            number = self.numbers
            self.numbers += 1
        index = len(self.tensors)
        self.seq += 1
        self.tensors.append((number, version, tensor.shape, tensor.dtype, tensor.device,
                             tensor.requires_grad, call, self.seq))
        if role is not None:
            self.roles[index] = role
        if op is not None:
            self.seq += 1
            self.flows.append((op, ~index, self.seq, _now() - self.spent))
        self.current[id(tensor)] = (_ref(tensor), version, ~index, number)
        return ~index

    def _boundary(self, tensor: _Tensor, call: int, role: Optional[str]) -> Any:
        """A value at a call's boundary: an op's result becomes a tensor node fed by it."""
        version = tensor._version
        producer = self._producer(tensor, version, call, role)
        if type(producer) is not int or producer < 0:
            return producer
        return self._tensor_node(tensor, version, self.ops[producer][1], None,
                                 self.current[id(tensor)][3], producer)

    def pre(self, module: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None) -> None:
        entered = _now()
        if kwargs is None:
            kwargs = call_kwargs(current_frame())
        stack = self.stack
        parent = stack[-1] if stack else -1
        with self.quiet:
            if parent < 0:  # the model's inputs, named by the parameters they were bound to
                inputs = []
                for name, tensor in input_names(module.forward, args, kwargs):
                    inputs.append(self._boundary(tensor, parent, "input"))
                    if self.roles.get(~inputs[-1]) == "input":
                        self.names.setdefault(~inputs[-1], name)
            elif not kwargs and len(args) == 1 and isinstance(args[0], _Tensor):
                inputs = [self._boundary(args[0], parent, "constant")]
            else:
                inputs = [self._boundary(x, parent, "constant")
                          for x in flatten_tensors((args, kwargs))]
        self.seq += 1
        stack.append(len(self.calls))
        self.calls.append([module, parent, len(stack) - 1, self.seq, entered - self.spent, 0,
                           module.training, inputs, ()])
        self.spent += _now() - entered

    def post(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        entered = _now()
        index = self.stack.pop()
        call = self.calls[index]
        call[5] = entered - self.spent
        with self.quiet:
            if self.stack:
                call[8] = [self._boundary(output, index, "constant")] \
                    if isinstance(output, _Tensor) else \
                    [self._boundary(x, index, "constant") for x in flatten_tensors(output)]
            else:  # the model's outputs, named by their path in what it returned
                call[8] = []
                for name, tensor in output_names(output):
                    ref = self._boundary(tensor, index, "constant")
                    call[8].append(ref)
                    if type(ref) is int and self.roles.get(~ref) in (None, "output"):
                        self.roles[~ref] = "output"
                        self.names.setdefault(~ref, name)
        self.spent += _now() - entered

    def graph(self) -> nx.DiGraph:
        """The records as the schema's nodes and edges, built in one pass."""
        ids, nodes = _call_nodes(self)
        tensor_ids = [f"tensor:{t[0]}@v{max(t[1], 0)}" for t in self.tensors]
        nodes += _tensor_nodes(self, ids, tensor_ids)
        op_ids, op_nodes, edges = _op_nodes(self, ids, tensor_ids)
        nodes += op_nodes
        nodes += _param_nodes(self, ids)
        for op, target, seq, t in self.flows:
            edges.append((op_ids[op], tensor_ids[~target],
                          {"kind": "flow", "seq": seq, "t_ns": t - self.t0}))
        for call, (_, attrs) in zip(self.calls, nodes):
            attrs["inputs"] = _ids_of(call[7], op_ids, tensor_ids)
            attrs["outputs"] = _ids_of(call[8], op_ids, tensor_ids)
        graph = nx.DiGraph(schema_version=SCHEMA_VERSION, model=type(self.model.modules[0]).__qualname__,
                           torch_version=str(torch.__version__), ops="torch")
        graph._node.update(nodes)
        succ, pred = graph._succ, graph._pred
        succ.update({node: {} for node, _ in nodes})
        pred.update({node: {} for node, _ in nodes})
        for source, target, attrs in edges:
            if target not in succ[source]:
                succ[source][target] = pred[target][source] = attrs
        return graph


def _ids_of(refs: list, op_ids: list, tensor_ids: list) -> tuple:
    return tuple(dict.fromkeys(ref if type(ref) is str else
                               tensor_ids[~ref] if ref < 0 else op_ids[ref] for ref in refs))


def _call_nodes(floor: _SchemaFloor) -> tuple[list[str], list[tuple[str, dict]]]:
    model, t0 = floor.model, floor.t0
    counts: dict[int, int] = {}
    settings: dict[int, str] = {}
    totals = model.totals()
    ids: list[str] = []
    nodes = []
    for module, parent, depth, seq, start, end, training, _, _ in floor.calls:
        index = model.index[id(module)]
        call_index = counts.get(index, 0)
        counts[index] = call_index + 1
        if not call_index:
            settings[index] = " ".join(str(module.extra_repr()).split())
        qualname, kind = model.qualnames[index], type(module).__name__
        ids.append(f"layer:{qualname}#{call_index}")
        nodes.append((ids[-1], {
            "kind": "layer", "label": f"{qualname}: {kind}" if qualname else kind,
            "parent": ids[parent] if parent >= 0 else None, "depth": depth, "seq": seq,
            "qualname": qualname, "type": kind, "call_index": call_index,
            "t_start_ns": start - t0, "t_end_ns": end - t0, "num_params": totals[index],
            "settings": settings[index], "training": training}))
    return ids, nodes


def _tensor_nodes(floor: _SchemaFloor, ids: list[str],
                  tensor_ids: list[str]) -> list[tuple[str, dict]]:
    calls, roles, names = floor.calls, floor.roles, floor.names
    nodes = []
    for index, (node_id, (_, version, shape, dtype, device, requires_grad, call, seq)) in \
            enumerate(zip(tensor_ids, floor.tensors)):
        plain = tuple(shape)
        nodes.append((node_id, {
            "kind": "tensor", "label": str(plain), "parent": ids[call] if call >= 0 else None,
            "depth": calls[call][2] + 1 if call >= 0 else 0, "seq": seq, "shape": plain,
            "dtype": _name(dtype), "device": _name(device), "requires_grad": requires_grad,
            "role": roles.get(index, "intermediate"), "version": max(version, 0)}))
        if index in names:
            nodes[-1][1]["name"] = names[index]
    return nodes


def _op_nodes(floor: _SchemaFloor, ids: list[str], tensor_ids: list[str]) -> tuple:
    calls, t0 = floor.calls, floor.t0
    op_ids: list[str] = []
    nodes, edges = [], []
    for index, (name, call, seq, start, end, refs, args, kwargs, shape, dtype, grad_fn,
                func) in enumerate(floor.ops):
        node_id = f"op:{name}#{index}"
        op_ids.append(node_id)
        nodes.append((node_id, {
            "kind": "op", "label": name, "parent": ids[call], "depth": calls[call][2] + 1,
            "seq": seq, "name": name, "grad_fn": grad_fn,
            "args": op_args_text(name, func, args, kwargs)
            if kwargs or any(a is not TENSOR for a in args) else "",
            "t_start_ns": start - t0, "t_end_ns": end - t0, "shape": tuple(shape),
            "dtype": _name(dtype)}))
        for ref in dict.fromkeys(refs):
            seq += 1
            source = ref if type(ref) is str else \
                tensor_ids[~ref] if ref < 0 else op_ids[ref]
            edges.append((source, node_id, {"kind": "param" if type(ref) is str else "flow",
                                            "seq": seq, "t_ns": start - t0}))
    return op_ids, nodes, edges


def _param_nodes(floor: _SchemaFloor, ids: list[str]) -> list[tuple[str, dict]]:
    model, calls = floor.model, floor.calls
    first_call: dict[int, int] = {}
    for index, call in enumerate(calls):
        first_call.setdefault(model.index[id(call[0])], index)
    buffers = {node: buffer for node, _, buffer in model.params.values()}
    owners = {node: owner for node, owner, _ in model.params.values()}
    nodes = []
    for node_id, (user, seq, param) in floor.params.items():
        call = first_call.get(owners[node_id], user)
        qualname = node_id[len("param:"):]
        nodes.append((node_id, {
            "kind": "param", "label": qualname, "parent": ids[call], "depth": calls[call][2] + 1,
            "seq": seq, "qualname": qualname, "shape": tuple(param.shape),
            "dtype": _name(param.dtype), "requires_grad": param.requires_grad,
            "buffer": buffers[node_id]}))
    return nodes


def floor_schema(model: torch.nn.Module, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A thunk recording one forward of ``model`` into the schema's graph in the least a
    true recorder does (see the module's docstring); returns the graph."""
    def run() -> nx.DiGraph:
        collecting = gc.isenabled()
        gc.disable()  # as the recorder does: a collection would cost the recording, not it
        try:
            floor = _SchemaFloor(model)
            by_id = global_pre_hook_takes_kwargs_by_id()
            handles = global_hooks(floor.pre, floor.post)
            given = give_call_kwargs(floor.model.modules, handles[0].id) if by_id else []
            try:
                with floor:
                    model(*args, **kwargs)
            finally:
                take_call_kwargs(given, handles[0].id)
                for handle in handles:
                    handle.remove()
            return floor.graph()
        finally:
            if collecting:
                gc.enable()
    return run

