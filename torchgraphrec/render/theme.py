"""Themes: how each kind of node, edge and cluster is drawn, in ``#rrggbb`` colours only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

__all__ = ["Theme", "THEMES", "SCALE", "GREYS", "scale_color", "is_logarithmic", "text_color"]

#: The colours of ``color_by``, from the smallest value to the largest: ColorBrewer's
#: YlOrRd, light to dark, so the costliest nodes stand out most (and print darkest) while
#: the many that cost nothing stay pale; colour-blind safe, monotone in greyscale.
SCALE = ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c",
         "#bd0026", "#800026")

#: The paper theme's scale: the same ramp in greys.
GREYS = ("#f7f7f7", "#e0e0e0", "#cccccc", "#b3b3b3", "#999999", "#808080", "#666666",
         "#4d4d4d", "#333333")


def is_logarithmic(low: float, high: float) -> bool:
    """Whether values from ``low`` to ``high`` are shown on a log scale: all positive and
    spanning at least two decades, as gradient magnitudes do."""
    return low > 0 and high >= 100 * low


def _luminance(color: str) -> float:
    """The relative luminance of ``#rrggbb`` (WCAG 2)."""
    channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def text_color(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill``.

    >>> text_color("#ffffcc"), text_color("#800026"), text_color("#fc4e2a")
    ('#000000', '#ffffff', '#000000')
    """
    luminance = _luminance(fill)
    return "#000000" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "#ffffff"


def scale_color(value: float, low: float, high: float,
                palette: Sequence[str] = SCALE) -> tuple[str, str]:
    """The fill for ``value`` on ``palette`` between ``low`` and ``high`` (on a log scale
    where :func:`is_logarithmic`), and a text colour that reads on it.

    >>> scale_color(0.0, 0.0, 1.0), scale_color(1.0, 0.0, 1.0)
    (('#ffffcc', '#000000'), ('#800026', '#ffffff'))
    >>> scale_color(0.01, 0.001, 1.0)[0] == SCALE[3]
    True
    """
    if is_logarithmic(low, high):
        value, low, high = math.log10(value), math.log10(low), math.log10(high)
    share = 0.0 if high <= low else (value - low) / (high - low)
    step = min(len(palette) - 1, max(0, int(share * len(palette))))
    return palette[step], text_color(palette[step])

Attrs = Mapping[str, str]


@dataclass(frozen=True)
class Theme:
    """Graphviz attributes per drawn element. Colours are always ``#rrggbb`` (Graphviz 2.42
    paints ``#rgb`` black).

    A diff's drawing adds, per status (``same``, ``added``, ``removed``, ``changed`` and
    ``inside``: the node is the same, something under it is not), the attributes of its
    nodes (``diff_node``), clusters (``diff_cluster``) and edges (``diff_edge``, without
    ``changed`` and ``inside``); a ``style`` there adds to the element's own style words.
    ``scale`` is the colour ramp of ``color_by``, smallest value first.
    """

    name: str
    graph: Attrs
    node: Attrs
    edge: Attrs
    cluster: Attrs
    repeat_cluster: Attrs
    layer: Attrs
    tensor: Attrs
    model_tensor: Attrs
    param: Attrs
    op: Attrs
    diff_node: Mapping[str, Attrs]
    diff_cluster: Mapping[str, Attrs]
    diff_edge: Mapping[str, Attrs]
    scale: tuple[str, ...] = SCALE


_FONT = "Helvetica"

DEFAULT = Theme(
    name="default",
    graph={"fontname": _FONT, "fontsize": "12", "nodesep": "0.25", "ranksep": "0.35",
           "bgcolor": "#ffffff", "pad": "0.2"},
    node={"fontname": _FONT, "fontsize": "10", "penwidth": "1", "height": "0.3",
          "margin": "0.08,0.04"},
    edge={"color": "#5c6370", "arrowsize": "0.6", "fontname": _FONT, "fontsize": "9",
          "fontcolor": "#5c6370"},
    cluster={"style": "rounded,filled", "fillcolor": "#f5f7fb", "color": "#9aa5b8",
             "fontcolor": "#2b3340", "fontsize": "11", "labeljust": "l", "margin": "8"},
    repeat_cluster={"style": "rounded,dashed,filled", "fillcolor": "#eef4ff",
                    "color": "#4c6ef5", "fontcolor": "#364fc7", "fontsize": "11",
                    "labeljust": "r", "margin": "8"},
    layer={"shape": "box", "style": "rounded,filled", "fillcolor": "#dbe7fb",
           "color": "#4c6ef5", "fontcolor": "#1c2a4a"},
    tensor={"shape": "box", "style": "filled", "fillcolor": "#ebfbee", "color": "#2f9e44",
            "fontsize": "9", "height": "0.22"},
    model_tensor={"shape": "box", "style": "filled,bold", "fillcolor": "#d3f9d8",
                  "color": "#2b8a3e", "fontsize": "10"},
    param={"shape": "box", "style": "filled", "fillcolor": "#f1f3f5", "color": "#adb5bd",
           "fontsize": "8", "fontcolor": "#495057", "height": "0.2"},
    op={"shape": "ellipse", "style": "filled", "fillcolor": "#fff4e6", "color": "#f08c00",
        "fontsize": "9", "height": "0.22"},
    # green added, red dashed removed, amber changed, unchanged greyed out
    diff_node={
        # greyed, yet legible in print: text at 4.5:1 on its fill, borders that show
        "same": {"color": "#adb5bd", "fillcolor": "#f8f9fa", "fontcolor": "#6c757d"},
        "added": {"color": "#2b8a3e", "fillcolor": "#d3f9d8", "fontcolor": "#143d1e",
                  "penwidth": "2"},
        "removed": {"color": "#c92a2a", "fillcolor": "#ffe3e3", "fontcolor": "#6b1414",
                    "penwidth": "2", "style": "dashed"},
        "changed": {"color": "#e67700", "fillcolor": "#ffec99", "fontcolor": "#4d2b00",
                    "penwidth": "2"},
        "inside": {"color": "#e67700", "fillcolor": "#ffffff", "fontcolor": "#1c2a4a",
                   "penwidth": "2"},
    },
    diff_cluster={
        # penwidth given: a cluster inherits its enclosing one's
        "same": {"color": "#ced4da", "fillcolor": "#fcfcfd", "fontcolor": "#6c757d",
                 "penwidth": "1"},
        "added": {"color": "#2b8a3e", "fillcolor": "#f2fbf4", "fontcolor": "#2b8a3e",
                  "penwidth": "2"},
        "removed": {"color": "#c92a2a", "fillcolor": "#fff5f5", "fontcolor": "#c92a2a",
                    "penwidth": "2", "style": "dashed"},
        "changed": {"color": "#e67700", "fillcolor": "#fffbeb", "fontcolor": "#9c4a00",
                    "penwidth": "2"},
        "inside": {"color": "#e67700", "fillcolor": "#ffffff", "fontcolor": "#9c4a00",
                   "penwidth": "2"},
    },
    diff_edge={
        "same": {"color": "#adb5bd"},
        "added": {"color": "#2b8a3e", "penwidth": "1.6"},
        "removed": {"color": "#c92a2a", "penwidth": "1.6", "style": "dashed"},
    },
)

_SERIF = "Times-Roman"

PAPER = Theme(
    name="paper",
    graph={**DEFAULT.graph, "fontname": _SERIF},
    node={**DEFAULT.node, "fontname": _SERIF},
    edge={"color": "#000000", "arrowsize": "0.6", "fontname": _SERIF, "fontsize": "9",
          "fontcolor": "#000000"},
    cluster={"style": "rounded", "color": "#000000", "fontcolor": "#000000",
             "fontsize": "11", "labeljust": "l", "margin": "8"},
    repeat_cluster={"style": "rounded,dashed", "color": "#000000", "fontcolor": "#000000",
                    "fontsize": "11", "labeljust": "r", "margin": "8"},
    layer={"shape": "box", "style": "rounded,filled", "fillcolor": "#e6e6e6",
           "color": "#000000", "fontcolor": "#000000"},
    tensor={"shape": "box", "style": "solid", "color": "#000000", "fontsize": "9",
            "height": "0.22"},
    model_tensor={"shape": "box", "style": "bold", "color": "#000000", "fontsize": "10"},
    param={"shape": "box", "style": "dotted", "color": "#000000", "fontsize": "8",
           "height": "0.2"},
    op={"shape": "ellipse", "style": "solid", "color": "#000000", "fontsize": "9",
        "height": "0.22"},
    # readable in greyscale: the status is in the line (thick, dashed, double, dotted) and
    # the fill's darkness, not only in a hue
    diff_node={
        "same": {"color": "#b3b3b3", "fillcolor": "#ffffff", "fontcolor": "#8c8c8c",
                 "style": "filled"},
        "added": {"color": "#000000", "fillcolor": "#d4d4d4", "fontcolor": "#000000",
                  "penwidth": "2.5", "style": "filled"},
        "removed": {"color": "#000000", "fillcolor": "#ffffff", "fontcolor": "#4d4d4d",
                    "penwidth": "1.5", "style": "dashed,filled"},
        "changed": {"color": "#000000", "fillcolor": "#efefef", "fontcolor": "#000000",
                    "peripheries": "2", "style": "filled"},
        "inside": {"color": "#000000", "fillcolor": "#ffffff", "fontcolor": "#000000",
                   "penwidth": "2", "style": "dotted,filled"},
    },
    diff_cluster={
        "same": {"color": "#b3b3b3", "fontcolor": "#8c8c8c", "penwidth": "1"},
        "added": {"color": "#000000", "fillcolor": "#f0f0f0", "penwidth": "2.5",
                  "style": "filled"},
        "removed": {"color": "#000000", "penwidth": "1.5", "style": "dashed"},
        "changed": {"color": "#000000", "penwidth": "2.5"},
        "inside": {"color": "#000000", "penwidth": "2", "style": "dotted"},
    },
    diff_edge={
        "same": {"color": "#b3b3b3"},
        "added": {"color": "#000000", "penwidth": "2"},
        "removed": {"color": "#000000", "penwidth": "1.2", "style": "dashed"},
    },
    scale=GREYS,
)

THEMES: Mapping[str, Theme] = {theme.name: theme for theme in (DEFAULT, PAPER)}
