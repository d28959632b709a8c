"""The command line: ``torchgraphrec demo|...``; parsing only, the work is done elsewhere."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchgraphrec",
        description="Record one real execution of a PyTorch model and draw it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="record a built-in small model and write it out")
    demo.add_argument("-o", "--output", required=True, metavar="DIR",
                      help="folder to write the outputs into (created if missing)")
    return parser


def _demo(options: argparse.Namespace) -> int:
    from torchgraphrec.demo import run_demo

    for path in run_demo(options.output):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    options = _parser().parse_args(argv)
    handlers = {"demo": _demo}
    try:
        return handlers[options.command](options)
    except (OSError, ValueError, TypeError) as exc:
        print(f"torchgraphrec: error: {exc}", file=sys.stderr)
        return 1
