"""Recording: one recorded graph with its conveniences (drawing, summary, notebook display)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import networkx as nx

__all__ = ["Recording", "backward_loss"]


class Recording:
    """One recorded execution: the graph and what the model returned.

    Attributes:
        graph: the :class:`networkx.DiGraph` in the schema of :mod:`torchgraphrec.schema`.
        output: what the model returned (``None`` for a :class:`~torchgraphrec.Recorder`'s
            recording, which may span many calls).
    """

    def __init__(self, graph: nx.DiGraph, output: Any = None) -> None:
        self.graph = graph
        self.output = output

    def to_dot(self, **options: Any) -> str:
        """The drawing as DOT text; see :class:`~torchgraphrec.render.RenderOptions`."""
        from torchgraphrec.render.dot import to_dot

        return to_dot(self.graph, **options)

    def render(self, path: Any, **options: Any) -> Any:
        """Write the recording to ``path``, in the format its suffix names: ``.dot``/``.gv``,
        ``.svg``, ``.png``, ``.pdf``, ``.html`` (the interactive report), ``.json`` (the
        schema's JSON), ``.graphml``, or for other viewers ``.me.json`` (Model Explorer),
        ``.me-data.json`` (its node-data overlay of ``data=``, a numeric attribute) and
        ``.trace.json`` (a Perfetto timeline).

        Returns the path written. Raises ``ValueError`` for an unknown suffix and
        ``TypeError`` for an option the format does not take.
        """
        from torchgraphrec.report.write import write

        return write(self.graph, path, **options)

    def to_html(self, path: Any, **options: Any) -> Any:
        """Write the interactive HTML report to ``path`` (see :mod:`torchgraphrec.report.html`)."""
        from torchgraphrec.report.html import to_html
        from torchgraphrec.files import write_atomic

        return write_atomic(path, to_html(self.graph, **options).encode())

    def summary(self, depth: Optional[int] = None) -> str:
        """A torchinfo-style table: one row per module call down to ``depth`` (all with
        ``None``), indented, with torchinfo's ``depth-idx`` labels, input and output shapes,
        parameters and their share, and what was recorded of FLOPs, saved activations and
        forward and backward time; a footer with the totals (each parameter counted once).

        Raises ``ValueError`` for a negative ``depth``.

        >>> import torch, torchgraphrec as tgr
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        >>> text = tgr.record(model, torch.randn(2, 8), flops=True, memory=True).summary()
        >>> print(text)  # doctest: +ELLIPSIS
        Layer (type (name): depth-idx)  Input shape  Output shape  Params  Params %      FLOPs  Saved  Forward
        ------------------------------------------------------------------------------------------------------
        Sequential                      2×8          2×4               --        --  128 FLOPs   32 B  ...
          Linear (0): 1-1               2×8          2×4               36   100.00%  128 FLOPs     --  ...
          ReLU (1): 1-2                 2×4          2×4               --        --         --   32 B  ...
        ------------------------------------------------------------------------------------------------------
        Total params: 36
        Trainable params: 36
        Non-trainable params: 0
        Total FLOPs: 128 FLOPs forward
        Saved activations: 32 B
        Input size: 64 B
        Params size: 144 B
        3 module calls in Sequential
        """
        from torchgraphrec.summary import summarize

        return summarize(self.graph, depth)

    def costs(self, depth: Optional[int] = None) -> Any:
        """The summary's rows as a pandas DataFrame, one row per module call down to
        ``depth``, with plain columns for sorting and plotting: ``node``, ``label``,
        ``name``, ``qualname``, ``type``, ``depth``, ``call_index``, ``first_call``,
        ``input_shapes`` and ``output_shapes`` (text), ``params`` and ``trainable_params``
        (nested ones included), ``params_counted`` and ``trainable_counted`` (each
        parameter once: these sum to the totals), ``param_bytes``, ``output_bytes``, and as
        far as recorded ``flops``, ``backward_flops``, ``saved_bytes`` (inclusive of the
        calls inside), ``forward_ms``, ``self_ms``, ``backward_ms``.

        Raises ``ImportError`` when pandas is not installed.

        >>> import torch, torchgraphrec as tgr
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        >>> frame = tgr.record(model, torch.randn(2, 8), flops=True, memory=True).costs()
        >>> frame[["qualname", "type", "params", "flops", "saved_bytes"]]
          qualname        type  params  flops  saved_bytes
        0           Sequential      36    128           32
        1        0      Linear      36    128            0
        2        1        ReLU       0      0           32
        """
        from torchgraphrec.costframe import costs_frame

        return costs_frame(self.graph, depth)

    def _repr_html_(self) -> Optional[str]:
        """The interactive report in an ``<iframe srcdoc>`` (see :mod:`torchgraphrec.jupyter`);
        ``None`` in a kernel where the report is a widget (IPython asks for HTML besides the
        bundle, and a page with its layout engine per display is what the widget avoids)."""
        from torchgraphrec.jupyter import in_notebook, report_frame, report_widget_available

        if in_notebook() and report_widget_available():
            return None
        return report_frame(self.graph)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from torchgraphrec.jupyter import mimebundle

        return mimebundle(self.graph, repr(self), include, exclude)

    def show(self, **options: Any) -> Optional[Path]:
        """Display the recording, drawn with these options (``depth``...): in a notebook
        as the report widget; outside one, the report opens in the web browser (its file,
        in a new temporary folder, is returned)."""
        from torchgraphrec.jupyter import show

        return show(self.graph, repr(self), **options)

    def __repr__(self) -> str:
        counts = {kind: 0 for kind in ("layer", "tensor", "param", "op")}
        for _, kind in self.graph.nodes(data="kind"):
            counts[kind] = counts.get(kind, 0) + 1
        return (f"<Recording model={self.graph.graph.get('model')} layers={counts['layer']} "
                f"ops={counts['op']} tensors={counts['tensor']} params={counts['param']}>")


def backward_loss(output: Any) -> Any:
    """The scalar ``record(..., backward=True)`` back-propagates: the sum of the output's
    floating tensors that require grad, summed one after another in output order (a
    strided nested tensor's elements through its zero-padded form).

    >>> import torch
    >>> x = torch.ones(2, requires_grad=True)
    >>> backward_loss({"a": x * 2, "b": (x, torch.tensor([1, 2]))})
    tensor(6., grad_fn=<AddBackward0>)
    """
    import torch

    from torchgraphrec._torch import DisableTorchFunction
    from torchgraphrec.capture.structures import flatten_tensors

    tensors = flatten_tensors(output)
    with DisableTorchFunction():  # the choice is the recorder's: a user's mode sees the loss
        chosen = [t for t in tensors if t.is_floating_point() and t.requires_grad]
        # a strided nested tensor has no sum of its own; its padding adds nothing to it
        padded = [t.is_nested and t.layout == torch.strided for t in chosen]
    parts = [t.to_padded_tensor(0.0).sum() if pad else t.sum() for t, pad in zip(chosen, padded)]
    if not parts:
        complex_ = any(t.is_complex() and t.requires_grad for t in tensors)
        raise ValueError(
            "backward=True, but the model's output holds no real floating tensor that requires "
            "grad" + (" (a complex output needs a real loss: record with tgr.Recorder and call "
                      "backward() yourself, on output.abs().sum() say)" if complex_ else ""))
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total
