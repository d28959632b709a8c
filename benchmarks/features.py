"""What each tool reports of a training step's cost, measured: FLOPs, activation memory, a timeline.

    python benchmarks/features.py

Every installed peer (torchinfo, fvcore, torchview, torchlens) runs on the same models as
torchgraphrec, in training mode with grad. What each reports is set beside references that
no tool computes for itself: FLOPs by ``torch.utils.flop_counter.FlopCounterMode`` (attention
on SDPA's math backend, which it counts), forward and backward; the bytes autograd saves for
the backward by saved-tensor hooks of this script's own (each storage once at its full size,
parameters and inputs left out); a timeline is a Chrome trace (Perfetto) file written by the
tool, checked for module calls nested in one another and for a backward track.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch import nn  # noqa: E402

Report = dict[str, Any]  # flops, backward_flops, saved_bytes (numbers or None), timeline, notes


def resnet_like() -> tuple[nn.Module, tuple]:
    from torchgraphrec.demo import DemoNet

    torch.manual_seed(0)
    return DemoNet().train(), (torch.randn(8, 3, 32, 32),)


def gpt2_small_config() -> tuple[nn.Module, tuple]:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                        bos_token_id=0, eos_token_id=0)
    return GPT2Model(config).train(), (torch.randint(0, 100, (2, 16)),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "ResNet-style CNN": resnet_like, "GPT-2 (small config)": gpt2_small_config}


def _loss(output: Any) -> torch.Tensor:
    from torchgraphrec.recording import backward_loss

    return backward_loss(output)


def reference(model: nn.Module, args: tuple) -> Report:
    """FlopCounterMode's forward and backward FLOPs, and an independent saved-bytes count."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss = _loss(model(*args))
    forward = counter.get_total_flops()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss.backward()
    excluded = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers(), *args]}
    seen: set[int] = set()
    total = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in seen | excluded:
            seen.add(storage._cdata)
            total[0] += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(*args)
    return {"flops": forward, "backward_flops": counter.get_total_flops(),
            "saved_bytes": total[0], "timeline": None, "notes": ""}


def _trace_shape(path: Path) -> str:
    """What a Chrome trace file holds: slices, whether any nests in another on its track,
    and how many tracks (a backward of its own)."""
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    slices = [e for e in events if e.get("ph") == "X"]
    tracks = {(e.get("pid"), e.get("tid")) for e in slices}
    nested = any(a is not b and a.get("tid") == b.get("tid") and a["ts"] <= b["ts"]
                 and b["ts"] + b["dur"] <= a["ts"] + a["dur"] and b["dur"] < a["dur"]
                 for a in slices[:200] for b in slices[:200])
    backward = any("backward" in json.dumps(e.get("args", {})).lower()
                   or "backward" in str(e.get("cat", "")).lower()
                   or "backward" in str(e.get("name", "")).lower() for e in events)
    return (f"{len(slices)} slices, {'nested' if nested else 'flat'}, {len(tracks)} track(s)"
            + (", backward" if backward else ", forward only"))


def torchgraphrec_report(model: nn.Module, args: tuple, folder: Path) -> Report:
    import torchgraphrec

    rec = torchgraphrec.record(model, args, flops=True, memory=True, backward=True)
    trace = rec.render(folder / "torchgraphrec.trace.json")
    return {**{k: rec.graph.graph.get(k) for k in ("flops", "backward_flops", "saved_bytes")},
            "timeline": _trace_shape(trace), "notes": "per op and per module call"}


def torchinfo_report(model: nn.Module, args: tuple, folder: Path) -> Report:
    import torchinfo

    stats = torchinfo.summary(model, input_data=list(args), verbose=0)
    # torchinfo counts mult-adds from parameter and output sizes; a mult-add is 2 FLOPs.
    # Its "forward/backward pass size" is the outputs of layers with parameters, twice.
    return {"flops": 2 * stats.total_mult_adds, "backward_flops": None,
            "saved_bytes": stats.total_output_bytes, "timeline": None,
            "notes": "FLOPs = 2 x mult-adds; memory = 2 x outputs of layers with parameters"}


def fvcore_report(model: nn.Module, args: tuple, folder: Path) -> Report:
    from fvcore.nn import ActivationCountAnalysis, FlopCountAnalysis

    flops = FlopCountAnalysis(model, args)
    flops.unsupported_ops_warnings(False)
    flops.uncalled_modules_warnings(False)
    activations = ActivationCountAnalysis(model, args)
    activations.unsupported_ops_warnings(False)
    activations.uncalled_modules_warnings(False)
    # fvcore counts one "flop" per fused multiply-add, and output elements of
    # conv/linear/matmul as "activations" (a count, not bytes autograd keeps)
    return {"flops": 2 * flops.total(), "backward_flops": None, "saved_bytes": None,
            "timeline": None,
            "notes": f"FLOPs = 2 x its count; {activations.total():,} activation elements "
                     "(outputs of conv/matmul, not saved bytes)"}


def torchview_report(model: nn.Module, args: tuple, folder: Path) -> Report:
    from torchview import draw_graph

    graph = draw_graph(model, input_data=list(args), depth=3)
    words = ("flop", "mac", "mult", "memory", "bytes", "time")
    found = sorted({name for node in graph.node_set for name in dir(node)
                    if not name.startswith("_") and any(word in name.lower() for word in words)
                    and not callable(getattr(node, name, None))})
    return {"flops": None, "backward_flops": None, "saved_bytes": None, "timeline": None,
            "notes": f"cost attributes on its nodes: {found or 'none'}"}


def torchlens_report(model: nn.Module, args: tuple, folder: Path) -> Report:
    import torchlens
    from torchlens import export

    log = torchlens.trace(model, list(args), save=None)
    try:
        timeline = _trace_shape(export.chrome_trace(log, folder / "torchlens.trace.json"))
    except Exception as exc:  # a peer's failure is a finding, not a crash
        timeline = f"fails: {type(exc).__name__}"
    number = lambda value: None if value is None else int(value)  # noqa: E731
    return {"flops": number(log.total_flops_forward),
            "backward_flops": number(log.total_flops_backward),
            "saved_bytes": number(log.total_autograd_memory), "timeline": timeline,
            "notes": "per op; backward FLOPs estimated without running the backward"}


TOOLS: dict[str, Callable[[nn.Module, tuple, Path], Report]] = {
    "torchgraphrec": torchgraphrec_report, "torchinfo": torchinfo_report,
    "fvcore": fvcore_report, "torchview": torchview_report, "torchlens": torchlens_report}


def _ratio(value: Optional[float], expected: float) -> str:
    if value is None:
        return "-"
    return f"{value:,} ({value / expected:.3f}x)" if expected else f"{value:,}"


def measure(name: str, folder: Path) -> list[str]:
    """One model: the reference, then each tool's report beside it."""
    model, args = MODELS[name]()
    expected = reference(model, args)
    lines = [f"== {name}: reference FLOPs {expected['flops']:,} forward, "
             f"{expected['backward_flops']:,} backward; saved for backward "
             f"{expected['saved_bytes']:,} B"]
    for tool, report in TOOLS.items():
        model, args = MODELS[name]()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = report(model, args, folder)
        except ImportError:
            lines.append(f"{tool:14} not installed")
            continue
        except Exception as exc:  # a peer's failure is a finding, not a crash
            lines.append(f"{tool:14} fails: {type(exc).__name__}: {str(exc)[:100]}")
            continue
        lines.append(f"{tool:14} FLOPs {_ratio(found['flops'], expected['flops'])}; "
                     f"backward {_ratio(found['backward_flops'], expected['backward_flops'])}; "
                     f"activation memory {_ratio(found['saved_bytes'], expected['saved_bytes'])}; "
                     f"timeline: {found['timeline'] or 'none'}; {found['notes']}")
    return lines


def main() -> None:
    print(f"torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as folder:
        for name in MODELS:
            print("\n".join(measure(name, Path(folder))))


if __name__ == "__main__":
    main()
