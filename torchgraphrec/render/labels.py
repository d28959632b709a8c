"""Label text for every drawn node, edge and cluster: the one place labels are escaped."""

from __future__ import annotations

import html
import re
from typing import Any, Mapping, Sequence

import graphviz

__all__ = ["escape", "join", "shape_text", "count_text", "layer_title", "box_label",
           "tensor_label", "param_label", "op_label", "xml_id", "css_class", "html_text"]


def escape(text: Any) -> str:
    r"""``text`` made safe inside a quoted DOT string.

    Backslashes are doubled (the graphviz package passes them through, and Graphviz reads
    them as escapes); quotes are escaped when the label is quoted.

    >>> escape('a\\b')
    'a\\\\b'
    """
    return str(text).replace("\\", "\\\\")


def join(*lines: str) -> graphviz.nohtml:
    r"""Escaped lines as one DOT label, never read as an HTML-like label (``<lambda>``).

    >>> str(join("<lambda>", "a&b"))
    '<lambda>\\na&b'
    """
    return graphviz.nohtml("\\n".join(escape(line) for line in lines if line != ""))


def html_text(text: Any) -> str:
    """``text`` made safe inside a Graphviz HTML-like label.

    >>> html_text('a<b & "c"')
    'a&lt;b &amp; &quot;c&quot;'
    """
    return html.escape(str(text), quote=True)


def shape_text(shape: Sequence[int]) -> str:
    """``(1, 3, 32, 32)`` as ``1×3×32×32``; a scalar as ``scalar``.

    >>> shape_text((1, 3, 32, 32)), shape_text(())
    ('1×3×32×32', 'scalar')
    """
    return "×".join(str(dim) for dim in shape) if shape else "scalar"


def count_text(count: int) -> str:
    """A parameter count, short: ``1.2M params``.

    >>> count_text(0), count_text(950), count_text(12_345), count_text(25_557_032)
    ('', '950 params', '12.3k params', '25.6M params')
    """
    if count <= 0:
        return ""
    for limit, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if count >= limit:
            return f"{count / limit:.1f}{suffix} params"
    return f"{count} params"


def layer_title(attrs: Mapping[str, Any]) -> str:
    """``encoder.0: Linear`` (or the type alone for the root call); later calls add ``#n``."""
    title = f"{attrs['qualname']}: {attrs['type']}" if attrs["qualname"] else attrs["type"]
    return f"{title} #{attrs['call_index']}" if attrs["call_index"] else title


def _shapes(graph: Any, ids: Sequence[str]) -> str:
    shapes = [shape_text(graph.nodes[i]["shape"]) for i in ids if i in graph.nodes]
    return ", ".join(shapes[:3]) + (", …" if len(shapes) > 3 else "")


def box_label(attrs: Mapping[str, Any], source: Any, show_shapes: bool,
              repeats: int = 1) -> graphviz.nohtml:
    """A layer drawn as one box: title, shapes in and out, parameters, repeats."""
    shapes = ""
    if show_shapes:
        shapes = f"{_shapes(source, attrs['inputs'])} → {_shapes(source, attrs['outputs'])}"
    return join(layer_title(attrs), shapes, count_text(attrs["num_params"]),
                f"× {repeats}" if repeats > 1 else "")


def tensor_label(attrs: Mapping[str, Any], show_shapes: bool) -> graphviz.nohtml:
    dtype = "" if attrs["dtype"] == "float32" else attrs["dtype"]
    return join(shape_text(attrs["shape"]) if show_shapes else "tensor", dtype)


def param_label(attrs: Mapping[str, Any], show_shapes: bool) -> graphviz.nohtml:
    name = attrs["qualname"].rpartition(".")[2]
    return join(name, shape_text(attrs["shape"]) if show_shapes else "")


def op_label(attrs: Mapping[str, Any]) -> graphviz.nohtml:
    return join(attrs["name"])


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:#@-]")


def css_class(name: str) -> str:
    """A class name made of safe characters only, like :func:`xml_id`.

    >>> css_class('T<"x">')
    'T_3c__22_x_22__3e_'
    """
    return _UNSAFE.sub(lambda match: f"_{ord(match.group()):x}_", name)


def xml_id(prefix: str, node_id: str) -> str:
    """A stable SVG ``id`` for a graph id: characters outside ``[A-Za-z0-9_.:#@-]`` become
    ``_xx_`` (their code point in hex), so that markup in module names cannot leak.

    >>> xml_id("n", "layer:a<b>#0")
    'n-layer:a_3c_b_3e_#0'
    """
    return f"{prefix}-{css_class(node_id)}"
