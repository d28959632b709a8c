"""Modules whose ops a torch-function mode would change (fast paths) or miss (TorchScript)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from torchgraphrec._torch import DisableTorchFunction, TorchDispatchMode, function_mode_depth
from torchgraphrec.capture.calibrate import dispatch_mode_cost
from torchgraphrec.capture.ops import OpMode, OpRecorder
from torchgraphrec.capture.state import CaptureState
from torchgraphrec.capture.structures import flatten_tensors

__all__ = ["FAST_PATH_TYPES", "SCRIPTED_TYPES", "ATEN_LEVEL_TYPES", "AtenMode", "FastPathSwitch", "may_take_fast_path", "aten_name"]

#: Their ``forward`` takes a fused kernel (``_native_multi_head_attention``,
#: ``_transformer_encoder_layer_fwd``, nested tensors) only where
#: ``torch.overrides.has_torch_function`` is false, which any torch-function mode makes
#: true: recording them with the op mode would change what they compute.
FAST_PATH_TYPES = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder)
#: Their calls run TorchScript, whose ops no torch-function mode sees (a dispatch mode does):
#: recorded at the ATen level whatever the call.
SCRIPTED_TYPES = (torch.jit.ScriptModule,)
#: The modules whose calls may be recorded at the ATen level.
ATEN_LEVEL_TYPES = FAST_PATH_TYPES + SCRIPTED_TYPES


def may_take_fast_path(module: nn.Module, args: tuple, kwargs: dict) -> bool:
    """Whether ``module`` could take its fast path in this call: in eval mode, with nothing
    that autograd would have to follow.

    >>> layer = nn.MultiheadAttention(4, 2).eval()
    >>> x = torch.zeros(3, 1, 4)
    >>> may_take_fast_path(layer, (x, x, x), {}), may_take_fast_path(layer.train(), (x, x, x), {})
    (False, False)
    >>> with torch.no_grad():
    ...     may_take_fast_path(layer.eval(), (x, x, x), {})
    True
    """
    if module.training:
        return False
    if not torch.is_grad_enabled():
        return True
    return not any(p.requires_grad for p in module.parameters()) and not any(
        t.requires_grad for t in flatten_tensors((args, kwargs)))


def aten_name(func: Any) -> str:
    """An ATen op's name without namespace or overload.

    >>> aten_name(torch.ops.aten.addmm.default)
    'addmm'
    """
    return func.overloadpacket.__name__


class AtenMode(OpRecorder, TorchDispatchMode):
    """Records the ATen ops a fast-path or scripted module runs, into the same records as
    the op mode (with the same handler). A dispatch mode leaves ``has_torch_function``
    false, so the module computes exactly what it computes unrecorded. The results of the
    call's ops live until the call ends (see ``hold_results``)."""

    def __init__(self, state: CaptureState,
                 on_failure: Callable[[BaseException], Any] = lambda exc: None) -> None:
        half = dispatch_mode_cost() // 2
        # the version of a tensor changed in place is bumped above the dispatcher's Python
        # key, after this handler returns: its schema says which arguments it writes
        super().__init__(state, aten_name, lambda func: half, on_failure,
                         written_by_schema=True, gap_kind="before_aten", hold_results=True)
        #: whether torch-function modes of the user's are on the stack: the handler's calls
        #: and reads are hidden from them (unrecorded, an ATen op reaches none)
        self.hidden = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if not self.hidden:
            return self.record(func, types, args, kwargs)
        with DisableTorchFunction():
            return self.record(func, types, args, kwargs)


class FastPathSwitch:
    """Steps the op mode aside for the calls of fast-path modules that may take their fast
    path, recording their ATen ops meanwhile; nested calls stay with the outermost one.

    ``modules`` are the indices (in the module table) of the fast-path modules.
    """

    def __init__(self, ops: OpMode, aten: AtenMode, modules: set[int]) -> None:
        self.ops, self.aten, self.modules = ops, aten, modules
        self.active: int = -1  # the call being recorded at the ATen level

    def enter(self, call: int, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """At the start of call ``call`` of a fast-path module.

        A torch-function mode of the user's (``with torch.device(...)``) keeps a module off
        its fast path, as it would unrecorded: its ops are then recorded by the op mode,
        beside that mode, since a dispatch mode around its slow path changes what it
        computes under ``inference_mode``. A scripted module's ops reach no torch-function
        mode unrecorded: the ATen-level handler's calls and reads are hidden from the
        user's ones (:attr:`AtenMode.hidden`)."""
        if self.active >= 0 or not self.ops.pushed:
            return
        scripted = isinstance(module, SCRIPTED_TYPES)
        if not scripted and (function_mode_depth() > 1
                             or not may_take_fast_path(module, args, kwargs)):
            return
        self.ops.pop()
        self.aten.hidden = function_mode_depth() > 0
        self.aten.__enter__()
        self.active = call

    def leave(self, call: int) -> None:
        """At the end of call ``call`` (whether it returned or raised)."""
        if call == self.active:
            self.reset()
            self.ops.push()

    def reset(self) -> None:
        """Stop recording at the ATen level (also when a forward was cut short)."""
        if self.active >= 0:
            self.aten.__exit__(None, None, None)
            self.active = -1  # only once off: where that fails, recording's end tries again
        self.aten.release()
