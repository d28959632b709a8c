"""Running probes: forward sites in module hooks of their own, gradients by tensor hooks."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from torchgraphrec._torch import current_frame, graph_task_id
from torchgraphrec.capture.clock import Clock
from torchgraphrec.capture.ownhooks import OwnHook
from torchgraphrec.capture.structures import tensors_with_paths
from torchgraphrec.capture.tables import ModuleTable
from torchgraphrec.errors import warn
from torchgraphrec.probes.afterbackward import AfterBackward
from torchgraphrec.probes.calls import FREED, REENTRANT, Open, Positions, close, \
    forward_raised, freed
from torchgraphrec.probes.edits import apply_edits, recomputed_choice
from torchgraphrec.probes.probe import Context, Probe
from torchgraphrec.probes.sites import sites_of
from torchgraphrec.probes.stats import Cosine
from torchgraphrec.probes.store import Observation, Store
from torchgraphrec.probes.unseen import Unseen

__all__ = ["ProbeEngine"]

#: -1 outside a backward pass; calls made during one (checkpoint recomputation) are skipped.
_graph_task_id: Callable[[], int] = graph_task_id


class ProbeEngine:
    """Applies probes to the calls of the modules they select.

    Its own per-module hooks see a call's keyword arguments before it runs. Statistics are
    computed in an :class:`~torchgraphrec.probes.unseen.Unseen` context, so that no mode
    (the recorder's op mode, a user's) takes them for the model's ops; an ``edit`` of an
    output runs as model code. Call indices count a module's calls within one step
    (``Recorder.step()`` resets them), so records are keyed by ``(module, call_index)``,
    never by position. Every hook it adds is removed by :meth:`detach`; a failure inside a
    statistic is kept and re-raised by the recorder, never thrown into the user's forward
    or backward. With ``every``, it records in the steps whose number is a multiple of it,
    and in the others has no hook attached at all (a training run pays nothing for them).
    """

    def __init__(self, table: ModuleTable, probes: Sequence[Probe], store: Store,
                 clock: Optional[Clock] = None, every: int = 1) -> None:
        self.table, self.store = table, store
        store.number(probes)  # overlapping probes keep apart; the first answers rec[...]
        self.clock = clock  # the recording's: its statistics take none of the model's time
        self.every = every
        self._hooked = False  # in a step that records
        sites = sites_of(table, probes)
        self.by_module = sites.by_module
        self._by_site, self._asks_when, self._lists = sites.by_site, sites.asks_when, sites.lists
        self.step = self.epoch = 0
        self.failure: Optional[BaseException] = None
        self._counts: dict[int, int] = {}
        self._open: list[Open] = []
        remembers = any(isinstance(k, Cosine) for p in probes for k in p.keepers)
        self._positions = Positions() if remembers else None  # only cosine reads them
        self._gradless: set[int] = set()  # modules whose last forward had no gradient to hook
        self._warned: set[str] = set()  # the warnings given once, given
        self._handles: list[Any] = []
        self._tensor_handles: list[Any] = []  # this step's gradient hooks
        self._previous: dict[tuple[str, str], torch.Tensor] = {}
        self._lazy: set[int] = set()  # modules whose parameters are hooked once materialized
        self._grad_hooked: dict[int, set[str]] = {}  # module -> its parameters hooked for grads
        self._thread = -1
        self._quiet = Unseen()
        #: under DDP, param_grad is read once the backward is over (DDP averages the
        #: gradients in callbacks at its end): what is waiting for that
        self._averaged = AfterBackward(self._read_pending) \
            if isinstance(table.model, nn.parallel.DistributedDataParallel) else None

    def attach(self) -> None:
        """Hook the selected modules (on the calling thread) and their parameters."""
        self._thread = threading.get_ident()
        self._hook()

    def _hook(self) -> None:
        self._hooked = True
        if self._positions is not None:  # before the model's own probe hooks run
            self._positions.depth = 0
            model = self.table.model
            self._handles.append(model.register_forward_pre_hook(OwnHook(self._forward_begins)))
            self._handles.append(model.register_forward_hook(OwnHook(self._forward_ends),
                                                             always_call=True))
        for module_index in self.by_module:
            module = self.table.modules[module_index]
            self._handles.append(module.register_forward_pre_hook(
                OwnHook(self._pre_hook, module_index), with_kwargs=True))
            self._handles.append(module.register_forward_hook(
                OwnHook(self._post_hook, module_index), with_kwargs=True, always_call=True))
        with self._quiet:  # a parameter's hooks and snapshot are torch calls too
            self._attach_param_hooks()

    def _active(self) -> bool:
        return self._thread == threading.get_ident() and _graph_task_id() < 0

    def _forward_begins(self, module: nn.Module, args: tuple) -> None:
        positions = self._positions
        if self._active() and positions is not None:
            positions.depth += 1
            if positions.depth == 1:
                positions.begin(self._counts)

    def _forward_ends(self, module: nn.Module, args: tuple, output: Any) -> None:
        positions = self._positions
        if self._active() and positions is not None:
            positions.depth = max(0, positions.depth - 1)  # 0 where a pre-hook raised first

    def _pre_hook(self, module_index: int, module: nn.Module, args: tuple,
                  kwargs: dict) -> None:
        if self._active():
            entered = time.perf_counter_ns()
            with self._quiet:
                self._keeping_failures(self.on_enter, module_index, args, kwargs)
            self._spent_since(entered)

    def _post_hook(self, module_index: int, module: nn.Module, args: tuple, *rest: Any) -> Any:
        # this frame is the one Module._call_impl called (OwnHook, a partial, adds none)
        if not self._active():
            if self._gradless:
                self._check_recomputed(module_index, rest)
            if _graph_task_id() >= 0 and not forward_raised(rest, current_frame()):
                return self._edit_again(module_index, rest[1])  # a checkpoint recomputing
            return None
        raised = forward_raised(rest, current_frame())
        calls = self._open
        if not raised and calls and calls[-1][0] == module_index:  # its own entry: as ever
            call_index = calls.pop()[1]
        else:
            call_index = close(calls, module_index, rest[0] if len(rest) > 1 else None, raised)
        if raised or call_index is None:  # no output; or a call its pre-hook never saw
            return None
        entered = time.perf_counter_ns()
        with self._quiet:
            self._keeping_failures(self.on_leave, module_index, call_index, rest[1])
        self._spent_since(entered)
        return self._edit(module_index, call_index, rest[1])  # model code: the model's time

    def _check_recomputed(self, module_index: int, rest: tuple) -> None:
        """Warn, once, of a module call in a backward (a checkpoint's recomputation)
        whose outputs need gradients that its forward had none of: a reentrant
        checkpoint's, whose gradients no probe hook sees."""
        if (REENTRANT not in self._warned and module_index in self._gradless and len(rest) > 1
                and self._thread == threading.get_ident()
                and any(t.requires_grad for _, t in tensors_with_paths(rest[1]))):
            self._warn_once(REENTRANT)

    def _keeping_failures(self, record: Callable[..., None], *args: Any) -> None:
        """Run ``record(*args)``, keeping its failure for the recorder to raise when the
        block ends: a statistic's failure is the recorder's, never the user's forward's."""
        try:
            record(*args)
        except Exception as exc:
            self.failure = self.failure or exc

    def _spent_since(self, entered: int) -> None:
        if self.clock is not None:
            self.clock.add_since(entered)

    def _context(self, module_index: int, call_index: int) -> Context:
        return Context(self.step, self.epoch, self.table.qualnames[module_index], call_index,
                       self.table.modules[module_index].training)

    def _seen(self, module_index: int, call_index: int, site: str, path: str) -> Observation:
        return Observation(self.epoch, self.step, self.table.qualnames[module_index],
                           self.table.types[module_index], call_index, site, path)

    def _probes(self, module_index: int, call_index: int, site: str) -> list[Probe]:
        chosen = self._by_site.get((module_index, site), ())
        if not self._asks_when.get((module_index, site)):
            return chosen  # type: ignore[return-value]
        context = self._context(module_index, call_index)
        return [p for p in chosen if p.wants(context)]

    def on_enter(self, module_index: int, args: tuple, kwargs: dict) -> None:
        """Record a call's inputs, positional and keyword, as the call receives them."""
        call_index = self._counts.get(module_index, 0)
        positions = self._positions
        if positions is not None and not positions.depth and not self._open:
            positions.begin(self._counts)  # a module called on its own: a forward
        self._counts[module_index] = call_index + 1
        self._open.append((module_index, call_index, kwargs))
        by_site = self._by_site
        if (module_index, "param_grad") in by_site and module_index not in self._lazy:
            self._hook_trainable(module_index)  # one unfrozen since its last call, too
        if (module_index, "input") not in by_site and (module_index, "grad_input") not in by_site:
            return
        inputs = tensors_with_paths(args, "args") + tensors_with_paths(kwargs, "kwargs")
        self._record(module_index, call_index, "input", inputs)
        self._hook_grads(module_index, call_index, "grad_input", inputs)

    def on_leave(self, module_index: int, call_index: int, output: Any) -> None:
        """Record the call's output and parameters."""
        by_site = self._by_site
        if (module_index, "output") in by_site or (module_index, "grad_output") in by_site:
            outputs = tensors_with_paths(output)
            self._record(module_index, call_index, "output", outputs)
            self._hook_grads(module_index, call_index, "grad_output", outputs)
        module = self.table.modules[module_index]
        if module_index in self._lazy:
            self._hook_params(module_index, module)
        if (module_index, "param") in by_site:
            own = [(name, param) for name, param in module.named_parameters(recurse=False)
                   if not is_lazy(param)]
            self._record(module_index, call_index, "param", own)

    def _edit(self, module_index: int, call_index: int, output: Any) -> Any:
        """Apply the output probes' edits (as model code: the recorder sees their ops);
        ``None`` keeps the output."""
        if (module_index, "output") not in self._by_site:
            return None
        try:  # a failing ``when`` is the recorder's failure; a failing edit the model's
            probes = self._probes(module_index, call_index, "output")
        except Exception as exc:
            self.failure = self.failure or exc
            return None
        return apply_edits(probes, output)

    def _edit_again(self, module_index: int, output: Any) -> Any:
        """Apply the output probes' edits to a call a checkpoint recomputes in the backward,
        as they were applied in the forward (the gradients are of the edited outputs).
        Which call it recomputes is not known: an edit chosen by ``when`` is a failure."""
        probes = self._by_site.get((module_index, "output"), ())
        if any(probe.edit is not None and probe.when is not None for probe in probes):
            self.failure = self.failure or recomputed_choice(self.table.qualnames[module_index])
            return None
        return apply_edits(probes, output)

    def _at(self, module_index: int, call_index: int) -> Optional[int]:
        """The call's position within its forward, where a ``cosine`` needs it."""
        positions = self._positions
        return None if positions is None else positions.of(module_index, call_index)

    def _record(self, module_index: int, call_index: int, site: str,
                tensors: list[tuple[str, torch.Tensor]]) -> None:
        if not tensors:
            return
        at = self._at(module_index, call_index)
        for probe in self._probes(module_index, call_index, site):
            for path, tensor in tensors:
                self.store.add(probe, self._seen(module_index, call_index, site, path), tensor,
                               at)

    def _hook_grads(self, module_index: int, call_index: int, site: str,
                    tensors: list[tuple[str, torch.Tensor]]) -> None:
        probes = self._probes(module_index, call_index, site)
        if not probes:
            return
        listed = self._lists[(module_index, site)]
        if listed is not None:
            self.store.reserve(listed, site, (self.epoch, self.step, call_index))
        at, hooked = self._at(module_index, call_index), False
        for path, tensor in tensors:
            if tensor.requires_grad:
                hook = self._grad_hook(probes, self._seen(module_index, call_index, site, path), at)
                self._tensor_handles.append(tensor.register_hook(hook))
                hooked = True
        if hooked:  # an earlier forward under no_grad (an evaluation) is no sign of one
            self._gradless.discard(module_index)
        elif tensors and not torch.is_grad_enabled():
            self._gradless.add(module_index)  # no_grad, or a reentrant checkpoint's forward

    def _grad_hook(self, probes: list[Probe], seen: Observation, at: Optional[int]) -> Any:
        def hook(grad: torch.Tensor) -> None:
            try:
                with self._quiet:
                    for probe in probes:
                        self.store.add(probe, seen, grad, at)
            except Exception as exc:  # kept for the recorder; the backward goes on
                self.failure = self.failure or exc
        return hook

    def _attach_param_hooks(self) -> None:
        for module_index in self.by_module:
            self._hook_params(module_index, self.table.modules[module_index])

    def _hook_params(self, module_index: int, module: nn.Module) -> None:
        """Hook the module's parameters; lazy ones (``LazyLinear``) once a forward has
        materialized them."""
        own = list(module.named_parameters(recurse=False))
        if any(is_lazy(param) for _, param in own):
            self._lazy.add(module_index)
            return
        self._lazy.discard(module_index)
        probes = self.by_module[module_index]
        if any(p.site == "param_grad" for p in probes):
            self._hook_trainable(module_index)
        if any(p.site == "param_update" for p in probes):
            self._snapshot(module_index, module)

    def _hook_trainable(self, module_index: int) -> None:
        """Hook the gradients of a module's parameters that require one and are not hooked
        yet (one unfrozen inside the block is hooked at its module's next call)."""
        hooked = self._grad_hooked.setdefault(module_index, set())
        for name, param in self.table.modules[module_index].named_parameters(recurse=False):
            if param.requires_grad and name not in hooked:
                hooked.add(name)
                self._handles.append(param.register_post_accumulate_grad_hook(
                    self._param_grad_hook(module_index, name)))

    def _param_grad_hook(self, module_index: int, name: str) -> Any:
        def hook(param: torch.Tensor) -> None:
            try:
                with self._quiet:
                    self._param_grad(module_index, name, param)
            except Exception as exc:
                self.failure = self.failure or exc
        return hook

    def _param_grad(self, module_index: int, name: str, param: torch.Tensor) -> None:
        call_index = self._counts.get(module_index, 1) - 1
        at = self._at(module_index, call_index)
        for probe in self._probes(module_index, call_index, "param_grad"):
            seen = self._seen(module_index, call_index, "param_grad", name)
            if self._averaged is not None:
                self._averaged.add(probe, seen, param, at)
            elif param.grad is not None:
                self.store.add(probe, seen, param.grad, at)
            else:
                self._warn_once(freed(seen.module, seen.path), FREED)

    def _warn_once(self, text: str, kind: str = "") -> None:
        """Warn ``text`` unless a warning of its ``kind`` (the text itself) was given."""
        if (kind or text) not in self._warned:
            self._warned.add(kind or text)
            warn(text)

    def _read_pending(self, pending: list[tuple[Any, ...]]) -> None:
        """Read each ``(probe, seen, param, at)``'s ``param.grad`` (DDP's, averaged)."""
        try:
            with self._quiet:
                for probe, seen, param, at in pending:
                    if param.grad is not None:
                        self.store.add(probe, seen, param.grad, at)
                    else:
                        self._warn_once(freed(seen.module, seen.path), FREED)
        except Exception as exc:
            self.failure = self.failure or exc

    def _snapshot(self, module_index: int, module: nn.Module) -> None:
        for name, param in module.named_parameters(recurse=False):
            self._previous[(self.table.qualnames[module_index], name)] = param.detach().clone()

    def next_step(self) -> None:
        """Record parameter updates since the last step, then start a new step: hooked
        where it records, with nothing attached where it does not (see ``every``); only
        while the Recorder's block runs (the parameters' snapshots are of its last step)."""
        if self.step % self.every == 0:
            with self._quiet:  # a failing statistic is raised when the block ends, as ever
                self._keeping_failures(self._record_updates)
        self.step += 1
        self._counts.clear()
        if self._positions is not None:
            self._positions.begin(self._counts)
        self._release_tensor_hooks()  # their backward is done; keep memory flat over a run
        if self.step % self.every == 0:
            if not self._hooked:  # the snapshots for param_update are taken as it hooks
                self._hook()
        elif self._hooked:
            self._unhook()
            self._previous.clear()

    def _record_updates(self) -> None:
        """Record the step's parameter updates, and snapshot the parameters for the next."""
        for module_index, probes in self.by_module.items():
            module = self.table.modules[module_index]
            qualname = self.table.qualnames[module_index]
            for probe in self._probes(module_index, 0, "param_update"):
                for name, param in module.named_parameters(recurse=False):
                    if (qualname, name) not in self._previous:
                        continue  # lazy, and not materialized when the step began
                    update = param.detach() - self._previous[(qualname, name)]
                    self.store.add(probe, self._seen(module_index, 0, "param_update", name), update)
            if any(p.site == "param_update" for p in probes):
                self._snapshot(module_index, module)

    def next_epoch(self) -> None:
        self.epoch += 1

    def _release_tensor_hooks(self) -> None:
        while self._tensor_handles:
            self._tensor_handles.pop().remove()

    def detach(self) -> None:
        """Remove every hook."""
        self._unhook()

    def _unhook(self) -> None:
        self._hooked = False
        self._grad_hooked.clear()
        self._release_tensor_hooks()
        while self._handles:
            self._handles.pop().remove()
