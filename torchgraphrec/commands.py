"""What the command-line verbs do; the parsing is in :mod:`torchgraphrec.cli`."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

__all__ = ["is_recording", "load_graph", "dtype_hint", "needs_costs", "options_for",
           "render_target", "diff_targets", "summary_target", "doctor_report", "compare_rank_files"]


def _model_and_inputs(target: str, shapes: Sequence[tuple[int, ...]],
                      dtype: str) -> tuple[Any, tuple, dict]:
    """The model a factory makes and its inputs as positional and keyword arguments. A
    factory returns a model, ``(model, inputs)`` with inputs a tensor, a tuple or a dict of
    keyword arguments, or ``(model, args, kwargs)``; ``--input-shape`` takes the place of
    its inputs."""
    from torch import nn

    from torchgraphrec.loader import example_inputs, load_factory

    made = load_factory(target)()
    parts = made if isinstance(made, tuple) and 1 < len(made) <= 3 else (made,)
    if not isinstance(parts[0], nn.Module):
        raise TypeError(f"{target!r} must return a torch.nn.Module, (model, inputs) or "
                        f"(model, args, kwargs), got {_kind(made)}")
    model, args, kwargs = parts[0], parts[1] if len(parts) > 1 else None, \
        parts[2] if len(parts) > 2 else {}
    if isinstance(args, Mapping) and len(parts) == 2:  # keyword inputs only
        args, kwargs = (), args
    if shapes:
        args, kwargs = example_inputs(shapes, dtype, model), {}
    if args is None:
        raise ValueError(f"{target!r} returned a model without inputs: give --input-shape")
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"{target!r} returned keyword inputs that are not a mapping: "
                        f"{_kind(kwargs)}")
    return model, args if isinstance(args, tuple) else (args,), dict(kwargs)


def _kind(value: Any) -> str:
    """A value's type, and for a tuple the types in it: ``tuple (Linear, int)``."""
    if isinstance(value, tuple):
        return f"tuple ({', '.join(type(item).__name__ for item in value)})"
    return type(value).__name__


def is_recording(target: str) -> bool:
    """Whether ``target`` names a saved recording: a ``.json`` file, the suffix in any
    case, as ``render -o`` reads it when it writes one.

    >>> is_recording("runs/model.json"), is_recording("MODEL.JSON"), is_recording("m.py:make")
    (True, True, False)
    """
    return target.lower().endswith(".json")


def load_graph(target: str, shapes: Sequence[tuple[int, ...]] = (), dtype: Optional[str] = None,
               backward: bool = False, flops: bool = False, memory: bool = False) -> Any:
    """The graph of a saved recording (``.json``: torch is not imported) or of one run of
    the model a factory makes (counting its FLOPs with ``flops``, the bytes saved for the
    backward with ``memory``)."""
    if is_recording(target):
        from torchgraphrec.graph import from_json

        if shapes or dtype is not None:
            raise ValueError(f"{target} is a saved recording, drawn as it was recorded: "
                             "--input-shape and --dtype are for a model factory")
        return from_json(Path(target).read_text(encoding="utf-8"))
    if dtype is not None and not shapes:
        raise ValueError(f"--dtype is the dtype of the inputs --input-shape makes, and "
                         f"{target!r} is given none: give --input-shape too, or leave "
                         f"--dtype out to record the factory's own inputs")
    dtype = dtype or "float32"
    from torchgraphrec.recorder import record

    model, args, kwargs = _model_and_inputs(target, shapes, dtype)
    try:
        return record(model, args, kwargs, backward=backward, flops=flops,
                      memory=memory).graph
    except Exception as exc:
        hint = dtype_hint(exc, dtype)
        if hint:
            exc.add_note(hint)
        raise


#: What torch says where a float tensor reaches an embedding (token ids, positions).
_NEEDS_IDS = ("'indices' to have one of the following scalar types", "index_select(): Expected dtype int")


def dtype_hint(exc: BaseException, dtype: str) -> str:
    """A hint where float inputs reached what takes integer ids (a language model's
    ``input_ids``), else ``""``.

    >>> dtype_hint(RuntimeError("Expected tensor for argument #1 'indices' to have one of "
    ...                         "the following scalar types: Long, Int; but got "
    ...                         "torch.FloatTensor instead"), "float32")
    'hint: the model takes integer ids (token ids for an embedding): pass --dtype int64'
    >>> dtype_hint(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), "float32")
    ''
    """
    if dtype.startswith(("int", "uint", "bool")) or not any(text in str(exc) for text in _NEEDS_IDS):
        return ""
    return "hint: the model takes integer ids (token ids for an embedding): pass --dtype int64"


def needs_costs(options: dict[str, Any]) -> dict[str, bool]:
    """Which costs a drawing with ``options`` shows, as :func:`load_graph`'s ``flops`` and
    ``memory``, so that a model is recorded counting them (``color_by="flops"`` or
    ``"saved_bytes"``, ``show_costs`` both); counting costs time, so only then.

    >>> needs_costs({"color_by": "flops"}), needs_costs({"color_by": "saved_bytes"})
    ({'flops': True, 'memory': False}, {'flops': False, 'memory': True})
    >>> needs_costs({"show_costs": True}), needs_costs({})
    ({'flops': True, 'memory': True}, {'flops': False, 'memory': False})
    """
    shown = bool(options.get("show_costs"))
    return {cost: shown or colored for cost, colored in
            _colored_costs(options.get("color_by")).items()}


def _colored_costs(color_by: Any) -> dict[str, bool]:
    """Which costs a colouring by ``color_by`` reads (as :func:`needs_costs`'s keys).

    >>> _colored_costs("backward_flops"), _colored_costs(None)
    ({'flops': True, 'memory': False}, {'flops': False, 'memory': False})
    """
    return {"flops": color_by in ("flops", "backward_flops"), "memory": color_by == "saved_bytes"}


def render_target(target: str, output: Path, options: dict[str, Any],
                  shapes: Sequence[tuple[int, ...]] = (), dtype: Optional[str] = None,
                  backward: bool = False) -> Path:
    """Render a saved recording (``.json``: torch is not imported) or a model factory
    (recorded counting the FLOPs or saved bytes the drawing shows, with a backward where it
    is coloured by one). A saved recording must hold what its colouring names; costs it
    lacks are left out of ``--show-costs``."""
    from torchgraphrec.report.write import write

    taken = options_for(output, options)  # before recording anything
    color_by = str(taken.get("color_by", taken.get("data")))
    backward = backward or color_by.startswith("backward_")
    graph = load_graph(target, shapes, dtype, backward, **needs_costs(options))
    if is_recording(target):  # a factory's model was recorded with what was asked
        _check_counted(target, graph, {"backward": backward, **_colored_costs(color_by)},
                       "render")
    return write(graph, output, **taken)


def options_for(output: Path, options: dict[str, Any]) -> dict[str, Any]:
    """The command line's drawing ``options`` that a file of ``output``'s format takes: all
    of them for a drawing or a report, none for an export to another tool, and for Model
    Explorer's node data the value each node carries (``--color-by``).

    >>> options_for(Path("m.trace.json"), {"depth": 2, "color_by": None})
    {}
    >>> options_for(Path("m.me-data.json"), {"depth": 2, "color_by": "flops"})
    {'data': 'flops'}
    """
    from torchgraphrec.report.write import OPTIONS, format_of

    fmt = format_of(output)
    if fmt not in OPTIONS:
        return options
    if fmt != ".me-data.json":
        return {}
    if not options.get("color_by"):
        raise ValueError("a .me-data.json file holds one value per node: name it with "
                         "--color-by (flops, saved_bytes, forward_ms, params...)")
    return {"data": options["color_by"]}


def diff_targets(targets: Sequence[str], output: Optional[Path] = None,
                 shapes: Sequence[tuple[int, ...]] = (), dtype: Optional[str] = None,
                 options: Optional[dict[str, Any]] = None) -> Any:
    """The :class:`~torchgraphrec.GraphDiff` of two targets (saved recordings or
    factories, each with the same inputs); with ``output``, also draw it there with the
    drawing ``options`` (or write its union graph, ``.json``)."""
    from torchgraphrec.compare import diff
    from torchgraphrec.compare.draw import FORMATS

    written = None if output is None else _written_format(output)
    if output is not None and written not in FORMATS:  # before recording anything; a
        # diff's formats, not every format render writes
        raise ValueError(f"unknown format for a diff: {written or Path(output).suffix.lower()!r} "
                         f"(must be one of {list(FORMATS)})")
    costs = needs_costs(options or {})
    found = diff(*(load_graph(target, shapes, dtype, **costs) for target in targets))
    if output is not None:
        found.render(output, **({} if written == ".json" else options or {}))
    return found


def _written_format(output: Path) -> Optional[str]:
    """The format suffix of ``output`` where it names one that ``render`` writes."""
    from torchgraphrec.report.write import format_of

    try:
        return format_of(output)
    except ValueError:
        return None


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


def summary_target(target: str, shapes: Sequence[tuple[int, ...]] = (), dtype: Optional[str] = None,
                   *, flops: bool = False, memory: bool = False, backward: bool = False,
                   depth: Optional[int] = None) -> str:
    """The summary table of a saved recording (``.json``: torch is not imported) or of
    one run of the model a factory makes."""
    from torchgraphrec.summary import summarize

    graph = load_graph(target, shapes, dtype, backward, flops, memory)
    if is_recording(target):  # a factory's model was recorded counting what was asked
        _check_counted(target, graph, {"flops": flops, "memory": memory,
                                       "backward": backward})
    return summarize(graph, depth)


#: What each option of ``summary`` asks a saved recording to hold: how to tell it does,
#: what it is called, and what records it (beyond the option itself).
_COUNTED = {
    "flops": (lambda graph: "flops" in graph.graph, "FLOPs", ""),
    "memory": (lambda graph: "saved_bytes" in graph.graph, "saved bytes", " in grad mode"),
    "backward": (lambda graph: any("t_backward_start_ns" in attrs
                                   for _, attrs in graph.nodes(data=True)),
                 "a backward", ""),
}


def _check_counted(target: str, graph: Any, asked: Mapping[str, bool],
                   command: str = "summary") -> None:
    """Raise ``ValueError`` where the saved recording ``target`` lacks what the options
    ``asked`` of ``command`` for (a saved recording cannot be recorded again with them)."""
    doing = {"summary": "summarise", "render": "draw"}[command]
    for option, (holds, what, how) in _COUNTED.items():
        if asked.get(option) and not holds(graph):
            # render records what its drawing shows; its only option of this kind: --backward
            flag = f" --{option}" if command == "summary" else \
                f"{' --backward' if option == 'backward' else ''} and the same drawing options"
            raise ValueError(f"{target} was recorded without {what}: record it with "
                             f"torchgraphrec.record(model, inputs, {option}=True){how}, then "
                             f"save it as .json again, or {doing} the model itself: "
                             f"torchgraphrec {command} pkg.module:factory --input-shape ..."
                             f"{flag}")


def compare_rank_files(folder: Path) -> Any:
    """The :class:`~torchgraphrec.RankComparison` of the ``rank-N.json`` files in ``folder``
    (torch is not imported)."""
    from torchgraphrec.compare.ranks import compare_ranks

    paths = sorted(Path(folder).glob("rank-*.json"), key=_rank_number)
    if not paths:
        raise FileNotFoundError(f"no rank-N.json in {str(folder)!r} "
                                f"(written by Recorder(..., save_dir=...))")
    return compare_ranks([_rank_graph(path) for path in paths])


def _rank_graph(path: Path) -> Any:
    """The graph a rank file holds; where it holds none, the error names the file."""
    from torchgraphrec.graph import from_json

    try:
        return from_json(path.read_text(encoding="utf-8"))
    except Exception as exc:
        exc.add_note(f"in {path}")
        raise


def _rank_number(path: Path) -> int:
    """``rank-12.json`` -> 12 (files named otherwise sort first)."""
    tail = path.stem.partition("-")[2]
    return int(tail) if tail.isdigit() else -1
