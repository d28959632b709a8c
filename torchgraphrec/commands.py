"""What the command-line verbs do; the parsing is in :mod:`torchgraphrec.cli`."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Optional, Sequence

__all__ = ["load_graph", "render_target", "diff_targets", "summary_target", "doctor_report"]


def _model_and_inputs(target: str, shapes: Sequence[tuple[int, ...]], dtype: str) -> tuple:
    from torchgraphrec.loader import example_inputs, load_factory

    made = load_factory(target)()
    model, inputs = (made if isinstance(made, tuple) and len(made) == 2 else (made, None))
    if shapes:
        inputs = example_inputs(shapes, dtype)
    if inputs is None:
        raise ValueError(f"{target!r} returned a model without inputs: give --input-shape")
    return model, inputs if isinstance(inputs, tuple) else (inputs,)


def load_graph(target: str, shapes: Sequence[tuple[int, ...]] = (), dtype: str = "float32",
               backward: bool = False, flops: bool = False) -> Any:
    """The graph of a saved recording (``.json``: torch is not imported) or of one run of
    the model a factory makes (counting its FLOPs with ``flops``)."""
    if target.endswith(".json"):
        from torchgraphrec.graph import from_json

        return from_json(Path(target).read_text(encoding="utf-8"))
    from torchgraphrec.recorder import record

    model, inputs = _model_and_inputs(target, shapes, dtype)
    return record(model, inputs, backward=backward, flops=flops).graph


def render_target(target: str, output: Path, options: dict[str, Any],
                  shapes: Sequence[tuple[int, ...]] = (), dtype: str = "float32",
                  backward: bool = False) -> Path:
    """Render a saved recording (``.json``: torch is not imported) or a model factory."""
    from torchgraphrec.render.write import write

    return write(load_graph(target, shapes, dtype, backward), output, **options)


def diff_targets(targets: Sequence[str], output: Optional[Path] = None,
                 shapes: Sequence[tuple[int, ...]] = (), dtype: str = "float32") -> Any:
    """The :class:`~torchgraphrec.GraphDiff` of two targets (saved recordings or
    factories, each with the same inputs); with ``output`` (``.json``), also write its
    union graph there."""
    from torchgraphrec.compare import diff

    if output is not None and output.suffix.lower() != ".json":
        raise ValueError(f"unknown format: {output.suffix or output.name!r} (must be one of "
                         "['.json']; drawings of a diff are not written yet)")
    found = diff(*(load_graph(target, shapes, dtype) for target in targets))
    if output is not None:
        from torchgraphrec.render.write import write

        write(found.union, output)
    return found


def doctor_report() -> list[str]:
    """Lines telling which engines were found, their versions and what each writes."""
    from torchgraphrec.render.engine import find_engines, resolve_engine

    lines = [f"python {platform.python_version()} on {platform.platform()}"]
    engines = find_engines()
    for engine in engines:
        lines.append(f"engine {engine.name}: {engine.version}")
        lines.append(f"    at {engine.path or '(in-process)'}; writes {', '.join(engine.formats)}")
    if not engines:
        lines.append("no layout engine found: reinstall torchgraphrec (it needs graphviz-pure)")
    for fmt in ("svg", "png", "pdf"):
        try:
            lines.append(f"{fmt}: written by {resolve_engine(fmt).name}")
        except Exception as exc:  # the doctor reports, it does not fail
            lines.append(f"{fmt}: unavailable: {exc}")
    return lines


def summary_target(target: str, shapes: Sequence[tuple[int, ...]] = (), dtype: str = "float32",
                   *, flops: bool = False, backward: bool = False,
                   depth: Optional[int] = None) -> str:
    """The summary table of a saved recording (``.json``: torch is not imported) or of
    one run of the model a factory makes."""
    from torchgraphrec.summary import summarize

    return summarize(load_graph(target, shapes, dtype, backward, flops), depth)
