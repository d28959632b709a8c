"""The least a Python recorder does that returns torchgraphrec's own graph: ``floor:schema``.

``floor:graph`` (:mod:`floorgraph`) returns a true graph, but not the one the schema asks
for: its ids are ints and its nodes carry a few attributes. This floor returns the graph in
the schema, with every attribute the schema requires of every node and edge
(``torchgraphrec.validate`` accepts it) and the recorder's own node ids, so that on the
benchmark's models its nodes, their required attributes and its edges are the recorder's
(``tests/test_benchmarks.py``). It notes in the forward what those need, each fact in its
cheapest form, and builds the graph in one pass at the end:

* what ``floor:graph`` notes (ops and their producers by id, weak reference and version, in
  place changes, arguments handed back, its own time taken off, call boundaries), with the
  usual paths of the handler and the hooks inline, and parameters found by their id alone
  (the model keeps them alive; the recorder also follows a parameter or buffer changed in
  place through a view, which none of the benchmark's models does);
* every node's observation number, every call's depth, training flag, inputs and outputs,
  each tensor node's version, device, ``requires_grad`` and role, each op's non-tensor
  arguments and autograd node;
* at the end, in one pass over the records and one into networkx's own dicts: call
  indices, settings (``extra_repr()`` once per module), parameter counts, labels (once per
  module and per shape), text ids, dtype names, an op's argument text (torchgraphrec's own
  function, cached per arguments as there), the param nodes.

None of the optional attributes (costs, times in ms, bytes, an op's shape and dtype; but
the names of the model's inputs and outputs, which the schema requires of them) and none of
the recorder's care (nested tensors, DTensors, lazy modules, fast paths, failures, user
modes, a second forward): a floor, not a recorder. A review made it about 0.9x of the
forward cheaper on MLP-200 than its first version, with the same graph.
"""

from __future__ import annotations

import operator
import time
import weakref
from typing import Any, Callable, Optional

import networkx as nx
import torch

from floorgraph import recorded
from torchgraphrec._torch import call_kwargs, current_frame
from torchgraphrec.capture.opnames import TENSOR, op_args_text, op_name_of
from torchgraphrec.capture.structures import flatten_tensors, input_names, output_names
from torchgraphrec.schema import SCHEMA_VERSION

__all__ = ["floor_schema"]

_Tensor = torch.Tensor
_now = time.perf_counter_ns
_ref = weakref.ref
_SEQUENCES = (list, tuple)
_NAMES: dict[Any, str] = {}  # dtype or device -> its name
_OP_NAMES: dict[Any, str] = {}  # function -> its op name ("" for no op)
_version_of = operator.attrgetter("_version")


def _name(value: Any) -> str:
    name = _NAMES.get(value)
    if name is None:
        name = _NAMES[value] = str(value).replace("torch.", "")
    return name


class _Model:
    """One walk over the model, over its modules' own dicts (no generators): each module's
    index, qualname, parent and own parameters; each parameter's and buffer's node id, owner
    and kind."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.index: dict[int, int] = {}
        self.modules: list[torch.nn.Module] = []
        self.qualnames: list[str] = []
        self.parents: list[int] = []
        self.params: dict[int, tuple[str, int, bool]] = {}  # id -> (node id, owner, buffer)
        self.owned: list[tuple[int, torch.Tensor]] = []  # (owner, parameter)
        index, modules, qualnames, parents = self.index, self.modules, self.qualnames, \
            self.parents
        params, owned = self.params, self.owned
        stack = [("", model, -1)]
        pop, push = stack.pop, stack.append
        while stack:
            qualname, module, parent = pop()
            if id(module) in index:
                continue
            owner = len(modules)
            index[id(module)] = owner
            modules.append(module)
            qualnames.append(qualname)
            parents.append(parent)
            prefix = "param:" + qualname + "." if qualname else "param:"
            for buffer, slots in ((False, module._parameters), (True, module._buffers)):
                for slot, tensor in slots.items():
                    if tensor is not None and id(tensor) not in params:
                        params[id(tensor)] = (prefix + slot, owner, buffer)
                        if not buffer:
                            owned.append((owner, tensor))
            children = module._modules
            if children:
                dot = qualname + "." if qualname else ""
                for name, child in reversed(children.items()):
                    if child is not None:
                        push((dot + name, child, owner))

    def totals(self) -> list[int]:
        """Each module's parameter count, its submodules' included."""
        counts = [0] * len(self.modules)
        for owner, param in self.owned:
            counts[owner] += param.numel()
        parents = self.parents
        for index in range(len(counts) - 1, 0, -1):
            counts[parents[index]] += counts[index]
        return counts


def _split(args: tuple) -> tuple[list, tuple]:
    """An op's tensor arguments, and its arguments with each tensor a mark (the general
    case: some argument is not a tensor)."""
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
    return inputs, tuple(plain)


_EMPTY: dict = {}


class _SchemaFloor(torch.overrides.TorchFunctionMode):
    """The mode and the hooks, appending plain tuples. A ref is an op's index (``>= 0``),
    ``~index`` of a tensor node, or a param's node id. The usual paths are inline."""

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
        # node id -> (call, seq, param, (node id, owner, buffer))
        self.params: dict[str, tuple] = {}
        # (name, call, seq, start, end, refs, args or None, kwargs, -, -, grad_fn, func)
        self.ops: list[tuple] = []
        self.flows: list[tuple[int, int, int, int]] = []  # (op, ~tensor, seq, t)
        self.stack: list[int] = []
        self.seq = self.numbers = self.spent = 0
        self.t0 = _now()
        self.quiet = torch._C.DisableTorchFunction()

    @property
    def modules(self) -> list[torch.nn.Module]:
        """The model's modules, which hand the pre-hook their calls' keyword arguments."""
        return self.model.modules

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: Optional[dict] = None) -> Any:
        entered = _now()
        name = _OP_NAMES.get(func)
        if name is None:
            name = _OP_NAMES[func] = op_name_of(func)
        if not name:
            self.spent += _now() - entered
            return func(*args, **kwargs) if kwargs else func(*args)
        for value in args:
            if not isinstance(value, _Tensor):
                inputs, plain = _split(args)
                break
        else:  # the usual op: tensors only, no text
            inputs, plain = args, None
        if kwargs:
            given = kwargs
            for value in kwargs.values():
                if isinstance(value, _Tensor):
                    inputs = [*inputs, *[v for v in kwargs.values() if isinstance(v, _Tensor)]]
                    given = {k: TENSOR if isinstance(v, _Tensor) else v
                             for k, v in kwargs.items()}
                    break
            if plain is None:
                plain = (TENSOR,) * len(args)
        else:
            given = kwargs = _EMPTY
        versions = list(map(_version_of, inputs))
        start = _now()
        spent = self.spent = self.spent + start - entered
        out = func(*args, **kwargs)
        end = _now()
        changed = None
        if versions:
            after = list(map(_version_of, inputs))
            if after != versions:
                changed = [a for a, v, w in zip(inputs, versions, after) if v != w]
        if isinstance(out, _Tensor):
            if not changed:
                for tensor in inputs:
                    if tensor is out:  # an argument handed back as it was: no op
                        self.spent = spent + _now() - end
                        return out
            results = (out,)
        elif isinstance(out, _SEQUENCES):
            results = [o for o in out if isinstance(o, _Tensor)]
        else:
            results = ()
        if not results and not changed:
            self.spent = spent + _now() - end
            return out
        call = self.stack[-1]
        current = self.current
        refs = []
        for tensor, version in zip(inputs, versions):
            entry = current.get(id(tensor))
            if entry is not None and entry[1] == version and entry[0]() is tensor:
                refs.append(entry[2])
                continue
            param = self.model.params.get(id(tensor))
            if param is None:
                refs.append(self._tensor_node(tensor, version, call, "constant", None, None, 0))
                continue
            node = param[0]  # by its id alone: a param is alive as long as the model
            if node not in self.params:
                self.seq += 1
                self.params[node] = (call, self.seq, tensor, param)
            refs.append(node)
        ops = self.ops
        index = len(ops)
        first = results[0] if results else changed[0]
        grad_fn = first.grad_fn
        seq = self.seq + 1
        self.seq = seq + len(refs)
        ops.append((name, call, seq, start - spent, end - spent, refs, plain, given,
                    None, None,
                    None if grad_fn is None else type(grad_fn).__name__, func))
        if changed:
            for tensor in changed:
                entry = current.get(id(tensor))
                current[id(tensor)] = (_ref(tensor), tensor._version, index,
                                       entry[3] if entry is not None else None)
            for tensor in results:
                entry = current.get(id(tensor))
                if entry is None or entry[2] != index:  # not the argument it changed
                    current[id(tensor)] = (_ref(tensor), tensor._version, index, None)
        else:
            for tensor in results:
                current[id(tensor)] = (_ref(tensor), tensor._version, index, None)
        self.spent = spent + _now() - end
        return out

    def _producer(self, tensor: _Tensor, version: int, call: int, role: str = "constant") -> Any:
        entry = self.current.get(id(tensor))
        if entry is not None and entry[1] == version and entry[0]() is tensor:
            return entry[2]
        param = self.model.params.get(id(tensor))
        if param is not None:  # by its id alone: a param is alive as long as the model
            node = param[0]
            if node not in self.params:
                self.seq += 1
                self.params[node] = (call, self.seq, tensor, param)
            return node
        return self._tensor_node(tensor, version, call, role, None, None, 0)

    def _tensor_node(self, tensor: _Tensor, version: int, call: int, role: Optional[str],
                     number: Optional[int], op: Optional[int], at: int) -> int:
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
            self.flows.append((op, ~index, self.seq, at))
        self.current[id(tensor)] = (_ref(tensor), version, ~index, number)
        return ~index

    def _boundary(self, tensor: _Tensor, call: int, role: Optional[str], at: int) -> Any:
        """A value at a call's boundary: an op's result becomes a tensor node fed by it
        (read with torch functions off); ``at`` is the hook's time."""
        version = tensor._version
        entry = self.current.get(id(tensor))
        if entry is not None and entry[1] == version and entry[0]() is tensor:
            producer = entry[2]
        else:
            producer = self._producer(tensor, version, call, role)
        if type(producer) is not int or producer < 0:
            return producer
        return self._tensor_node(tensor, version, self.ops[producer][1], None,
                                 self.current[id(tensor)][3], producer, at)

    def pre(self, module: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None) -> None:
        entered = _now()
        if kwargs is None:
            kwargs = call_kwargs(current_frame())
        stack = self.stack
        at = entered - self.spent
        if not stack:  # the model's inputs, named by the parameters they were bound to
            parent = -1
            with self.quiet:
                inputs = []
                for name, tensor in input_names(module.forward, args, kwargs):
                    inputs.append(self._boundary(tensor, parent, "input", at))
                    if self.roles.get(~inputs[-1]) == "input":
                        self.names.setdefault(~inputs[-1], name)
        else:
            parent = stack[-1]
            if not kwargs and len(args) == 1 and isinstance(args[0], _Tensor):
                tensor = args[0]
                entry = self.current.get(id(tensor))
                with self.quiet:
                    if entry is not None and entry[0]() is tensor and \
                            entry[1] == tensor._version and \
                            (type(entry[2]) is str or entry[2] < 0):
                        inputs = [entry[2]]  # the usual: a value already a node
                    else:
                        inputs = [self._boundary(tensor, parent, "constant", at)]
            else:
                with self.quiet:
                    inputs = [self._boundary(x, parent, "constant", at)
                              for x in flatten_tensors((args, kwargs))]
        self.seq += 1
        stack.append(len(self.calls))
        self.calls.append([module, parent, len(stack) - 1, self.seq, at, 0,
                           module.training, inputs, ()])
        self.spent += _now() - entered

    def post(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        entered = _now()
        index = self.stack.pop()
        call = self.calls[index]
        at = call[5] = entered - self.spent
        if self.stack:
            if isinstance(output, _Tensor):
                entry = self.current.get(id(output))
                with self.quiet:
                    version = output._version
                    if entry is not None and entry[1] == version and entry[0]() is output \
                            and type(entry[2]) is int and entry[2] >= 0:
                        # the usual: an op's result becomes a tensor node fed by the op
                        op = entry[2]
                        number = entry[3]
                        if number is None:
                            number = self.numbers
                            self.numbers += 1
                        tensors = self.tensors
                        node = ~len(tensors)
                        seq = self.seq + 1
                        self.seq = seq + 1
                        tensors.append((number, version, output.shape, output.dtype,
                                        output.device, output.requires_grad,
                                        self.ops[op][1], seq))
                        self.flows.append((op, node, seq + 1, at))
                        self.current[id(output)] = (entry[0], version, node, number)
                        call[8] = [node]
                    else:
                        call[8] = [self._boundary(output, index, "constant", at)]
            else:
                with self.quiet:
                    call[8] = [self._boundary(x, index, "constant", at)
                               for x in flatten_tensors(output)]
        else:  # the model's outputs, named by their path in what it returned
            call[8] = []
            with self.quiet:
                for name, tensor in output_names(output):
                    ref = self._boundary(tensor, index, "constant", at)
                    call[8].append(ref)
                    if type(ref) is int and self.roles.get(~ref) in (None, "output"):
                        self.roles[~ref] = "output"
                        self.names.setdefault(~ref, name)
        self.spent += _now() - entered

    def graph(self) -> nx.DiGraph:
        """The records as the schema's nodes and edges, built in one pass over the records
        and one over networkx's own dicts (each edge written once: edges are unique by
        construction, an op's sources deduplicated and each flow to a new tensor node)."""
        t0 = self.t0
        tensor_ids = [f"tensor:{t[0]}@v{max(t[1], 0)}" for t in self.tensors]
        op_ids = [f"op:{op[0]}#{index}" for index, op in enumerate(self.ops)]
        ids, nodes, first_call = _call_nodes(self, op_ids, tensor_ids)
        nodes += _tensor_nodes(self, ids, tensor_ids)
        nodes += _op_nodes(self, ids, op_ids)
        nodes += _param_nodes(self, ids, first_call)
        graph = nx.DiGraph(schema_version=SCHEMA_VERSION,
                           model=type(self.model.modules[0]).__qualname__,
                           torch_version=str(torch.__version__), ops="torch")
        graph._node.update(nodes)
        succ, pred = graph._succ, graph._pred
        succ.update({node: {} for node, _ in nodes})
        pred.update({node: {} for node, _ in nodes})
        for node_id, op in zip(op_ids, self.ops):
            seq, refs = op[2], op[5]
            t = op[3] - t0
            into = pred[node_id]
            for ref in (refs if len(refs) < 2 else dict.fromkeys(refs)):
                seq += 1
                if type(ref) is str:
                    succ[ref][node_id] = into[ref] = {"kind": "param", "seq": seq, "t_ns": t}
                else:
                    source = tensor_ids[~ref] if ref < 0 else op_ids[ref]
                    succ[source][node_id] = into[source] = \
                        {"kind": "flow", "seq": seq, "t_ns": t}
        for op, target, seq, t in self.flows:
            source, target = op_ids[op], tensor_ids[~target]
            succ[source][target] = pred[target][source] = \
                {"kind": "flow", "seq": seq, "t_ns": t - t0}
        return graph


def _ids_of(refs: list, op_ids: list, tensor_ids: list) -> tuple:
    if len(refs) == 1:
        ref = refs[0]
        return (ref if type(ref) is str else tensor_ids[~ref] if ref < 0 else op_ids[ref],)
    return tuple(dict.fromkeys(ref if type(ref) is str else
                               tensor_ids[~ref] if ref < 0 else op_ids[ref] for ref in refs))


def _call_nodes(floor: _SchemaFloor, op_ids: list, tensor_ids: list) -> tuple:
    model, t0 = floor.model, floor.t0
    index_of, qualnames = model.index, model.qualnames
    counts: dict[int, int] = {}
    settings: dict[int, tuple] = {}  # module index -> its attributes
    first_call: dict[int, int] = {}  # module index -> its first call's position
    totals = model.totals()
    ids: list[str] = []
    nodes = []
    for position, (module, parent, depth, seq, start, end, training, inputs, outputs) in \
            enumerate(floor.calls):
        index = index_of[id(module)]
        call_index = counts.get(index, 0)
        counts[index] = call_index + 1
        if call_index:
            qualname, kind, label, setting = settings[index]
        else:  # the module's own attributes, once
            qualname, kind = qualnames[index], type(module).__name__
            label = f"{qualname}: {kind}" if qualname else kind
            setting = " ".join(str(module.extra_repr()).split())
            settings[index] = (qualname, kind, label, setting)
            first_call[index] = position
        node_id = f"layer:{qualname}#{call_index}"
        ids.append(node_id)
        nodes.append((node_id, {
            "kind": "layer", "label": label,
            "parent": ids[parent] if parent >= 0 else None, "depth": depth, "seq": seq,
            "qualname": qualname, "type": kind, "call_index": call_index,
            "t_start_ns": start - t0, "t_end_ns": end - t0, "num_params": totals[index],
            "settings": setting, "training": training,
            "inputs": _ids_of(inputs, op_ids, tensor_ids),
            "outputs": _ids_of(outputs, op_ids, tensor_ids)}))
    return ids, nodes, first_call


def _tensor_nodes(floor: _SchemaFloor, ids: list[str],
                  tensor_ids: list[str]) -> list[tuple[str, dict]]:
    calls, roles = floor.calls, floor.roles
    depths = [call[2] + 1 for call in calls]
    labels: dict = {}  # shape -> (plain shape, its text): most tensors share a few shapes
    nodes = []
    for index, (node_id, (_, version, shape, dtype, device, requires_grad, call, seq)) in \
            enumerate(zip(tensor_ids, floor.tensors)):
        label = labels.get(shape)
        if label is None:
            plain = tuple(shape)
            label = labels[shape] = (plain, str(plain))
        nodes.append((node_id, {
            "kind": "tensor", "label": label[1], "parent": ids[call] if call >= 0 else None,
            "depth": depths[call] if call >= 0 else 0, "seq": seq, "shape": label[0],
            "dtype": _name(dtype), "device": _name(device), "requires_grad": requires_grad,
            "role": roles.get(index, "intermediate"), "version": max(version, 0)}))
    for index, name in floor.names.items():
        nodes[index][1]["name"] = name
    return nodes


def _op_nodes(floor: _SchemaFloor, ids: list[str], op_ids: list[str]) -> list:
    calls, t0 = floor.calls, floor.t0
    depths = [call[2] + 1 for call in calls]
    nodes = []
    for node_id, (name, call, seq, start, end, _, args, kwargs, shape, dtype, grad_fn,
                  func) in zip(op_ids, floor.ops):
        nodes.append((node_id, {
            "kind": "op", "label": name, "parent": ids[call], "depth": depths[call],
            "seq": seq, "name": name, "grad_fn": grad_fn,
            "args": "" if args is None else op_args_text(name, func, args, kwargs)
            if kwargs or any(a is not TENSOR for a in args) else "",
            "t_start_ns": start - t0, "t_end_ns": end - t0}))
    return nodes


def _param_nodes(floor: _SchemaFloor, ids: list[str],
                 first_call: dict[int, int]) -> list[tuple[str, dict]]:
    calls = floor.calls
    nodes = []
    for node_id, (user, seq, param, (_, owner, buffer)) in floor.params.items():
        call = first_call.get(owner, user)
        qualname = node_id[6:]  # after "param:"
        nodes.append((node_id, {
            "kind": "param", "label": qualname, "parent": ids[call], "depth": calls[call][2] + 1,
            "seq": seq, "qualname": qualname, "shape": tuple(param.shape),
            "dtype": _name(param.dtype), "requires_grad": param.requires_grad,
            "buffer": buffer}))
    return nodes


def floor_schema(model: torch.nn.Module, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A thunk recording one forward of ``model`` into the schema's graph in the least a
    true recorder does (see the module's docstring); returns the graph."""
    return lambda: recorded(_SchemaFloor, model, args, kwargs)
