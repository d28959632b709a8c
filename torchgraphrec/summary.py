"""A torchinfo-style table of module calls: shapes, parameters, FLOPs, saved activations, times."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import networkx as nx

from torchgraphrec.calltable import Row, call_rows, totals
from torchgraphrec.text import cost_text

__all__ = ["summarize"]

Column = tuple[str, Callable[[Row], str], bool]  # header, cell, right-aligned


def _layer(row: Row) -> str:
    """``Conv2d (0): 2-1`` indented by depth, as torchinfo names a row."""
    if not row["qualname"] and row["depth"] == 0:  # the model, as torchinfo names it
        return row["type"] + (f" #{row['call_index']}" if row["call_index"] else "")
    name = row["name"] + (f"#{row['call_index']}" if row["call_index"] else "")
    label = f": {row['label']}" if row["label"] else ""
    return "  " * row["depth"] + f"{row['type']} ({name}){label}"


def _params(row: Row) -> str:
    """The parameters the row adds, torchinfo's way: ``--`` for none, ``(n)`` when none
    of them trains, ``(recursive)`` on a module's later calls (counted at its first)."""
    if not row["first_call"] and row["params"]:
        return "(recursive)"
    counted = row["params_counted"]
    if not counted:
        return "--"
    return f"({counted:,})" if row["trainable_counted"] == 0 else f"{counted:,}"


def _percent(total: int) -> Callable[[Row], str]:
    def cell(row: Row) -> str:
        counted = row["params_counted"]
        return f"{100 * counted / total:.2f}%" if counted and total else "--"
    return cell


def _cost(name: str) -> Callable[[Row], str]:
    # zero FLOPs or bytes as "--", as torchinfo shows them: the eye finds the real costs
    zero = "--" if name.endswith(("flops", "bytes")) else None

    def cell(row: Row) -> str:
        value = row.get(name)
        if value is None:
            return "--"
        return zero if zero and value == 0 else cost_text(value, name)
    return cell


def _columns(graph: nx.DiGraph, rows: Sequence[Row], total: int,
             recording: Mapping[str, Sequence[str]]) -> list[Column]:
    """The columns this recording can fill: costs only where they were recorded."""
    columns: list[Column] = [
        ("Layer (type (name): depth-idx)", _layer, False),
        ("Input shape", lambda row: row["input_shapes"], False),
        ("Output shape", lambda row: row["output_shapes"], False),
        ("Params", _params, True), ("Params %", _percent(total), True)]
    costs = [("flops", "FLOPs"), ("backward_flops", "Backward FLOPs"),
             ("saved_bytes", "Saved"), ("forward_ms", "Forward"), ("backward_ms", "Backward")]
    columns += [(header, _cost(name), True) for name, header in costs
                if any(name in row for row in rows)]
    if recording:
        columns.append(("Recording", lambda row: "; ".join(recording.get(row["qualname"], ())),
                        False))
    return columns


def _footer(graph: nx.DiGraph, found: Mapping[str, Any]) -> list[str]:
    lines = [f"Total params: {found['params']:,}"]
    if found["trainable_params"] is not None:
        lines += [f"Trainable params: {found['trainable_params']:,}",
                  f"Non-trainable params: {found['params'] - found['trainable_params']:,}"]
    if "flops" in found:
        backward = found.get("backward_flops")
        lines.append(f"Total FLOPs: {cost_text(found['flops'], 'flops')} forward"
                     + (f", {cost_text(backward, 'flops')} backward" if backward else ""))
    if "saved_bytes" in found:
        lines.append(f"Saved activations: {cost_text(found['saved_bytes'], 'bytes')}")
    elif _saved_uncounted(graph):
        lines.append("Saved activations: not counted (memory=True counts them where torch "
                     "allows)")
    lines.append(f"Input size: {cost_text(found['input_bytes'], 'bytes')}")
    if found["param_bytes"] is not None:
        lines.append(f"Params size: {cost_text(found['param_bytes'], 'bytes')}")
    lines += _sharded(graph)
    calls = found["calls"]
    lines.append(f"{calls:,} module call{'' if calls == 1 else 's'} in {graph.graph.get('model', '?')}")
    return lines


def _saved_uncounted(graph: nx.DiGraph) -> bool:
    """Whether ops ran in grad mode (they have a ``grad_fn``) and the bytes autograd saved
    for the backward were not counted: not asked for, or not countable there (torch before
    2.8, saved-tensor hooks disabled), where ``ops="torch"`` would allow asking."""
    return graph.graph.get("ops") == "torch" and any(
        attrs.get("grad_fn") for _, attrs in graph.nodes(data=True) if attrs.get("kind") == "op")


def _sharded(graph: nx.DiGraph) -> list[str]:
    """A line naming the parameters sharded over ranks (counts above are global), if any."""
    sharded = [attrs["qualname"] for _, attrs in graph.nodes(data=True)
               if attrs.get("kind") == "param" and any(
                   str(p).startswith("Shard") for p in attrs.get("placements") or ())]
    if not sharded:
        return []
    shown = ", ".join(sharded[:6]) + (", ..." if len(sharded) > 6 else "")
    return [f"Sharded params: {len(sharded)} (global counts above; this rank holds a shard "
            f"of each): {shown}"]


def summarize(graph: nx.DiGraph, depth: Optional[int] = None,
              labels: Optional[Mapping[str, str]] = None,
              recording: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """One row per module call, in call order, down to ``depth`` (all with ``None``).

    ``labels`` maps qualnames to ``depth-idx`` labels (by default torchinfo's: numbered in
    call order per depth); ``recording`` maps qualnames to what probes record there
    (``"grad_output: rms"``). The footer's totals count each parameter once.

    >>> g = nx.DiGraph(model="Net")
    >>> g.add_node("layer:#0", kind="layer", qualname="", type="Net", depth=0, seq=0,
    ...            parent=None, call_index=0, num_params=1200, trainable_params=1200,
    ...            inputs=(), outputs=(), forward_ms=2.5)
    >>> print(summarize(g))
    Layer (type (name): depth-idx)  Input shape  Output shape  Params  Params %  Forward
    ------------------------------------------------------------------------------------
    Net                             -            -              1,200   100.00%   2.5 ms
    ------------------------------------------------------------------------------------
    Total params: 1,200
    Trainable params: 1,200
    Non-trainable params: 0
    Input size: 0 B
    1 module call in Net
    """
    rows = call_rows(graph, depth, labels)  # which checks depth
    found = totals(graph)
    columns = _columns(graph, rows, found["params"], recording or {})
    cells = [[cell(row) for _, cell, _ in columns] for row in rows]
    headers = [header for header, _, _ in columns]
    widths = [max(len(line[i]) for line in [headers, *cells]) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(value.rjust(width) if right else value.ljust(width)
                         for value, width, (_, _, right) in zip(values, widths, columns)).rstrip()

    rule = "-" * max([len(line(headers)), *(len(line(row)) for row in cells)])
    return "\n".join([line(headers), rule, *map(line, cells), rule, *_footer(graph, found)])
