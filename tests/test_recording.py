"""record() on the whole zoo: the guarantees of the foundation, one test per promise."""

from __future__ import annotations

import collections
import copy
import gc
import json
import os
import pickle
import subprocess
import sys
import warnings
import weakref

import networkx as nx
import pytest
import torch

import torchgraphrec as tgr
from helpers import OpNames, assert_same_tensors, fresh, hook_state, nodes_of, op_names, run_plain
from models import ZOO, ChainOps, Raising
from torchgraphrec._torch import GLOBAL_FORWARD_HOOKS_TAKE_KWARGS
from torchgraphrec.capture.saved import UNREADABLE_HOOKS
from torchgraphrec.recording import backward_loss

ZOO_NAMES = sorted(ZOO)


@pytest.fixture(scope="module")
def recorded() -> dict[str, tgr.Recording]:
    """Every zoo model recorded once with backward, warnings turned into errors."""
    recordings = {}
    for name in ZOO_NAMES:
        case = fresh(name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            recordings[name] = tgr.record(copy.deepcopy(case.model), case.args, case.kwargs,
                                          backward=True)
    return recordings


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_records_without_warnings(name: str) -> None:
    case = fresh(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tgr.record(case.model, case.args, case.kwargs, backward=True)
    # on a torch that cannot tell which saved-tensor hooks are active, the process's first
    # recording says so once: about the torch, not the model (and alone, this test is first)
    assert [str(w.message) for w in caught
            if not str(w.message).startswith(UNREADABLE_HOOKS)] == []


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_outputs_and_gradients_are_bit_identical(name: str) -> None:
    case = fresh(name)
    expected_output, expected_grads = run_plain(case, backward=True)
    model = copy.deepcopy(case.model)
    recording = tgr.record(model, case.args, case.kwargs, backward=True)
    assert_same_tensors(recording.output, expected_output)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == expected_grads.keys() and grads
    for param_name, grad in grads.items():
        assert torch.equal(grad, expected_grads[param_name]), param_name


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_graph_is_valid_dag(recorded: dict, name: str) -> None:
    graph = recorded[name].graph
    tgr.validate(graph)
    assert nx.is_directed_acyclic_graph(graph)
    assert graph.graph["model"] == type(fresh(name).model).__qualname__


def _count_calls(case) -> collections.Counter:
    model = copy.deepcopy(case.model)
    names = {module: name for name, module in model.named_modules()}
    counts: collections.Counter = collections.Counter()
    handles = [m.register_forward_pre_hook(lambda m, a: counts.update([names[m]]))
               for m in names]
    model(*case.args, **case.kwargs)
    for handle in handles:
        handle.remove()
    return counts


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_one_layer_node_per_module_call(recorded: dict, name: str) -> None:
    layers = nodes_of(recorded[name].graph, "layer")
    assert collections.Counter(a["qualname"] for a in layers.values()) == _count_calls(fresh(name))
    for node, attrs in layers.items():
        assert node == f"layer:{attrs['qualname']}#{attrs['call_index']}"


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_layer_parents_follow_the_module_tree(recorded: dict, name: str) -> None:
    graph = recorded[name].graph
    for attrs in nodes_of(graph, "layer").values():
        if attrs["parent"] is None:
            assert attrs["qualname"] == "" and attrs["depth"] == 0
            continue
        parent = graph.nodes[attrs["parent"]]
        assert parent["qualname"] == "" or attrs["qualname"].startswith(parent["qualname"] + ".")
        assert attrs["depth"] == parent["depth"] + 1
        assert parent["t_start_ns"] <= attrs["t_start_ns"] <= attrs["t_end_ns"] <= parent["t_end_ns"]


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_one_param_node_per_parameter_and_buffer_the_forward_used(recorded: dict,
                                                                  name: str) -> None:
    model = fresh(name).model
    params = nodes_of(recorded[name].graph, "param")
    # every zoo model uses all of its parameters, frozen ones and those under no_grad too
    used = {a["qualname"] for a in params.values() if not a["buffer"]}
    assert used == {qualname for qualname, _ in model.named_parameters()}
    buffers = {a["qualname"] for a in params.values() if a["buffer"]}
    assert buffers <= {qualname for qualname, _ in model.named_buffers()}
    shapes = {n: tuple(p.shape) for n, p in [*model.named_parameters(), *model.named_buffers()]}
    for node, attrs in params.items():
        assert node == f"param:{attrs['qualname']}"
        assert attrs["shape"] == shapes[attrs["qualname"]]


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_a_path_runs_from_an_input_to_every_output(recorded: dict, name: str) -> None:
    graph = recorded[name].graph
    tensors = nodes_of(graph, "tensor")
    inputs = [n for n, a in tensors.items() if a["role"] == "input"]
    outputs = [n for n, a in tensors.items() if a["role"] == "output"]
    assert inputs and outputs
    for output in outputs:
        assert any(nx.has_path(graph, source, output) for source in inputs), output
    for node in inputs:
        assert tensors[node]["parent"] is None and tensors[node]["depth"] == 0


def test_shared_module_calls_share_param_nodes(recorded: dict) -> None:
    graph = recorded["reused_module"].graph
    calls = sorted(a["call_index"] for a in nodes_of(graph, "layer").values()
                   if a["qualname"] == "shared")
    assert calls == [0, 1, 2]
    users = {graph.nodes[op]["parent"] for op in graph.successors("param:shared.weight")}
    assert users == {"layer:shared#0", "layer:shared#1", "layer:shared#2"}
    assert graph.nodes["param:shared.weight"]["parent"] == "layer:shared#0"


def test_functional_parameter_use_is_attributed(recorded: dict) -> None:
    graph = recorded["multihead_attention"].graph
    assert graph.nodes["param:attn.out_proj.weight"]["parent"] == "layer:attn#0"
    assert graph.nodes["param:attn.in_proj_weight"]["parent"] == "layer:attn#0"


def test_in_place_ops_make_new_versions(recorded: dict) -> None:
    tensors = nodes_of(recorded["inplace"].graph, "tensor")
    versions = collections.defaultdict(set)
    for node in tensors:
        number, version = node.removeprefix("tensor:").split("@v")
        versions[number].add(int(version))
    assert any(len(v) > 1 for v in versions.values())
    ops = {a["name"] for a in nodes_of(recorded["inplace"].graph, "op").values()}
    assert {"relu", "add_", "setitem", "mul", "getitem"} <= ops


def test_integer_ids_feed_the_embedding(recorded: dict) -> None:
    graph = recorded["embedding"].graph
    ids = next(n for n, a in nodes_of(graph, "tensor").items() if a["role"] == "input")
    assert graph.nodes[ids]["dtype"] == "int64"
    assert [graph.nodes[s]["name"] for s in graph.successors(ids)] == ["embedding"]


def test_kwargs_tensors_are_recorded(recorded: dict) -> None:
    graph = recorded["two_inputs_kwargs"].graph
    inputs = [a["shape"] for a in nodes_of(graph, "tensor").values() if a["role"] == "input"]
    assert sorted(inputs) == [(2, 4), (2, 5), (3,)]


def test_backward_is_timed(recorded: dict) -> None:
    root = recorded["mlp"].graph.nodes["layer:#0"]
    assert root["t_end_ns"] <= root["t_backward_start_ns"] <= root["t_backward_end_ns"]


class _Shuffles(torch.nn.Module):
    """Many autograd nodes that do next to nothing (a copy's, an add's)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(20):
            x = self.fc(x).transpose(0, 1).contiguous().transpose(0, 1) + x
        return x


def test_no_backward_ends_before_it_starts() -> None:
    # a node's work shorter than the calibrated cost of its hooks ended before it started
    # (CloneBackward0, AddBackward0: a trace export then wrote negative durations)
    for _ in range(3):
        graph = tgr.record(_Shuffles(), torch.randn(8, 8), backward=True).graph
        spans = [(a["t_backward_start_ns"], a["t_backward_end_ns"])
                 for _, a in graph.nodes(data=True) if "t_backward_start_ns" in a]
        assert len(spans) > 60
        assert all(start <= end for start, end in spans)


@pytest.mark.parametrize("name", ["mlp", "gpt2", "recurrent", "structured_outputs"])
def test_nothing_is_left_behind(name: str) -> None:
    case = fresh(name)
    inputs = [t for t in case.args if isinstance(t, torch.Tensor)]
    before = hook_state(case.model), [t.requires_grad for t in inputs]
    tgr.record(case.model, case.args, case.kwargs, backward=True)
    assert (hook_state(case.model), [t.requires_grad for t in inputs]) == before
    assert gc.isenabled()


def test_the_users_exception_propagates_with_a_note() -> None:
    model = Raising()
    model.train()
    before = hook_state(model)
    with pytest.raises(ValueError, match="bad input shape") as caught:
        tgr.record(model, torch.randn(2, 3))
    assert caught.value.__notes__ == [
        "torchgraphrec: raised in the call of 'inner.bad' (Bad, call_index 0)"]
    assert hook_state(model) == before and model.training and gc.isenabled()


def test_recording_after_a_failure_works_again() -> None:
    model = Raising()
    with pytest.raises(ValueError, match="bad input shape"):
        tgr.record(model, torch.randn(2, 3))
    del model.inner.bad
    graph = tgr.record(model, torch.randn(2, 3)).graph
    assert {a["qualname"] for a in nodes_of(graph, "layer").values()} == {"", "first", "inner",
                                                                           "inner.0"}


def _comparable(graph: nx.DiGraph) -> tuple:
    nodes = [(n, {k: v for k, v in a.items() if not k.startswith("t_") and not k.endswith("_ms")})
             for n, a in graph.nodes(data=True)]
    edges = [(s, t, a["kind"], a["seq"]) for s, t, a in graph.edges(data=True)]
    return nodes, edges, graph.graph


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_recordings_are_deterministic(name: str) -> None:
    first = tgr.record(fresh(name).model, fresh(name).args, fresh(name).kwargs).graph
    case = fresh(name)
    second = tgr.record(case.model, case.args, case.kwargs).graph
    assert _comparable(first) == _comparable(second)


_KEY_ORDER = """
import torch, torchgraphrec
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
graph = torchgraphrec.record(model, torch.randn(2, 3), flops=True, memory=True,
                             backward=True).graph
print([list(graph.graph)] + [list(attrs) for _, attrs in graph.nodes(data=True)])
"""


@pytest.mark.needs("saved_bytes")
def test_attribute_order_does_not_follow_the_string_hash_seed() -> None:
    # the JSON writes attributes in their order: it must be one order whatever the seed
    runs = [subprocess.Popen([sys.executable, "-c", _KEY_ORDER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)}) for seed in range(4)]
    printed = {run.communicate(timeout=120)[0] for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert len(printed) == 1, printed
    assert "'flops', 'backward_flops', 'saved_bytes'" in printed.pop()


def test_a_module_with_5000_chained_ops_records_iteratively() -> None:
    graph = tgr.record(ChainOps(5000), torch.randn(3)).graph
    ops = nodes_of(graph, "op")
    assert len(ops) == 5001
    assert nx.dag_longest_path_length(graph) >= 5001


@pytest.mark.parametrize("name", ["gpt2", "resnet_like"])
def test_graph_holds_only_plain_values(recorded: dict, name: str) -> None:
    graph = recorded[name].graph
    assert nx.utils.graphs_equal(pickle.loads(pickle.dumps(graph)), graph)
    json.dumps([list(graph.nodes(data=True)), list(graph.edges(data=True)), graph.graph])


class _Stash(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.refs: list[weakref.ref] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.lin(x).relu()
        self.refs.append(weakref.ref(hidden))
        return hidden * 2


@pytest.mark.parametrize("backward", [False, True])
def test_no_activation_is_kept_alive(backward: bool) -> None:
    model = _Stash()
    recording = tgr.record(model, torch.randn(2, 4), backward=backward)
    recording.output = None
    gc.collect()
    assert model.refs and model.refs[0]() is None
    assert recording.graph.number_of_nodes() > 0


class _FastAndPlain(torch.nn.Module):
    """A fast-path module (the ATen-level mode and the switch) beside plain ones."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.enc = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(self.lin(x).relu()).sum()


def _recorded_and_dropped(how: str, options: dict) -> weakref.ref:
    """Record a new model, drop every reference to it and to the recording, and return a
    weak reference to the model."""
    model = _FastAndPlain()
    x = torch.randn(1, 3, 8)
    if how == "record":
        recording = tgr.record(model, x, **options)
    else:
        with tgr.Recorder(model, **options) as recorder:
            out = model(x)
            if options.get("backward"):
                out.backward()
            out = None
        recording = recorder.recording
        del recorder
    assert recording.graph.number_of_nodes() > 0
    gone = weakref.ref(model)
    del model, recording
    return gone


@pytest.mark.parametrize("how, options", [
    ("record", {}), ("record", {"ops": "autograd"}), ("record", {"ops": None}),
    ("record", {"backward": True, "flops": True, "memory": True}),
    ("recorder", {}), ("recorder", {"graph": "first", "flops": True}),
    ("recorder", {"backward": True, "probes": [tgr.probe("output"), tgr.probe("grad_output")]}),
])
def test_a_dropped_model_is_freed_at_once(how: str, options: dict) -> None:
    # the recorder's parts called back their owners through bound methods, a reference
    # cycle: a model (its parameters on a GPU) outlived the user's last reference to it and
    # to its recording until the cyclic collector ran
    _recorded_and_dropped(how, options)  # torch's lazy imports, which leave cycles of their own
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        gone = _recorded_and_dropped(how, options)
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_recorder_numbers_repeated_calls() -> None:
    case = fresh("mlp")
    with tgr.Recorder(case.model) as rec:
        for _ in range(3):
            loss = backward_loss(case.model(*case.args))
            loss.backward()
    layers = nodes_of(rec.graph, "layer")
    assert sorted(a["call_index"] for a in layers.values() if a["qualname"] == "0") == [0, 1, 2]
    assert rec.recording.graph is rec.graph
    tgr.validate(rec.graph)


@pytest.mark.parametrize("model, args, kwargs, error, match", [
    ("not a model", (), None, TypeError, "model must be a torch.nn.Module, got str"),
    (torch.nn.Linear(2, 2), [torch.ones(2)], None, TypeError,
     "args must be a tensor or a tuple of arguments, got list"),
    (torch.nn.Linear(2, 2), torch.ones(2), ["x"], TypeError,
     "kwargs must be a mapping of keyword arguments or None, got list"),
    (torch.nn.Linear(2, 2), torch.ones(2), {1: torch.ones(1)}, TypeError,
     r"kwargs' keys must be the names of keyword arguments \(str\), got int: 1"),
    ("scripted", torch.ones(2), None, TypeError, "cannot record a torch.jit.ScriptModule"),
])
def test_bad_input_is_refused_clearly(model, args, kwargs, error, match) -> None:
    if model == "scripted":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script's own
            model = torch.jit.script(torch.nn.Linear(2, 2))
    with pytest.raises(error, match=match):
        tgr.record(model, args, kwargs)


@pytest.mark.parametrize("option", ["backward", "flops", "memory"])
def test_on_off_options_that_are_not_bools_are_refused(option: str) -> None:
    model = torch.nn.Linear(2, 2)
    before = hook_state(model)
    with pytest.raises(TypeError, match=f"{option} must be True or False, got 'no'"):
        tgr.record(model, torch.ones(1, 2), **{option: "no"})
    with pytest.raises(TypeError, match="reduce_ranks must be True or False, got 'yes'"):
        tgr.Recorder(model, reduce_ranks="yes")
    assert hook_state(model) == before
    assert tgr.record(model, torch.ones(1, 2), **{option: 1}).graph.graph["ops"] == "torch"


def test_backward_needs_a_floating_output() -> None:
    with pytest.raises(ValueError, match="holds no real floating tensor that requires grad$"):
        tgr.record(torch.nn.Identity(), torch.tensor([1, 2]), backward=True)


@pytest.mark.filterwarnings("ignore:Complex modules are a new feature")
def test_backward_of_a_complex_output_says_how_to_record_it() -> None:
    model = torch.nn.Linear(2, 2).to(torch.cfloat)
    with pytest.raises(ValueError, match=r"a complex output needs a real loss: .*Recorder"):
        tgr.record(model, torch.ones(1, 2, dtype=torch.cfloat), backward=True)
    with tgr.Recorder(model, backward=True) as rec:  # the way the message gives
        model(torch.ones(1, 2, dtype=torch.cfloat)).abs().sum().backward()
    assert any("t_backward_start_ns" in a for _, a in rec.graph.nodes(data=True))


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_layers_name_their_boundary_tensors(recorded: dict, name: str) -> None:
    graph = recorded[name].graph
    tensors = nodes_of(graph, "tensor")
    root = graph.nodes["layer:#0"]
    assert root["inputs"] and all(tensors[t]["role"] == "input" for t in root["inputs"])
    assert set(root["outputs"]) == {n for n, a in tensors.items() if a["role"] == "output"}
    for attrs in nodes_of(graph, "layer").values():
        assert set(attrs["inputs"]) | set(attrs["outputs"]) <= set(tensors)


class _Checkpointed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=False)
        return self.head(hidden)


def test_checkpoint_recomputation_in_backward_adds_no_calls() -> None:
    torch.manual_seed(0)
    model, x = _Checkpointed(), torch.randn(2, 4)
    reference = copy.deepcopy(model)
    backward_loss(reference(x)).backward()
    graph = tgr.record(model, x, backward=True).graph
    tgr.validate(graph)
    calls = sorted(f"{a['qualname']}#{a['call_index']}" for a in nodes_of(graph, "layer").values())
    assert calls == ["#0", "body#0", "body.0#0", "body.1#0", "head#0"]
    for (name, param), (_, expected) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(param.grad, expected.grad), name


def test_the_models_own_hooks_still_run_in_order() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    order: list[str] = []
    model[0].register_forward_pre_hook(lambda *_: order.append("pre"))
    model[0].register_forward_hook(lambda *_: order.append("post"))
    model[0].register_full_backward_hook(lambda *_: order.append("backward"))
    tgr.record(model, torch.randn(2, 4, requires_grad=True), backward=True)
    assert order == ["pre", "post", "backward"]
    assert len(model[0]._forward_hooks) == len(model[0]._forward_pre_hooks) == 1


def _summed(module: torch.nn.Module, args: tuple, *rest: object) -> torch.Tensor:
    return rest[-1].sum(-1, keepdim=True).double()  # (output) or (kwargs, output)


@pytest.mark.parametrize("options", [{}, {"with_kwargs": True, "always_call": True}])
@pytest.mark.parametrize("way", ["record", "Recorder"])
def test_a_forward_hook_on_the_model_itself_is_part_of_its_forward(way: str,
                                                                   options: dict) -> None:
    # torch runs global hooks (the recorder's) before the model's own: the recording
    # ended there, without the hook's ops, its output the one the call did not return
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    model.register_forward_hook(_summed, **options)
    x = torch.randn(2, 4)
    with OpNames() as plain:
        expected = model(x)
    before = hook_state(model)
    if way == "record":
        graph = tgr.record(model, x).graph
    else:
        with tgr.Recorder(model) as recorder:
            model(x)
        graph = recorder.graph
    assert hook_state(model) == before
    ops = sorted(nodes_of(graph, "op").items(), key=lambda item: item[1]["seq"])
    assert [attrs["name"] for _, attrs in ops] == plain.names == ["linear", "relu", "sum", "double"]
    (output, attrs), = [(node, attrs) for node, attrs in nodes_of(graph, "tensor").items()
                        if attrs["role"] == "output"]
    assert (attrs["shape"], attrs["dtype"]) == (tuple(expected.shape), "float64")
    assert list(graph.predecessors(output)) == [ops[-1][0]]  # made by the hook's double
    assert graph.nodes["layer:#0"]["outputs"] == (output,)


def test_a_raising_hook_on_the_model_itself_is_noted_and_leaves_nothing() -> None:
    def raising(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        raise KeyError("the hook's own")

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    model.register_forward_hook(raising)
    before = hook_state(model)
    with pytest.raises(KeyError, match="the hook's own") as caught:
        tgr.record(model, torch.randn(2, 4))
    assert caught.value.__notes__ == ["torchgraphrec: raised in the call of '<root>' "
                                      "(Sequential, call_index 0)"]
    assert hook_state(model) == before


class _CallsItself(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, depth: int = 1) -> torch.Tensor:
        y = self.lin(x)
        if depth:
            y = self(y, depth - 1)
        return y * 3


def test_a_model_calling_itself_ends_its_forward_after_its_own_outer_hook() -> None:
    model = _CallsItself()
    model.register_forward_hook(lambda module, args, output: output + 1)
    x = torch.randn(2, 4)
    with OpNames() as plain:
        expected = model(x)
    recording = tgr.record(model, x)
    assert torch.equal(recording.output, expected)
    assert op_names(recording.graph) == plain.names == \
        ["linear", "linear", "mul", "add", "mul", "add"]  # the inner call's hook, the outer's


def test_a_call_in_another_thread_does_not_end_the_recorded_forward() -> None:
    import threading

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    recording_thread = threading.get_ident()
    in_hook, other_done = threading.Event(), threading.Event()

    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if threading.get_ident() == recording_thread and not other_done.is_set():
            in_hook.set()  # the other thread's call runs while this forward is open
            other_done.wait(10)
        return output * 2

    def other() -> None:
        in_hook.wait(10)
        model(torch.randn(1, 4))
        other_done.set()

    model.register_forward_hook(hook)
    thread = threading.Thread(target=other)
    thread.start()
    recording = tgr.record(model, torch.randn(2, 4))
    thread.join()
    assert other_done.is_set()
    assert op_names(recording.graph) == ["linear", "relu", "mul"]
    (output,) = recording.graph.nodes["layer:#0"]["outputs"]
    assert recording.graph.nodes[output]["shape"] == (2, 4)


def test_a_pre_hook_clearing_the_models_hooks_leaves_the_forward_ended_as_it_returned() -> None:
    if not GLOBAL_FORWARD_HOOKS_TAKE_KWARGS:
        pytest.skip("global hooks take no keyword arguments (torch 2.4): the recorder's "
                    "post-hooks are the modules' own there, which the user's pre-hook clears")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model.register_forward_hook(lambda module, args, output: output * 2)
    model.register_forward_pre_hook(lambda module, args: module._forward_hooks.clear())
    graph = tgr.record(model, torch.randn(2, 4)).graph
    assert op_names(graph) == ["linear", "relu"]
    (output,) = graph.nodes["layer:#0"]["outputs"]
    assert graph.nodes[output]["role"] == "output"


class _RaisingForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.lin(x)
        raise KeyError("the forward's own")


def test_a_one_shot_always_call_hook_on_a_raising_model_keeps_the_users_error() -> None:
    if not GLOBAL_FORWARD_HOOKS_TAKE_KWARGS:
        pytest.skip("global hooks take no keyword arguments (torch 2.4): the recorder's "
                    "post-hooks are the modules' own there, after the user's")
    model = _RaisingForward()
    handle = model.register_forward_hook(lambda *_: handle.remove(), always_call=True)
    with pytest.raises(KeyError, match="the forward's own") as caught:
        tgr.record(model, torch.randn(2, 4))
    assert caught.value.__context__ is None  # no "OrderedDict mutated during iteration"
    assert len(caught.value.__notes__) == 1
    assert not model._forward_hooks


def test_a_first_graph_recorder_around_another_keeps_a_raising_forwards_error() -> None:
    model = _RaisingForward()
    with tgr.Recorder(model, graph="first"), tgr.Recorder(model):
        with pytest.raises(KeyError, match="the forward's own") as caught:
            model(torch.randn(2, 4))
    assert caught.value.__context__ is None  # no "OrderedDict mutated during iteration"
    assert hook_state(model) == hook_state(_RaisingForward())


def test_backward_of_a_strided_nested_output_is_the_sum_of_its_elements() -> None:
    # a strided nested tensor has no sum(): the recorder's loss raised NotImplementedError
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    reference = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's: nested tensors are a prototype
        x = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)])
    sum(part.sum() for part in reference(x).unbind()).backward()
    graph = tgr.record(model, x, backward=True).graph
    assert any(attrs["name"] == "linear" for attrs in nodes_of(graph, "op").values())
    for (name, param), (_, expected) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.allclose(param.grad, expected.grad), name


def test_compiled_modules_are_refused_clearly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.compile's own
        compiled = torch.compile(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"torch.compile'd module.*model._orig_mod"):
        tgr.record(compiled, torch.randn(1, 2))


def test_nested_recorders_on_one_model_both_record() -> None:
    model = Raising()
    with pytest.raises(ValueError, match="bad input shape") as caught:
        with tgr.Recorder(model) as outer:
            tgr.record(model, torch.randn(2, 3))
    assert len(caught.value.__notes__) == 1
    del model.inner.bad
    with tgr.Recorder(model) as outer:
        inner = tgr.record(model, torch.randn(2, 3))
    assert _comparable(outer.graph)[1] == _comparable(inner.graph)[1]


def test_recorders_in_two_threads_keep_apart() -> None:
    import threading

    graphs: dict[int, nx.DiGraph] = {}

    def run(key: int) -> None:
        case = fresh("resnet_like" if key else "gpt2")
        graphs[key] = tgr.record(*case).graph

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _comparable(graphs[0]) == _comparable(tgr.record(*fresh("gpt2")).graph)
    assert _comparable(graphs[1]) == _comparable(tgr.record(*fresh("resnet_like")).graph)


@pytest.mark.parametrize("context", ["meta", "inference_mode"])
def test_meta_device_and_inference_mode(context: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    if context == "meta":
        graph = tgr.record(model.to("meta"), torch.randn(2, 4, device="meta")).graph
        assert {a["device"] for a in nodes_of(graph, "tensor").values()} == {"meta"}
    else:
        with torch.inference_mode():
            graph = tgr.record(model, torch.randn(2, 4)).graph
    tgr.validate(graph)
    assert len(nodes_of(graph, "layer")) == 3
