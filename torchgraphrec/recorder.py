"""Recorder: the context manager that composes capture and probes and owns every handle they add."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Optional, Sequence, Union

import networkx as nx
import torch
from torch import nn

from torchgraphrec._torch import DisableTorchFunction, node_scoped_dispatch_modes
from torchgraphrec.capture.capture import Capture, check_ops
from torchgraphrec.checks import as_kwargs, check_flag, check_memory_limit, \
    check_model, check_probes, check_save_dir, made_args
from torchgraphrec.costs import add_costs
from torchgraphrec.distributed import annotate_shards, backward_not_seen, rank_stamps, \
    save_rank
from torchgraphrec.errors import CaptureError, failed_in_recorder, recorder_failed
from torchgraphrec.gcpause import gc_paused
from torchgraphrec.inputs import Dtypes, InputSize
from torchgraphrec.probes.annotate import annotate
from torchgraphrec.probes.engine import ProbeEngine
from torchgraphrec.probes.persist import save
from torchgraphrec.probes.probe import Probe
from torchgraphrec.probes.ranks import reduce_over_ranks
from torchgraphrec.probes.select import labels as select_labels
from torchgraphrec.probes.store import Store, table_of
from torchgraphrec.recording import Recording, backward_loss
from torchgraphrec.summary import summarize

__all__ = ["Recorder", "record", "SAVE_SHARE"]

#: The largest share of a run's time that writing ``save_dir``'s file at steps may take.
SAVE_SHARE = 0.05
_now = time.perf_counter


class Recorder:
    """Record every forward call of ``model`` made inside a ``with`` block.

    Each call of a module becomes a ``layer`` node (a module's second call gets
    ``call_index`` 1, and so on), and with ``ops="torch"`` every torch-level call the
    forward makes an ``op`` node. With ``backward=True`` (the default) a backward pass run
    inside the block is timed too (``t_backward_start_ns`` / ``t_backward_end_ns`` on op and
    layer nodes). All hooks are removed on leaving the block, also when it raises.

    Args:
        model: the module to record.
        ops: ``"torch"`` (every torch-level call: ``linear``, ``add``, ``getitem``...),
            ``"autograd"`` (the nodes autograd recorded, by autograd's names: for autograd
            debugging) or ``None`` (module calls and boundary tensors only, the cheapest).
        backward: also time backward passes run inside the block.
        flops: count FLOPs (``flops``, ``backward_flops`` on ops and layer calls) with
            PyTorch's own formulas; off by default, as it slows the block down.
        memory: count the bytes autograd saves for the backward (``saved_bytes`` on ops
            and layer calls, forwards run in grad mode); off by default, as it slows deep
            models of small layers down (by up to 0.8 of a forward).
        probes: :func:`~torchgraphrec.probe` s recording what flows through; their records
            are read with ``rec[qualname, site]`` and :meth:`frame`.
        memory_limit: bytes of whole tensors probes may keep; past it they keep statistics
            only, with a warning.
        graph: ``"all"`` records every forward into the graph; ``"first"`` only the first
            (probes still see every forward), for long training runs.
        save_dir: a folder the graph is written into as ``rank-N.json`` (N the rank, 0
            outside torch.distributed) at :meth:`step` and on leaving the block, so that
            a rank killed mid-run leaves what it recorded; compare them with
            ``torchgraphrec ranks DIR`` (see :func:`~torchgraphrec.compare_ranks`). The
            file grows with the run (each step's probe statistics), so a step writes it only
            once the time since the last write is at least 19 times what that write took:
            at every step while writing is quick, and never more than a twentieth of the
            run's time.
        reduce_ranks: under torch.distributed, each :meth:`step` (which every rank must
            call) also reduces the probes' ``mean``, ``rms``, ``l2``, ``min`` and ``max``
            over the ranks, as if their tensors were one, with one ``all_gather`` of a float64
            tensor: rows named ``l2@ranks`` and so on in :meth:`frame`, the same on every
            rank.
        every: probes record in one step of every ``every`` (those whose number, counted
            by :meth:`step` from 0, is a multiple of it) and have no hook attached in the
            others; with ``graph="first"`` such a step then runs nothing of the recorder's.

    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    >>> with Recorder(model) as rec:
    ...     loss = model(torch.randn(4, 3)).sum()
    ...     loss.backward()
    >>> sorted(n for n, a in rec.graph.nodes(data=True) if a["kind"] == "op")
    ['op:linear#0', 'op:relu#1']
    """

    def __init__(self, model: nn.Module, *, ops: Optional[str] = "torch", backward: bool = True,
                 flops: bool = False, memory: bool = False, probes: Sequence[Probe] = (),
                 memory_limit: Optional[int] = None, graph: str = "all",
                 save_dir: Any = None, reduce_ranks: bool = False, every: int = 1) -> None:
        self.model = check_model(model)
        if type(every) is not int or every < 1:
            raise ValueError(f"every must be a positive int, got {every!r}")
        self.every = every
        self.ops = check_ops(ops)
        if graph not in ("all", "first"):
            raise ValueError(f"unknown graph: {graph!r} (must be one of ['all', 'first'])")
        self.graph_mode = graph
        self.backward = check_flag("backward", backward)
        self.flops, self.memory = check_flag("flops", flops), check_flag("memory", memory)
        for name, asked in (("flops", self.flops), ("memory", self.memory)):
            if asked and self.ops != "torch":
                raise ValueError(f"{name}=True needs ops='torch' (costs are counted under the "
                                 f"ops they belong to), got ops={ops!r}")
        self.probes = check_probes(probes)
        if every > 1 and any(probe.edit is not None for probe in self.probes):
            raise ValueError(f"an edit changes the model at every call, and with every={every} "
                             "its hooks are off in the steps that record nothing: give the "
                             "editing probe a Recorder of its own, without every")
        self.store = Store(check_memory_limit(memory_limit))
        self.save_dir = check_save_dir(save_dir)
        self.reduce_ranks = check_flag("reduce_ranks", reduce_ranks)
        self._reduced_from = 0  # the first probe row not reduced over ranks yet
        self._capture: Optional[Capture] = None
        self._engine: Optional[ProbeEngine] = None
        self._recording: Optional[Recording] = None
        self._built_at: Any = None
        self._open = False
        self._stamps: dict[str, Any] = {}  # the rank's, where torch.distributed is initialized
        self._next_save = 0.0  # when a step may write save_dir's file again (perf_counter)

    def __enter__(self) -> "Recorder":
        if self._open:
            raise RuntimeError("this Recorder is already recording; make a new one to nest")
        if self._capture is not None:
            raise RuntimeError("this Recorder has recorded already (a Recorder records one "
                               "with-block); make a new Recorder to record again")
        self._stamps = rank_stamps()
        capture = Capture(self.model, ops=self.ops, backward=self.backward,
                          first_only=self.graph_mode == "first", flops=self.flops,
                          memory=self.memory,
                          collectives=bool(self._stamps) and (
                              "all" if node_scoped_dispatch_modes() else "forward"))
        # selectors are resolved (and may refuse) before anything is attached
        engine = ProbeEngine(capture.table, self.probes, self.store, capture.state.clock,
                             self.every) if self.probes else None
        self._capture, self._engine, self._open = capture, engine, True
        self.store.rank = self._stamps.get("rank")
        if self._stamps and self.backward and (capture.watch is None
                                               or not capture.watch.backward):
            self._stamps["backward_collectives"] = backward_not_seen(self.ops)
        capture.start()
        if engine is not None:
            try:
                engine.attach()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        capture = self._capture
        if capture is None or not self._open:
            return
        self._open = False
        try:
            capture.stop()
            self._while_groups_exist()
        except Exception as error:  # a recorder bug: reported below, never masking the user's
            capture.tracker.failure = capture.tracker.failure or error
        finally:
            if self._engine is not None:
                self._engine.detach()
        self._recording = None
        if exc is not None and hasattr(exc, "add_note"):
            self._explain(exc)
        if self.save_dir is not None:
            self._save_on_exit(exc is None)
        failure = capture.failure or (self._engine.failure if self._engine else None)
        if isinstance(failure, CaptureError) and exc is None:
            raise failure
        if failure is not None and exc is None:
            raise recorder_failed(failure) from failure

    def _while_groups_exist(self) -> None:
        """Read now what the process groups say of this recording (a job destroys them
        before it reads its recording): its collectives' groups, and its rank where the
        group was initialized inside the block."""
        capture = self._capture
        if capture is not None and capture.mode is not None:
            capture.collectives.read(capture.events.ops)
        if not self._stamps:
            self._stamps = rank_stamps()
            self.store.rank = self._stamps.get("rank")
            if self._stamps and self.backward:
                self._stamps["backward_collectives"] = backward_not_seen(self.ops, late=True)

    def _explain(self, exc: BaseException) -> None:
        """Add a note to the user's exception where the recorder's own mechanism is what
        their forward refused."""
        if self.memory and isinstance(exc, RuntimeError) and "saved tensor hooks" in str(exc):
            exc.add_note("torchgraphrec: memory=True counts saved bytes with saved-tensor "
                         "hooks, which this forward refuses (torch.func's grad, vjp, jacrev "
                         "and hessian do); record it without memory=True")
        elif type(exc).__module__.startswith("torch._dynamo") and failed_in_recorder(exc):
            exc.add_note("torchgraphrec: code this forward compiles whole (torch.cond's "
                         "branches, torch.compile(fullgraph=True)) cannot trace the "
                         "recorder's hooks, so it cannot be recorded; record the modules "
                         "it calls on their own")

    def _save_on_exit(self, raise_errors: bool) -> None:
        try:
            save_rank(self.graph, self.save_dir)
        except Exception:  # never masking the user's own exception
            if raise_errors:
                raise

    def _reduce_ranks(self) -> None:
        if self._stamps:  # under torch.distributed only: elsewhere there is nothing to reduce
            self._reduced_from = reduce_over_ranks(self.store, self._reduced_from)

    def step(self) -> None:
        """Mark the end of a training step: probes record parameter updates, and their
        call indices start again from 0 (the graph's ``call_index`` keeps counting).

        Raises:
            RuntimeError: outside the with-block, which alone this Recorder records.
        """
        self._inside("step()")
        if self._engine is not None:
            self._engine.next_step()
        if self.reduce_ranks:
            self._reduce_ranks()
        if self.save_dir is not None:
            self._save_in_step()

    def _inside(self, what: str) -> None:
        if self._open:
            return
        if self._capture is None:
            raise RuntimeError(f"{what} before the Recorder's with-block: call it inside "
                               "the block, which is what a Recorder records")
        raise RuntimeError(f"{what} after the Recorder's with-block: it has stopped recording "
                           f"(a Recorder records one with-block); call {what} inside the block")

    def _save_in_step(self) -> None:
        """Write the rank's file, unless the last write was too recent for what it cost."""
        started = _now()
        if started < self._next_save:
            return
        save_rank(self.graph, self.save_dir)
        took = _now() - started
        self._next_save = started + took / SAVE_SHARE

    def epoch(self) -> None:
        """Mark the end of an epoch (the ``epoch`` column of :meth:`frame`).

        Raises:
            RuntimeError: outside the with-block, which alone this Recorder records.
        """
        self._inside("epoch()")
        if self._engine is not None:
            self._engine.next_epoch()

    def __getitem__(self, key: tuple[str, str]) -> Any:
        """What probes kept for ``(qualname, site)``: with ``reduce="all"`` a list with one
        entry per call, in the order of the calls (a call seen again, by a second backward,
        right after its first entry); an entry is a tensor, or ``{path: tensor}`` for nested
        outputs, or ``{stat: ...}`` when a probe keeps several statistics."""
        module, site = key
        return self.store.get(module, site)

    def frame(self, by: Optional[Union[str, Sequence[str]]] = None,
              agg: Sequence[str] = ("mean", "std", "min", "max")) -> Any:
        """The scalar records as a tidy pandas DataFrame: epoch, step, module, type,
        call_index, site, path, stat, value. With ``by`` (``"epoch"`` or ``"step"``), the
        values aggregated per module, site, path and statistic, monitorch-style."""
        return table_of(self.store, by, agg)

    def save(self, folder: Any) -> Any:
        """Write the probe records and the graph into ``folder``; read them back with
        :func:`torchgraphrec.load`."""
        return save(self.store, self.graph, folder)

    def summary(self, depth: Optional[int] = None) -> str:
        """A torchinfo-style table of the module calls down to ``depth`` (see
        :meth:`Recording.summary <torchgraphrec.Recording.summary>`), labelled with the
        ``depth-idx`` labels probes select by (:func:`torchgraphrec.select.label`), and
        what the probes record where."""
        named = {qualname: label for label, qualname in select_labels(self.model).items()}
        recording: dict[str, list[str]] = {}
        if self._engine is not None:  # the selections it resolved when the block began
            for module_index, probes in self._engine.by_module.items():
                recording[self._engine.table.qualnames[module_index]] = [
                    f"{p.site}: {', '.join(k.name for k in p.keepers)}" for p in probes]
        return summarize(self.graph, depth, named, recording)

    @property
    def recording(self) -> Recording:
        """What has been recorded so far, as a :class:`~torchgraphrec.Recording`."""
        stamp = self._stamp()
        if self._recording is None or self._built_at != stamp:
            self._recording = self._build(share=False)
            self._built_at = stamp
        return self._recording

    def _stamp(self) -> tuple[int, ...]:
        capture = self._capture
        if capture is None:
            return (0, 0, 0, len(self.store.rows))
        clock = capture.clock.count if capture.clock is not None else 0
        return (capture.events.seq, capture.forwards, clock, len(self.store.rows))

    def _build(self, *, share: bool) -> Recording:
        """A new Recording of everything so far; with ``share`` its graph takes the
        records' own attribute dicts (only once nothing more will be recorded)."""
        capture = self._capture or Capture(self.model, ops=self.ops)
        # the collector's passes cost more than the build itself; and no function mode of
        # the user's should take the build's own torch calls for the model's
        with gc_paused(), DisableTorchFunction():
            graph = add_costs(capture.graph(share=share))
            graph.graph.update(self._stamps)
            if self._stamps:
                annotate_shards(graph, self.model)
            placed = capture.watch.add_nodes(graph, capture.events.t0) \
                if capture.watch is not None else []
            if capture.mode is not None:
                capture.collectives.read(capture.events.ops)
            capture.collectives.annotate(graph, capture.namer.op_ids, placed)
            annotate(graph, self.store)
        return Recording(graph)

    @property
    def graph(self) -> nx.DiGraph:
        """The recorded graph (``self.recording.graph``); read inside a forward, it holds
        the forwards finished so far."""
        return self.recording.graph


def record(model: Any, args: Any = (), kwargs: Mapping[str, Any] | None = None, *,
           input_size: InputSize | None = None, dtypes: Dtypes = None,
           device: torch.device | str | None = None,
           ops: str | None = "torch", backward: bool = False, flops: bool = False,
           memory: bool = False) -> Recording:
    """Run ``model(*args, **kwargs)`` once and record it.

    Args:
        model: the ``torch.nn.Module`` to run.
        args: one tensor, or a tuple of positional arguments.
        kwargs: keyword arguments, or ``None``.
        input_size, dtypes, device: instead of ``args``, their shapes, as torchinfo and
            torchview take them, and their dtypes and device (default: the model's):
            see :func:`~torchgraphrec.inputs.example_inputs`.
        ops: ``"torch"`` records every torch-level call the forward makes, under any grad
            mode; ``"autograd"`` the nodes autograd recorded, by autograd's names;
            ``None`` module calls and boundary tensors only (the cheapest).
        backward: also back-propagate from :func:`backward_loss` of the output and time it.
        flops: count FLOPs by PyTorch's own formulas (also of the backward, with
            ``backward``); the schema's "Costs" say what is recorded where.
        memory: count the bytes autograd saves for the backward (``saved_bytes``), in
            grad mode: what a training step holds between its forward and its backward.

    Returns:
        A :class:`Recording` with the graph and the model's output.

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module`` (or is a ScriptModule), ``args``
            is not a tensor or a tuple, ``kwargs`` not a mapping, ``backward``, ``flops``
            or ``memory`` not a bool, or ``input_size`` and the rest do not fit.
        ValueError: ``ops`` is none of the three, ``flops`` or ``memory`` is asked
            without ``ops="torch"``, or ``input_size`` is a wrong shape.

    >>> import torch
    >>> rec = record(torch.nn.Linear(3, 2), torch.randn(1, 3))
    >>> rec
    <Recording model=Linear layers=1 ops=1 tensors=2 params=2>
    >>> [attrs["name"] for _, attrs in rec.graph.nodes(data=True) if attrs["kind"] == "op"]
    ['linear']
    >>> with torch.no_grad():
    ...     record(torch.nn.Linear(3, 2), torch.randn(1, 3))
    <Recording model=Linear layers=1 ops=1 tensors=2 params=2>
    >>> record(torch.nn.Embedding(10, 4), input_size=(1, 5), dtypes=torch.long).output.shape
    torch.Size([1, 5, 4])
    """
    check_model(model)
    call_kwargs = as_kwargs(kwargs)
    recorder = Recorder(model, ops=ops, backward=backward, flops=flops, memory=memory)
    call_args = made_args(model, args, input_size, dtypes, device)  # once the rest is checked
    # The collector stays off until the recorder's working records are gone, so that its
    # next pass sees only the graph, not everything made on the way to it.
    with gc_paused():
        with recorder:
            output = model(*call_args, **call_kwargs)
            if backward:
                backward_loss(output).backward()
        recording = recorder._build(share=True)  # nothing more will be recorded into it
        del recorder
    recording.output = output
    return recording
