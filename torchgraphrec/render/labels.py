"""Label text for every drawn node, edge and cluster: the one place labels are escaped."""

from __future__ import annotations

import html
import re
from typing import Any, Mapping, Optional, Sequence

import graphviz

from torchgraphrec.text import (UNITS, cost_text, count_text, settings_text, shape_text,
                                short_name, split_items)

__all__ = ["escape", "join", "join_left", "shape_text", "count_text", "short_name", "layer_title",
           "box_lines", "tensor_lines", "param_lines", "op_lines", "xml_id", "id_part", "css_class",
           "html_text", "UNITS", "cost_text", "cost_line", "run_cost_line", "LINE_COSTS",
           "ARGS_DRAWN", "MAX_DRAWN_ARGS", "named_args"]


def escape(text: Any) -> str:
    r"""``text`` made safe inside a quoted DOT string.

    Backslashes are doubled (the graphviz package passes them through, and Graphviz reads
    them as escapes); ampersands are written as ``&amp;`` (Graphviz reads ``&lt;`` or
    ``&amp;`` in a label as the character it names: a module named ``R&amp;D`` was drawn
    ``R&D``); quotes are escaped when the label is quoted.

    >>> escape('a\\b')
    'a\\\\b'
    >>> escape("R&amp;D & a<b")
    'R&amp;amp;D &amp; a<b'
    """
    return str(text).replace("\\", "\\\\").replace("&", "&amp;")


def join(*lines: str) -> graphviz.nohtml:
    r"""Escaped lines as one DOT label, never read as an HTML-like label (``<lambda>``).

    >>> str(join("<lambda>", "a&b"))
    '<lambda>\\na&amp;b'
    """
    return graphviz.nohtml("\\n".join(escape(line) for line in lines if line != ""))


def join_left(*lines: str) -> graphviz.nohtml:
    r"""Escaped lines as one DOT label, each line left-justified (a cluster's title
    of several lines, which ``labeljust`` places but does not align).

    >>> str(join_left("h.2: GPT2Block", "8.4k params"))
    'h.2: GPT2Block\\l8.4k params\\l'
    """
    return graphviz.nohtml("".join(escape(line) + "\\l" for line in lines if line != ""))


def html_text(text: Any) -> str:
    """``text`` made safe inside a Graphviz HTML-like label.

    >>> html_text('a<b & "c"')
    'a&lt;b &amp; &quot;c&quot;'
    """
    return html.escape(str(text), quote=True)


#: What :func:`cost_line` writes by default: what the model costs, the same on every run
#: (times vary from run to run).
LINE_COSTS = ("flops", "saved_bytes")


def cost_line(attrs: Mapping[str, Any], names: Sequence[str] = LINE_COSTS) -> str:
    """What a call or op cost, in one line: the costs ``names`` it has, left out where
    zero (most ops between modules compute nothing).

    >>> cost_line({"flops": 1_200_000_000, "saved_bytes": 34_000_000, "forward_ms": 3.1})
    '1.2 GFLOPs · 34 MB'
    >>> cost_line({"flops": 0, "saved_bytes": 512}), cost_line({"flops": 0}), cost_line({})
    ('512 B', '', '')
    >>> cost_line({"flops": 96, "forward_ms": 0.25}, ("flops", "forward_ms"))
    '96 FLOPs · 250 µs'
    """
    found = [(name, attrs.get(name)) for name in names]
    return " · ".join(cost_text(value, name) for name, value in found
                      if isinstance(value, (int, float)) and not isinstance(value, bool) and value)


def _number(value: Any) -> float:
    """A recorded cost as a number, 0 where there is none."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def run_cost_line(calls: Sequence[Mapping[str, Any]], names: Sequence[str] = LINE_COSTS) -> str:
    """What the calls a folded run draws once cost, in one line: ``each`` where they all
    cost the same, else each cost that differs as its range over the calls, so that one
    call's cost is never read as every call's.

    >>> same = {"flops": 96, "saved_bytes": 512}
    >>> run_cost_line([same, same])
    '96 FLOPs · 512 B each'
    >>> run_cost_line([same, {"flops": 96, "saved_bytes": 66_000}, same])
    '96 FLOPs each · 512 B–66 kB'
    """
    parts, equal = [], True
    for name in names:
        values = [_number(attrs.get(name)) for attrs in calls]
        low, high = min(values), max(values)
        if low == high:
            if high:
                parts.append(cost_text(high, name))
        else:
            parts.append(f"{cost_text(low, name)}–{cost_text(high, name)}")
            equal = False
    if not parts:
        return ""
    if equal:
        return " · ".join(parts) + " each"
    return " · ".join(f"{part} each" if "–" not in part else part for part in parts)


def _span(first: str, last: str) -> str:
    """``h.0`` to ``h.11`` as ``h.0–11``."""
    head, dot, _ = first.rpartition(".")
    if dot and last.startswith(head + "."):
        return f"{first}–{last[len(head) + 1:]}"
    return f"{first}–{last}"


def _run_names(names: Sequence[str]) -> str:
    """The names of the calls a folded run stands for: ``h.0–11`` where they count up one
    by one, else each of them (``b.0, 2, 4``; ``b.0, 2, …, 10`` past four).

    >>> _run_names(["h.0", "h.1", "h.2"]), _run_names(["b.0", "b.2", "b.4"])
    ('h.0–2', 'b.0, 2, 4')
    >>> _run_names([f"b.{i}" for i in range(0, 12, 2)]), _run_names(["relu", "relu"])
    ('b.0, 2, …, 10', 'relu')
    """
    if len(set(names)) == 1:  # one module called again and again
        return names[0]
    heads = {name.rpartition(".")[0] for name in names}
    tails = [name.rpartition(".")[2] for name in names]
    if len(heads) != 1 or not all(tail.isdigit() for tail in tails):
        return _span(names[0], names[-1])
    numbers = [int(tail) for tail in tails]
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return _span(names[0], names[-1])
    shown = tails if len(tails) <= 4 else [*tails[:2], "…", tails[-1]]
    return names[0] + ", " + ", ".join(shown[1:])


def layer_title(attrs: Mapping[str, Any], parent_qualname: Optional[str] = None,
                last: Optional[Mapping[str, Any]] = None,
                every: Optional[Sequence[str]] = None) -> str:
    """``conv1: Conv2d``: the module's name inside ``parent_qualname`` (the full path
    when ``None``) and its type; the type alone for the root call; later calls add
    ``#n``; a fold through the call ``last`` names both ends, or, given the qualnames of
    ``every`` call it stands for, each where they do not count up one by one.

    >>> attrs = {"qualname": "h.0", "type": "Block", "call_index": 0}
    >>> layer_title(attrs), layer_title(attrs, "", {**attrs, "qualname": "h.11"})
    ('h.0: Block', 'h.0–11: Block')
    >>> layer_title(attrs, "", every=["h.0", "h.2"])
    'h.0, 2: Block'
    """
    qualname = attrs["qualname"]
    if not qualname:  # the root call: the model's type (a Recorder may call it again)
        return f"{attrs['type']} #{attrs['call_index']}" if attrs["call_index"] else attrs["type"]
    name = qualname if parent_qualname is None else short_name(qualname, parent_qualname)
    if every is not None and len(every) > 1:
        name = _run_names([q if parent_qualname is None else short_name(q, parent_qualname)
                           for q in every])
    elif last is not None and last["qualname"] != qualname:
        end = last["qualname"] if parent_qualname is None else short_name(last["qualname"],
                                                                          parent_qualname)
        name = _span(name, end)
    title = f"{name}: {attrs['type']}"
    return f"{title} #{attrs['call_index']}" if attrs["call_index"] else title


def _shapes(graph: Any, ids: Sequence[str]) -> str:
    shapes = [shape_text(graph.nodes[i]["shape"]) for i in ids if i in graph.nodes]
    return ", ".join(shapes[:3]) + (", …" if len(shapes) > 3 else "")


def box_lines(attrs: Mapping[str, Any], source: Any, title: str, *, show_shapes: bool,
              show_settings: bool, repeats: int = 1) -> list[str]:
    """The lines of a layer drawn as one box: title, settings, shapes in and out,
    parameters, repeats."""
    shapes = ""
    if show_shapes:
        shapes = f"{_shapes(source, attrs['inputs'])} → {_shapes(source, attrs['outputs'])}"
    settings = settings_text(attrs["type"], attrs.get("settings", "")) if show_settings else ""
    return [line for line in (title, settings, shapes, count_text(attrs["num_params"]),
                              f"× {repeats}" if repeats > 1 else "") if line]


def tensor_lines(attrs: Mapping[str, Any], show_shapes: bool) -> list[str]:
    """A tensor: the model's name for it (inputs and outputs), shape, dtype if not float32.

    >>> tensor_lines({"name": "input_ids", "shape": (2, 8), "dtype": "int64"}, True)
    ['input_ids', '2×8 int64']
    """
    dtype = "" if attrs["dtype"] == "float32" else attrs["dtype"]
    shape = shape_text(attrs["shape"]) if show_shapes else ("" if dtype else "tensor")
    return [line for line in (attrs.get("name", ""), " ".join(p for p in (shape, dtype) if p))
            if line]


def param_lines(attrs: Mapping[str, Any], show_shapes: bool) -> list[str]:
    name = attrs["qualname"].rpartition(".")[2]
    return [name, shape_text(attrs["shape"])] if show_shapes else [name]


#: The ops whose arguments say which part of a tensor they take or along which dimension
#: they work (without them, ``getitem`` and ``cat`` read the same everywhere): the drawn
#: name is followed by their argument text where it is short.
ARGS_DRAWN = frozenset({"getitem", "cat", "concat", "concatenate", "stack", "split", "chunk",
                        "unbind", "narrow", "select", "index_select", "gather", "softmax",
                        "log_softmax", "topk", "argmax", "argmin", "sum", "mean", "amax",
                        "amin", "max", "min", "cumsum", "roll", "flip"})
#: The longest argument text drawn after an op's name, in characters.
MAX_DRAWN_ARGS = 16
#: The names of the arguments after the tensor(s) of the ops of :data:`ARGS_DRAWN` that the
#: code may give by position: drawn named, ``softmax -1`` would read as a subtraction and
#: ``cat 1`` as a count.
_POSITIONAL = {
    **dict.fromkeys(("cat", "concat", "concatenate", "stack", "softmax", "log_softmax",
                     "cumsum", "unbind", "gather"), ("dim",)),
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin"),
                    ("dim", "keepdim")),
    "flip": ("dims",), "roll": ("shifts", "dims"), "topk": ("k", "dim"),
    "split": ("split_size", "dim"), "chunk": ("chunks", "dim"),
    "narrow": ("dim", "start", "length"), "select": ("dim", "index"),
    "index_select": ("dim",),
}


def named_args(name: str, args: str) -> str:
    """An op's argument text with the leading arguments given by position named, for the
    ops whose names :data:`_POSITIONAL` knows (an index or a slice stays as written).

    >>> named_args("softmax", "-1"), named_args("cat", "1"), named_args("sum", "-1, keepdim=True")
    ('dim=-1', 'dim=1', 'dim=-1, keepdim=True')
    >>> named_args("getitem", "[:, -1]"), named_args("topk", "5, 1"), named_args("mean", "dim=1")
    ('[:, -1]', 'k=5, dim=1', 'dim=1')
    """
    names = _POSITIONAL.get(name)
    if not names:
        return args
    items = split_items(args)
    for position, item in enumerate(items[:len(names)]):
        if "=" in item:
            break
        items[position] = f"{names[position]}={item}"
    return ", ".join(items)


def op_lines(attrs: Mapping[str, Any], show_shapes: bool) -> list[str]:
    """An op: its name (``(backward)`` after a backward collective's) and, for the ops of
    :data:`ARGS_DRAWN`, its short argument text; its result's shape where it was recorded
    (``ops="torch"``) and, for a collective, the bytes this rank hands to it.

    >>> op_lines({"name": "getitem", "args": "[:, -1]", "shape": (2, 4)}, True)
    ['getitem [:, -1]', '2×4']
    >>> op_lines({"name": "add", "args": "1.0"}, True)
    ['add']

    >>> op_lines({"name": "all_gather", "comm_bytes": 560}, True)
    ['all_gather', '560 B']
    >>> op_lines({"name": "all_reduce", "comm_bytes": 1152, "phase": "backward"}, True)
    ['all_reduce (backward)', '1.2 kB']
    """
    shape = attrs.get("shape") if show_shapes else None
    name = attrs["name"] + (" (backward)" if attrs.get("phase") == "backward" else "")
    args = attrs.get("args")
    if attrs["name"] in ARGS_DRAWN and args and len(args) <= MAX_DRAWN_ARGS:
        name += " " + named_args(attrs["name"], args)
    lines = [name] if shape is None else [name, shape_text(shape)]
    if "comm_bytes" in attrs:
        lines.append(cost_text(attrs["comm_bytes"], "bytes"))
    return lines


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:#@-]")


def css_class(name: str) -> str:
    """A class name made of safe characters only, like :func:`xml_id`.

    >>> css_class('T<"x">')
    'T_3c__22_x_22__3e_'
    """
    return _UNSAFE.sub(lambda match: f"_{ord(match.group()):x}_", name)


#: What an escaped id escapes: the unsafe characters and the escape's own ``_``.
_ID_ESCAPED = re.compile(r"[^A-Za-z0-9.:#@-]")


def id_part(node_id: str) -> str:
    """A graph id as safe characters, one to one: an id of ``[A-Za-z0-9_.:#@-]`` only (every
    id the recorder makes from Python names) as it is; any other starts with ``_`` (which no
    graph id does), its characters outside that set as ``_xx_`` (their code point in hex)
    and its own ``_`` as ``__``. So ``a"b`` and a module named ``a_22_b`` stay apart.

    >>> id_part("layer:ln_f#0"), id_part('layer:a"b#0'), id_part("layer:a_22_b#0")
    ('layer:ln_f#0', '_layer:a_22_b#0', 'layer:a_22_b#0')
    >>> id_part('layer:x_"#0')
    '_layer:x___22_#0'
    """
    if not _UNSAFE.search(node_id):
        return node_id
    return "_" + _ID_ESCAPED.sub(lambda match: "__" if match.group() == "_"
                                 else f"_{ord(match.group()):x}_", node_id)


def xml_id(prefix: str, node_id: str) -> str:
    """A stable SVG ``id`` for a graph id (:func:`id_part`), so that markup in module names
    cannot leak and no two nodes share one.

    >>> xml_id("n", "layer:a<b>#0")
    'n-_layer:a_3c_b_3e_#0'
    """
    return f"{prefix}-{id_part(node_id)}"
