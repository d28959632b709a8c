"""The command line: ``torchgraphrec render|diff|summary|ranks|demo|doctor``; parsing only, work done elsewhere.

Errors are one line on stderr (and the notes it carries: the module call that raised it, a
hint) with exit status 1 (2 for usage errors; ``diff`` and ``ranks`` exit 0 when the same, 1
when they differ and 2 on any error, as ``diff`` does). Where the reader of the output goes
away (``| head``), the command stops quietly with status 141, as SIGPIPE would end it.
``--help``, ``render recording.json``, ``summary recording.json`` and ``diff a.json b.json``
never import torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from torchgraphrec.render.options import ENGINES, RANKDIRS
from torchgraphrec.render.theme import THEMES

__all__ = ["main", "error_text"]


def _depth(text: str) -> Any:
    """``--depth``: a number, ``auto`` or ``all``."""
    if text in ("auto", "all"):
        return None if text == "all" else text
    if not text.isdigit():
        raise argparse.ArgumentTypeError(
            f"depth must be a number >= 0, 'auto' or 'all', got {text!r}")
    return int(text)


def _at_least_one(text: str) -> int:
    """``--max-lines``: a whole number >= 1, checked before anything is recorded."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _add_render_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--depth", type=_depth, default="auto",
                        help="deepest level of module calls drawn: a number, auto (the deepest "
                             "readable one, the default) or all")
    parser.add_argument("--rankdir", choices=RANKDIRS, default="TB", help="direction of flow")
    parser.add_argument("--theme", choices=sorted(THEMES), default="default")
    parser.add_argument("--engine", default="auto",
                        help=f"layout engine: {', '.join(ENGINES)} or a path (default: auto)")
    parser.add_argument("--no-fold", dest="fold_repeats", action="store_false",
                        help="draw every repeated call instead of folding runs into one")
    parser.add_argument("--expand-leaves", action="store_true",
                        help="open modules without children, drawing their ops")
    parser.add_argument("--no-settings", dest="show_settings", action="store_false",
                        help="leave the modules' settings (kernel, stride, p...) out of the boxes")
    parser.add_argument("--tensors", dest="include_tensors", action="store_true",
                        help="draw the tensors a module's own code hands to a call (a box's "
                             "outputs are part of the box: --expand-leaves opens the boxes)")
    parser.add_argument("--params", dest="include_params", action="store_true",
                        help="draw the params too")
    parser.add_argument("--no-ops", dest="include_ops", action="store_false",
                        help="leave out the ops that code runs between modules")
    parser.add_argument("--show-costs", action="store_true",
                        help="add a line with what each box and op cost: FLOPs and "
                             "activations saved for the backward (a model is then recorded "
                             "counting them)")


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-shape", action="append", default=[], metavar="SHAPE",
                        help="an input's shape, e.g. 1,3,32,32 (repeat for several inputs)")
    parser.add_argument("--dtype", default=None,
                        help="the dtype of the inputs --input-shape makes (default float32)")


def _add_diff(commands: Any) -> None:
    diff = commands.add_parser(
        "diff", help="compare two models or saved recordings; exit 0 if the same, 1 if not",
        description="A and B are each pkg.module:factory, file.py:factory or a recording "
                    "saved as .json. Prints what B adds, removes and changes relative to A. "
                    "Exit status: 0 the same, 1 different, 2 trouble (as diff).")
    diff.add_argument("a", metavar="A", help="the old side")
    diff.add_argument("b", metavar="B", help="the new side")
    diff.add_argument("-o", "--output", type=Path, default=None,
                      help="also draw the union of both graphs, added in green, removed in "
                           "red, changed in amber, the rest greyed (.svg .png .pdf .dot "
                           ".gv .html), or write it (.json)")
    _add_input_options(diff)
    _add_render_options(diff)
    diff.add_argument("--max-lines", type=_at_least_one, default=12, metavar="N",
                      help="longest summary printed, in lines after the first (default 12)")


def _summary_depth(text: str) -> Any:
    """``summary --depth``: a number >= 0 or ``all``."""
    if text == "all":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"depth must be a number >= 0 or 'all', got {text!r}")
    return int(text)


def _add_summary(commands: Any) -> None:
    summary = commands.add_parser(
        "summary", help="print a model's module calls with shapes, parameters and costs",
        description="TARGET is pkg.module:factory, file.py:factory or a recording saved as "
                    ".json. Prints one row per module call: input and output shapes, "
                    "parameters, FLOPs (with --flops), activations saved for the backward "
                    "(with --memory), times.")
    summary.add_argument("target", metavar="TARGET")
    _add_input_options(summary)
    summary.add_argument("--flops", action="store_true",
                         help="count FLOPs (by PyTorch's own formulas; slower)")
    summary.add_argument("--memory", action="store_true",
                         help="count the bytes autograd saves for the backward (slower)")
    summary.add_argument("--backward", action="store_true",
                         help="also record a backward pass (its FLOPs and time)")
    summary.add_argument("--depth", type=_summary_depth, default=None,
                         help="deepest level of module calls listed: a number or all (default)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchgraphrec",
        description="Record one real execution of a PyTorch model and draw it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render = commands.add_parser(
        "render", help="record a model (or read a saved recording) and write a drawing",
        description="TARGET is pkg.module:factory or file.py:factory (the factory returns a "
                    "model, or a model and its inputs), or a recording saved as .json.")
    render.add_argument("target", metavar="TARGET")
    render.add_argument("-o", "--output", required=True, type=Path,
                        help="file to write; its suffix names the format (.svg .html .png "
                             ".pdf .dot .gv .json .graphml; .me.json for Model Explorer, with "
                             "--color-by NAME .me-data.json; .trace.json for Perfetto)")
    _add_input_options(render)
    render.add_argument("--backward", action="store_true", help="also record a backward pass")
    _add_render_options(render)
    render.add_argument("--dpi", type=int, default=96,
                        help="a PNG's resolution in dots per inch (default 96; 300 for print)")
    render.add_argument("--color-by", default=None, metavar="NAME",
                        help="colour by a cost (flops, saved_bytes, forward_ms, params...) or "
                             "a probe statistic, with a legend; --color-by flops (or "
                             "saved_bytes) records the model counting them")
    _add_diff(commands)
    demo = commands.add_parser(
        "demo", help="record a built-in small model and write it as .svg .html .png .dot "
                     ".json .graphml .pdf, and a depth-1 .svg")
    demo.add_argument("-o", "--output", required=True, type=Path, metavar="DIR",
                      help="folder to write the outputs into (created if missing)")
    _add_summary(commands)
    ranks = commands.add_parser(
        "ranks", help="compare the graphs each rank saved; exit 0 if the same, 1 if not",
        description="DIR holds rank-N.json files written by Recorder(..., save_dir=DIR). "
                    "Prints which ranks ran a graph different from the first rank's and where "
                    "each first parts, aligned on collectives. Exit status: 0 the same, 1 "
                    "different, 2 trouble.")
    ranks.add_argument("folder", metavar="DIR", type=Path)
    commands.add_parser("doctor", help="show which layout engines were found and what they write")
    parser.set_defaults(verbs=commands.choices)  # each verb's parser, for its own usage errors
    return parser


def _render_options(options: argparse.Namespace) -> dict[str, Any]:
    names = ("depth", "rankdir", "theme", "engine", "fold_repeats", "include_tensors",
             "include_params", "include_ops", "expand_leaves", "show_settings", "show_costs",
             "color_by", "dpi")
    return {name: getattr(options, name) for name in names if hasattr(options, name)}


def _render(options: argparse.Namespace) -> int:
    from torchgraphrec.commands import render_target
    from torchgraphrec.loader import parse_shape

    shapes = [parse_shape(text) for text in options.input_shape]
    path = render_target(options.target, options.output, _render_options(options), shapes,
                         options.dtype, options.backward)
    print(path)
    return 0


def _diff(options: argparse.Namespace) -> int:
    from torchgraphrec.commands import diff_targets
    from torchgraphrec.loader import parse_shape

    shapes = [parse_shape(text) for text in options.input_shape]
    found = diff_targets((options.a, options.b), options.output, shapes, options.dtype,
                         _render_options(options))
    print(found.summary(max_lines=options.max_lines))
    return 1 if found else 0


def _summary(options: argparse.Namespace) -> int:
    from torchgraphrec.commands import summary_target
    from torchgraphrec.loader import parse_shape

    shapes = [parse_shape(text) for text in options.input_shape]
    print(summary_target(options.target, shapes, options.dtype, flops=options.flops,
                         memory=options.memory, backward=options.backward, depth=options.depth))
    return 0


def _demo(options: argparse.Namespace) -> int:
    from torchgraphrec.demo import run_demo

    for line in run_demo(options.output):
        print(line)
    return 0


def _ranks(options: argparse.Namespace) -> int:
    from torchgraphrec.commands import compare_rank_files

    found = compare_rank_files(options.folder)
    print(found.summary())
    return 0 if found.same else 1


def _doctor(options: argparse.Namespace) -> int:
    from torchgraphrec.commands import doctor_report

    print("\n".join(doctor_report()))
    return 0


def error_text(exc: BaseException) -> str:
    """What the command line prints for a failure: one line, then the notes PEP 678 added
    (the module call it was raised in, a hint), one a line.

    >>> exc = RuntimeError("mat1 and mat2 shapes cannot be multiplied\\n(details)")
    >>> exc.add_note("torchgraphrec: raised in the call of 'fc' (Linear, call_index 0)")
    >>> print(error_text(exc))
    torchgraphrec: error: RuntimeError: mat1 and mat2 shapes cannot be multiplied
      torchgraphrec: raised in the call of 'fc' (Linear, call_index 0)

    A message that starts with blank lines (transformers' ``requires_backends``) is read
    from its first line of text:

    >>> print(error_text(ImportError("\\n  needs the protobuf library\\n(install it)")))
    torchgraphrec: error: ImportError: needs the protobuf library
    """
    message = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    notes = [f"  {note}" for note in getattr(exc, "__notes__", ())]
    return "\n".join([f"torchgraphrec: error: {type(exc).__name__}: {message}", *notes])


#: The exit status where whoever read the output stopped reading (``| head``): what a
#: shell reports for a program that SIGPIPE ended, 128 + 13.
_READER_GONE = 141


def _reader_gone() -> int:
    """Stop quietly where the output's reader went away, as Python's documentation on
    SIGPIPE advises: what is left in stdout's buffer goes to devnull, so that Python's own
    flush at exit cannot fail again and print a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass  # stdout is no file here (replaced in-process): nothing to flush at exit
    finally:
        os.close(devnull)
    return _READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    try:
        try:
            return _run(argv)
        finally:  # also after --help: a reader gone shows here, not when Python exits
            sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()


def _run(argv: Sequence[str] | None) -> int:
    options, unknown = _parser().parse_known_args(argv)
    if unknown:  # the verb's usage, not the top level's
        options.verbs[options.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    handlers = {"render": _render, "diff": _diff, "summary": _summary, "demo": _demo,
                "doctor": _doctor, "ranks": _ranks}
    try:
        return handlers[options.command](options)
    except BrokenPipeError:
        raise  # not the command's failure: its reader went away
    except Exception as exc:  # one clear line and its notes, not a traceback, for any failure
        print(error_text(exc), file=sys.stderr)
        return 2 if options.command in ("diff", "ranks") else 1  # their 1: "they differ"
