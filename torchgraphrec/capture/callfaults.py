"""What the recorder says of a forward that raised: the call that raised, or one torch never ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchgraphrec._torch import modules_raised_through
from torchgraphrec.capture.events import CallRecord
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.errors import CaptureError

__all__ = ["raised_note", "unnested_error"]


def _raising_call(exc: BaseException, index: int, calls: Sequence[CallRecord],
                 index_of: Mapping[int, int]) -> int:
    """The call that raised ``exc``, first seen by the hook of call ``index``: down from
    it, each call's latest child while the traceback went through that child's module
    (``index_of``: a module's index by its ``id()``). A hook of the user's that ran after
    ours raises in a call our hook saw end."""
    chain = [found for found in map(index_of.get, map(id, modules_raised_through(exc)))
             if found is not None]
    for module in chain[1:]:  # the first is the module of call ``index`` itself
        child = next((i for i in range(len(calls) - 1, index, -1)
                      if calls[i].parent == index), None)
        if child is None or calls[child].module != module:
            break
        index = child
    return index


def raised_note(exc: BaseException, index: int, calls: Sequence[CallRecord],
                table: ModuleTable, index_of: Mapping[int, int]) -> str:
    """The note for ``exc``, first seen by the hook of call ``index``, naming the call that
    raised it and which of its module's calls that was."""
    index = _raising_call(exc, index, calls, index_of)
    module = calls[index].module
    qualname = table.qualnames[module] or "<root>"
    call_index = sum(1 for other in calls[:index] if other.module == module)
    return (f"torchgraphrec: raised in the call of {qualname!r} "
            f"({table.types[module]}, call_index {call_index})")


def unnested_error(module: int, stack: Sequence[int], calls: Sequence[CallRecord],
                   table: ModuleTable) -> Exception:
    """Why a call of ``module`` ends while another is innermost on ``stack``: the other is
    a call inside it that ended with no hook of torch's, where one of ``module`` is open
    at all."""
    if not any(calls[index].module == module for index in stack):
        return RuntimeError("module calls did not nest: a forward hook was skipped")
    unwound = calls[stack[-1]].module
    return CaptureError(
        f"the call of {table.qualnames[unwound]!r} ({table.types[unwound]}) ended without "
        "its forward hooks: torch runs none when a BaseException that is not an Exception "
        "(KeyboardInterrupt, SystemExit) leaves a forward, and the model caught this one. "
        "What ran after it cannot be placed in its calls, so this forward cannot be "
        "recorded; the model ran as it does unrecorded")
