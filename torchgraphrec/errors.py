"""The exceptions torchgraphrec raises of its own, and how it warns."""

import os
import sys
import warnings

__all__ = ["TorchGraphRecError", "SchemaError", "CaptureError", "SavedBytesNotCounted", "warn",
           "failed_in_recorder", "recorder_failed"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class TorchGraphRecError(Exception):
    """Root of every exception raised by torchgraphrec itself."""


class SchemaError(TorchGraphRecError, ValueError):
    """A graph breaks a rule of the schema; the message names the node or edge and the rule.

    >>> raise SchemaError("node 'x': missing attribute 'kind'")
    Traceback (most recent call last):
    torchgraphrec.errors.SchemaError: node 'x': missing attribute 'kind'
    """


class CaptureError(TorchGraphRecError, RuntimeError):
    """The recorder itself failed; the user's model was left as it was."""


def recorder_failed(error: BaseException, limit: int = 300) -> CaptureError:
    """The CaptureError saying the recorder failed with ``error``, in one short line: its
    type and first line (torch's dispatcher errors list every backend); raise it ``from``
    the error, which keeps the whole of it.

    >>> recorder_failed(NotImplementedError("no kernel for SparseCPU\\n\\nCPU: at ..."))
    CaptureError("the recorder failed: NotImplementedError('no kernel for SparseCPU')")
    >>> recorder_failed(AssertionError())
    CaptureError('the recorder failed: AssertionError()')
    """
    text = str(error).strip().split("\n", 1)[0]
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    said = f"{type(error).__name__}({text!r})" if text else f"{type(error).__name__}()"
    return CaptureError(f"the recorder failed: {said}")


class SavedBytesNotCounted(UserWarning):
    """A forward in grad mode was recorded with ``memory=True`` but without ``saved_bytes``;
    the message says why."""


def failed_in_recorder(exc: BaseException) -> bool:
    """Whether dynamo's error, or one it was raised from, says it failed in the recorder's
    own frames (by their file, or the clock they read first)."""
    seen = 0
    while exc is not None and seen < 8:
        text = str(exc)
        if "torchgraphrec" in text or "perf_counter_ns" in text:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with the user's line that led here: the nearest caller outside torchgraphrec and
    torch (whose module calls run the recorder's hooks), however deep the warning is raised.

    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn("careful")
    >>> str(caught[0].message), caught[0].filename.startswith("<doctest")
    ('careful', True)
    """
    torch = sys.modules.get("torch")
    inside = (_PACKAGE, os.path.dirname(torch.__file__) + os.sep) if torch is not None \
        else (_PACKAGE,)
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
