"""Loading a model for the command line: ``pkg.module:factory`` or ``file.py:factory``."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

__all__ = ["load_factory", "parse_shape", "example_inputs"]


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,32,32"`` as ``(1, 3, 32, 32)``.

    >>> parse_shape("1,3,32,32"), parse_shape("8")
    ((1, 3, 32, 32), (8,))
    >>> parse_shape("1,x")
    Traceback (most recent call last):
    ValueError: bad input shape: '1,x' (must be whole numbers separated by commas, e.g. 1,3,32,32)
    """
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(dim < 0 for dim in shape):
        raise ValueError(f"bad input shape: {text!r} (must be whole numbers separated by "
                         "commas, e.g. 1,3,32,32)")
    return shape


@contextlib.contextmanager
def _first_on_path(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path``, as ``python folder/file.py`` puts it, and taken off
    again afterwards: the user's process is left as it was."""
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:  # the target may have changed sys.path itself
            sys.path.remove(folder)


def _run_from(folder: str, factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory``, called with ``folder`` first on ``sys.path``: it may import lazily."""
    def call(*args: Any, **kwargs: Any) -> Any:
        with _first_on_path(folder):
            return factory(*args, **kwargs)
    return call


def _import_file(path: Path) -> Any:
    name = f"_torchgraphrec_target_{path.stem}"  # never shadows an imported module
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def load_factory(target: str) -> Callable[..., Any]:
    """The callable named by ``pkg.module:name`` or ``path/to/file.py:name``.

    A file is imported as ``python path/to/file.py`` runs it, with its own folder first on
    ``sys.path`` (so it imports the modules beside it); a module as ``python -m`` finds it,
    from the working folder. The folder stays there while the callable runs, and
    ``sys.path`` is as it was before and after.

    >>> load_factory("math:sqrt")(16.0)
    4.0
    >>> load_factory("math")
    Traceback (most recent call last):
    ValueError: bad model target: 'math' (must be pkg.module:factory or file.py:factory)
    """
    module_name, sep, attribute = target.rpartition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"bad model target: {target!r} (must be pkg.module:factory or "
                         "file.py:factory)")
    path, is_file = Path(module_name), module_name.endswith(".py")
    if is_file and not path.is_file():
        raise ValueError(f"no such file: {module_name!r}")
    folder = str(path.resolve().parent) if is_file else "."
    with _first_on_path(folder):
        module = _import_file(path) if is_file else importlib.import_module(module_name)
    try:
        return _run_from(folder, getattr(module, attribute))
    except AttributeError:
        raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None


def example_inputs(shapes: Sequence[tuple[int, ...]], dtype: str, model: Any = None) -> tuple:
    """Inputs of the given shapes and dtype name for ``model`` (see
    :func:`torchgraphrec.inputs.example_inputs`: on the model's device, the same each
    time), or a ``ValueError`` naming an unknown dtype."""
    import torch

    from torchgraphrec.inputs import example_inputs as made

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype: {dtype!r} (e.g. float32, float64, int64)")
    return made(list(shapes), torch_dtype, model=model)
