"""The least a Python recorder does that returns a true graph: ``floor:graph``.

What :mod:`tools`' ``floor:noting`` does (global module hooks and a torch-function mode
appending what they see), plus only what a true graph of the schema's kinds cannot do
without, each in its cheapest form, inline:

* an op's tensor arguments' versions read before and after it (a change in place makes
  the op the tensor's producer), and an argument handed back as it was made by no op;
* each argument's producer found by ``id`` and told from a reused ``id`` by a weak
  reference and the version; parameters and buffers by one table of their ids;
* a call's keyword arguments, read from ``Module._call_impl``'s frame as torchgraphrec
  reads them (a global pre-hook is not given them); the hooks' reads of tensors with torch
  functions off (the mode would see them as ops) and the collector paused, as there;
* an op's start and end with the recorder's own work taken off (two clock reads more);
* an op's result crossing a call's boundary becomes a tensor node fed by the op (the
  values between layers, which the drawings show);
* a ``networkx.DiGraph`` built at the end in one pass over networkx's own dicts: kind on
  every node, the call's name or the op's function on calls
  and ops, parent and shape and dtype (as torch gives them) where they apply, times on
  ops and calls, order on every edge; ints as node ids.

Less than torchgraphrec's schema asks (its ids and values are plain text and tuples; it
counts each module's calls, keeps settings and bytes, saved tensors in grad mode, autograd
nodes), and none of its care (nested tensors, DTensors, lazy modules, failures, user
modes): a floor, not a recorder. On the benchmark's models its ops read the same ops and
params as torchgraphrec's (``tests/test_benchmarks.py``).
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable
from typing import Any, Optional

import networkx as nx
import torch
from torch.nn.modules import module as torch_module

from torchgraphrec._torch import call_kwargs, current_frame, give_call_kwargs, \
    global_pre_hook_takes_kwargs_by_id, take_call_kwargs

__all__ = ["floor_graph", "global_hooks", "graph_counts", "recorded"]

_Tensor = torch.Tensor
_now = time.perf_counter_ns
_ref = weakref.ref
_SEQUENCES = (list, tuple)


def _tensors(values: Any) -> list:
    return [value for value in values if isinstance(value, _Tensor)]


class _Floor(torch.overrides.TorchFunctionMode):
    """The mode and the hooks, sharing the records as attributes of one object. During the
    forward only plain tuples are appended (a node's id and attributes are made after it);
    a producer is an int: an op's index, or ``~index`` of a tensor node or a param's."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        # one walk over the modules, reading their own dicts (named_parameters() and
        # named_buffers() would walk them twice more)
        self.names: dict[int, str] = {}
        self.modules: list[torch.nn.Module] = []
        self.params: dict[int, str] = {}  # id of a parameter or buffer -> its name
        for name, module in model.named_modules():
            self.names[id(module)] = name
            self.modules.append(module)
            prefix = name + "." if name else ""
            for slots in (module._parameters, module._buffers):
                for slot, tensor in slots.items():
                    if tensor is not None and id(tensor) not in self.params:
                        self.params[id(tensor)] = prefix + slot
        self.current: dict[int, tuple] = {}  # id -> (weak ref, version, producer)
        self.ops: list = []  # (func, call, producers, shape, dtype, start, end)
        self.values: list = []  # tensor and param nodes: (shape, dtype, call) or (param,)
        self.flows: list = []  # (op, tensor node): an op's result crossing a call boundary
        self.stack: list[int] = [-1]
        self.calls: list = []  # [module, parent, start, end]
        self.spent = 0
        self.quiet = torch._C.DisableTorchFunction()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        entered = _now()
        inputs = [a for a in args if isinstance(a, _Tensor)]
        if kwargs:
            inputs += [a for a in kwargs.values() if isinstance(a, _Tensor)]
        else:
            kwargs = {}
        for value in args:
            if type(value) in _SEQUENCES:
                inputs += [a for a in value if isinstance(a, _Tensor)]
        versions = [a._version for a in inputs]
        start = _now()
        self.spent += start - entered
        out = func(*args, **kwargs)
        end = _now()
        changed = [a for a, v in zip(inputs, versions) if a._version != v]
        if isinstance(out, _Tensor):
            if not changed:
                for tensor in inputs:
                    if tensor is out:  # an argument handed back as it was: no op
                        self.spent += _now() - end
                        return out
            results = [out]
        elif isinstance(out, _SEQUENCES):  # also torch.return_types (max, topk...)
            results = [o for o in out if isinstance(o, _Tensor)]
        else:
            results = []
        if results or changed:
            current, producer = self.current, self._producer
            index = len(self.ops)
            first = results[0] if results else changed[0]
            reads = [producer(a, v) for a, v in zip(inputs, versions)]
            self.ops.append((func, self.stack[-1], reads, first.shape, first.dtype,
                             start - self.spent, end - self.spent))
            for tensor in results + changed:
                current[id(tensor)] = (_ref(tensor), tensor._version, index)
        self.spent += _now() - end
        return out

    def _producer(self, tensor: _Tensor, version: int) -> int:
        entry = self.current.get(id(tensor))
        if entry is not None and entry[1] == version and entry[0]() is tensor:
            return entry[2]
        index = ~len(self.values)
        param = self.params.pop(id(tensor), None)  # popped: one node per param
        # a param at its first use, else a value nothing recorded made: an input, a constant
        self.values.append((param,) if param is not None else
                           (tensor.shape, tensor.dtype, self.stack[-1]))
        self.current[id(tensor)] = (_ref(tensor), version, index)
        return index

    # The hooks run while the mode is on: their reads of a tensor (its version, shape) would
    # reach the mode's handler as ops, so they run with torch functions off, as the
    # recorder's do.

    def pre(self, module: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None) -> None:
        entered = _now()
        if kwargs is None:  # as torchgraphrec reads them where modules cannot give them
            kwargs = call_kwargs(current_frame())
        index = len(self.calls)
        self.calls.append([module, self.stack[-1], entered - self.spent, 0])
        self.stack.append(index)
        with self.quiet:
            for tensor in args:
                if isinstance(tensor, _Tensor):
                    self._boundary(tensor, index)
            if kwargs:
                for tensor in _tensors(kwargs.values()):
                    self._boundary(tensor, index)
        self.spent += _now() - entered

    def post(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        entered = _now()
        index = self.stack.pop()
        self.calls[index][3] = entered - self.spent
        with self.quiet:
            if isinstance(output, _Tensor):
                self._boundary(output, index)
            else:
                for tensor in _tensors(output if isinstance(output, _SEQUENCES)
                                       else getattr(output, "values", list)()):
                    self._boundary(tensor, index)
        self.spent += _now() - entered

    def _boundary(self, tensor: _Tensor, call: int) -> None:
        """An op's result crossing a call's boundary becomes a tensor node fed by the op."""
        version = tensor._version
        producer = self._producer(tensor, version)
        if producer >= 0:
            node = ~len(self.values)
            self.values.append((tensor.shape, tensor.dtype, call))
            self.flows.append((producer, node))
            self.current[id(tensor)] = (_ref(tensor), version, node)

    def graph(self) -> nx.DiGraph:
        """The records as nodes and edges with their attributes. Node ids are ints (calls,
        then tensor and param nodes, then ops): ids made of text would cost more."""
        names = self.names
        calls, values = len(self.calls), len(self.values)
        nodes = [(index, {"kind": "layer", "label": names[id(module)],
                          "parent": parent if parent >= 0 else None, "t_start_ns": start,
                          "t_end_ns": end})
                 for index, (module, parent, start, end) in enumerate(self.calls)]
        nodes += [(calls + index, {"kind": "param", "label": value[0]})
                  if len(value) == 1 else
                  (calls + index, {"kind": "tensor", "parent": value[2] if value[2] >= 0 else None,
                                   "shape": value[0], "dtype": value[1]})
                  for index, value in enumerate(self.values)]
        first = calls + values
        nodes += [(first + index, {"kind": "op", "label": getattr(func, "__name__", "op"),
                                   "parent": call, "shape": shape, "dtype": dtype,
                                   "t_start_ns": start, "t_end_ns": end})
                  for index, (func, call, _, shape, dtype, start, end) in enumerate(self.ops)]
        edges = [(first + source if source >= 0 else calls + ~source, first + target)
                 for target, op in enumerate(self.ops) for source in op[2]]
        edges += [(first + source, calls + ~target) for source, target in self.flows]
        # networkx's own dicts written directly, as torchgraphrec does: several times
        # faster than add_nodes_from and add_edges_from, for the same graph
        graph = nx.DiGraph()
        graph._node.update(nodes)
        succ, pred = graph._succ, graph._pred
        succ.update({node: {} for node, _ in nodes})
        pred.update({node: {} for node, _ in nodes})
        for seq, (source, target) in enumerate(edges):
            succ[source][target] = pred[target][source] = {"seq": seq}
        return graph


def global_hooks(pre: Callable, post: Callable) -> list:
    """``pre`` and ``post`` as global forward hooks (``post`` given the keyword arguments,
    which torch 2.4 cannot do); their handles. Neither stays if either cannot be added."""
    post_handle = torch_module.register_module_forward_hook(post, with_kwargs=True,
                                                            always_call=True)
    try:
        return [torch_module.register_module_forward_pre_hook(pre), post_handle]
    except BaseException:
        post_handle.remove()
        raise


def floor_graph(model: torch.nn.Module, args: tuple, kwargs: dict) -> Callable[[], Any]:
    """A thunk recording one forward of ``model`` into a graph in the least a true
    recorder does (see the module's docstring); returns the graph."""
    return lambda: recorded(_Floor, model, args, kwargs)


def recorded(make_floor: Callable[[torch.nn.Module], Any], model: torch.nn.Module,
             args: tuple, kwargs: dict) -> nx.DiGraph:
    """One forward of ``model`` under the floor ``make_floor(model)`` makes (a mode with
    ``pre`` and ``post`` hooks, the ``modules`` it hooks and a ``graph()``), the collector
    paused as the recorder pauses it, each call's keyword arguments handed to its pre-hook
    by the modules as the recorder has them; the floor's graph."""
    collecting = gc.isenabled()
    gc.disable()  # a collection would cost the recording, not the floor
    try:
        floor = make_floor(model)
        by_id = global_pre_hook_takes_kwargs_by_id()  # its probe call before any hook
        handles = global_hooks(floor.pre, floor.post)
        given = give_call_kwargs(floor.modules, handles[0].id) if by_id else []
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


def graph_counts(graph: nx.DiGraph) -> dict[str, int]:
    """Nodes per kind and edges, to set a floor's graph beside a recording's."""
    counts: dict[str, int] = {"edges": graph.number_of_edges()}
    for _, kind in graph.nodes(data="kind"):
        counts[kind] = counts.get(kind, 0) + 1
    return counts
