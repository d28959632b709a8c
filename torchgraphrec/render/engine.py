"""Which Graphviz engine lays out the drawing, and running it on DOT text."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from torchgraphrec.errors import TorchGraphRecError, warn

__all__ = ["Engine", "EngineError", "EngineFailure", "EngineWarning", "find_engines",
           "resolve_engine", "run_engine", "PNG_MAX_INCHES", "DEFAULT_DPI"]

#: PNGs are scaled down to fit this many inches (at 96 dpi, 7680 px) on their longer side:
#: graphviz-pure does not clamp, and a 2,000-node PNG once exhausted memory. At another
#: ``dpi`` the pixels stay capped (7680 px): the inches shrink.
PNG_MAX_INCHES = 80
#: Graphviz's own resolution for bitmaps.
DEFAULT_DPI = 96
_PURE_FORMATS = ("svg", "png", "json", "json0", "dot", "plain", "xdot")
_SYSTEM_FORMATS = _PURE_FORMATS + ("pdf", "ps", "eps")
_PDF_HELP = ("PDF needs a system Graphviz ('dot' on PATH, e.g. apt-get install graphviz) or "
             "the [pdf] extra (pip install 'torchgraphrec[pdf]', which bundles Graphviz)")


class EngineError(TorchGraphRecError, RuntimeError):
    """No engine can write the format, or the engine failed."""


@dataclass(frozen=True)
class Engine:
    """A layout engine: a ``dot``-compatible binary, or pygraphviz in-process."""

    name: str
    path: Optional[str]
    version: str
    formats: tuple[str, ...]


def _version(path: str) -> str:
    try:
        done = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return (done.stderr or done.stdout).strip().splitlines()[0] if (done.stderr or done.stdout) \
        else "unknown"


def _pure_binary() -> Optional[str]:
    """graphviz-pure's binary, found through the package's files (kernels and IDEs often
    lack the environment's bin folder on PATH)."""
    try:
        files = importlib.metadata.files("graphviz-pure") or []
    except importlib.metadata.PackageNotFoundError:
        return shutil.which("graphviz-pure")
    for file in files:
        if file.name in ("graphviz-pure", "graphviz-pure.exe"):
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return str(path)
    return shutil.which("graphviz-pure")


@functools.lru_cache(maxsize=None)
def find_engines() -> tuple[Engine, ...]:
    """Every engine found on this machine, in order of preference."""
    engines = []
    pure = _pure_binary()
    if pure:
        engines.append(Engine("graphviz-pure", pure, _version(pure), _PURE_FORMATS))
    system = shutil.which("dot")
    if system:
        engines.append(Engine("dot", system, _version(system), _SYSTEM_FORMATS))
    try:
        import pygraphviz

        engines.append(Engine("pygraphviz", None, f"pygraphviz {pygraphviz.__version__}",
                              ("svg", "png", "pdf", "ps", "eps", "dot")))
    except ImportError:
        pass
    return tuple(engines)


def _explicit(choice: str) -> Engine:
    for engine in find_engines():
        if engine.name == choice:
            return engine
    path = shutil.which(choice) or (choice if Path(choice).is_file() else None)
    if path is None:
        raise EngineError(f"engine {choice!r} was not found (found: "
                          f"{[e.name for e in find_engines()] or 'none'})")
    return Engine(Path(path).name, path, _version(path), _SYSTEM_FORMATS)


def resolve_engine(fmt: str, choice: str = "auto") -> Engine:
    """The engine to write ``fmt`` with: ``choice`` (or ``$TORCHGRAPHREC_DOT``) if given,
    else graphviz-pure, else the system ``dot``, else pygraphviz; a clear error otherwise."""
    choice = os.environ.get("TORCHGRAPHREC_DOT", "") if choice == "auto" else choice
    if choice and choice != "auto":
        engine = _explicit(choice)
        if fmt not in engine.formats:
            raise EngineError(f"engine {engine.name!r} cannot write {fmt!r} (it writes "
                              f"{list(engine.formats)})" + (f"; {_PDF_HELP}" if fmt == "pdf" else ""))
        return engine
    for engine in find_engines():
        if fmt in engine.formats:
            return engine
    if fmt in ("pdf", "ps", "eps"):
        raise EngineError(f"no engine here writes {fmt!r}: {_PDF_HELP}")
    raise EngineError(f"no Graphviz engine found to write {fmt!r}: reinstall torchgraphrec "
                      "(it depends on graphviz-pure) or install a system Graphviz")


def _candidates(fmt: str, choice: str) -> list[Engine]:
    """The chosen engine first, then every other engine found that writes ``fmt``."""
    first = resolve_engine(fmt, choice)
    return [first] + [e for e in find_engines() if e != first and fmt in e.formats]


def run_engine(dot_source: str, fmt: str, choice: str = "auto", timeout: float = 600,
               dpi: int = DEFAULT_DPI) -> bytes:
    """Lay out ``dot_source`` and return the bytes of format ``fmt`` (a PNG at ``dpi``).

    Where the engine fails on the drawing, the next engine found that writes ``fmt`` is
    tried, with a warning naming both; a time-out is final (the others are slower).

    Raises:
        EngineError: no engine writes ``fmt``; :class:`EngineFailure` where every one
            that does failed (the message holds each one's error).
    """
    failures = []
    for engine in _candidates(fmt, choice):
        try:
            data = _run(engine, dot_source, fmt, timeout, dpi)
        except EngineFailure as exc:
            failures.append((engine, str(exc)))
            continue
        if failures:
            warn(f"{failures[0][0].name} failed to write {fmt}, so {engine.name} drew it "
                 f"instead ({failures[0][1][:300]})", EngineWarning)
        if fmt == "png" and _capped(data):
            warn(f"the drawing is larger than a PNG holds ({_PNG_MAX_PIXELS:,} px on its "
                 f"longer side): it was scaled down, to less than dpi={dpi}. SVG and PDF "
                 "keep every detail at any size", EngineWarning)
        return data
    raise EngineFailure("; ".join(f"{engine.name} failed to write {fmt}: {message[:2000]}"
                                for engine, message in failures))


class EngineFailure(EngineError):
    """Engines ran and failed on this drawing (not: none was found)."""


class EngineWarning(UserWarning):
    """An engine failed, and another one drew the picture; or a PNG was scaled down to
    its size cap."""


_PNG_MAX_PIXELS = PNG_MAX_INCHES * DEFAULT_DPI


def _capped(png: bytes) -> bool:
    """Whether a PNG's longer side is at the size cap (Graphviz scaled the drawing to it),
    read from its header.

    >>> import struct
    >>> header = b"\\x89PNG\\r\\n\\x1a\\n" + b"\\0\\0\\0\\rIHDR"
    >>> _capped(header + struct.pack(">II", 7680, 1200)), _capped(header + struct.pack(">II", 900, 600))
    (True, False)
    """
    if len(png) < 24 or png[12:16] != b"IHDR":
        return False
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return max(width, height) >= _PNG_MAX_PIXELS - 1


def _png_args(dpi: int) -> list[str]:
    """The PNG's resolution and its size cap, in pixels the same at any ``dpi``.

    >>> _png_args(96), _png_args(300)
    (['-Gsize=80,80', '-Gdpi=96'], ['-Gsize=25.6,25.6', '-Gdpi=300'])
    """
    inches = f"{PNG_MAX_INCHES * DEFAULT_DPI / dpi:.4g}"
    return [f"-Gsize={inches},{inches}", f"-Gdpi={dpi}"]


#: What Graphviz's ranking says where clusters and the edges between them leave it no
#: consistent ranks (long chains of calls of one model, a ``generate()`` of several steps);
#: its own remedy, ``newrank``, ranks the graph as a whole.
_RANKING_FAILED = "trouble in init_rank"


def _run(engine: Engine, dot_source: str, fmt: str, timeout: float,
         dpi: int = DEFAULT_DPI) -> bytes:
    extra = _png_args(dpi) if fmt == "png" else []
    try:
        return _run_once(engine, dot_source, fmt, timeout, extra)
    except EngineFailure as exc:
        if _RANKING_FAILED not in str(exc):
            raise
    return _run_once(engine, dot_source, fmt, timeout, [*extra, "-Gnewrank=true"])


def _run_once(engine: Engine, dot_source: str, fmt: str, timeout: float,
              extra: list[str]) -> bytes:
    if engine.path is None:
        return _run_pygraphviz(dot_source, fmt, extra)
    # -q: the labels' widths are set from real font metrics (render/metrics.py), so the
    # estimate's warnings about non-ASCII characters no longer hold; errors still show
    quiet = ["-q"] if engine.name == "graphviz-pure" else []
    try:
        done = subprocess.run([engine.path, f"-T{fmt}", *quiet, *extra],
                              input=dot_source.encode(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{engine.name} did not finish within {timeout:.0f} s") from None
    except OSError as exc:
        raise EngineFailure(f"could not be started: {exc}") from None
    if done.returncode != 0 or not done.stdout:
        message = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise EngineFailure(message)
    return done.stdout


def _run_pygraphviz(dot_source: str, fmt: str, extra: list[str]) -> bytes:
    import pygraphviz

    try:
        graph = pygraphviz.AGraph(string=dot_source)
        return graph.draw(format=fmt, prog="dot", args=" ".join(extra))
    except (ValueError, OSError, RuntimeError) as exc:
        raise EngineFailure(str(exc)) from None
