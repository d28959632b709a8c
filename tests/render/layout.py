"""Reading a drawing back through the engine's -Tjson0 output (never by parsing DOT)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from torchgraphrec.render.engine import run_engine

if TYPE_CHECKING:
    import networkx as nx


def layout(dot: str) -> dict[str, Any]:
    """The engine's JSON description of ``dot``'s layout."""
    return json.loads(run_engine(dot, "json0"))


def cluster_parents(drawing: dict[str, Any]) -> dict[str, Optional[str]]:
    """Each cluster's ``id`` mapped to its enclosing cluster's ``id`` (``None`` at the top)."""
    objects = {o["_gvid"]: o for o in drawing.get("objects", [])}
    parents: dict[str, Optional[str]] = {}
    for obj in objects.values():
        if obj.get("name", "").startswith("cluster_"):  # not rank=same subgraphs
            parents.setdefault(obj["id"], None)
            for child in obj.get("subgraphs", []):
                if objects[child]["name"].startswith("cluster_"):
                    parents[objects[child]["id"]] = obj["id"]
    return parents


def drawn_nodes(drawing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The drawn nodes (not clusters, not invisible spacers) by their ``id``."""
    return {o["id"]: o for o in drawing.get("objects", [])
            if "nodes" not in o and "subgraphs" not in o and o.get("style") != "invis"}


def cluster_depth(parents: dict[str, Optional[str]], cluster: str) -> int:
    depth = 0
    while parents[cluster] is not None:
        cluster, depth = parents[cluster], depth + 1
    return depth


def drawn_edges(drawing: dict[str, Any]) -> list[tuple[str, str]]:
    """The drawn edges as ``(tail id, head id)``, in the order the engine lists them."""
    ids = {o["_gvid"]: o.get("id", o["name"]) for o in drawing.get("objects", [])}
    return [(ids[e["tail"]], ids[e["head"]]) for e in drawing.get("edges", [])
            if e.get("style") != "invis"]


def flow(drawing: dict[str, Any]) -> "nx.DiGraph":
    """The drawn edges as a graph of node ids (``n-…``)."""
    import networkx as nx

    return nx.DiGraph(drawn_edges(drawing))


def clusters(drawing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The drawn clusters by their ``id``."""
    return {o["id"]: o for o in drawing.get("objects", []) if o["name"].startswith("cluster_")}


def title_of(cluster: dict[str, Any]) -> str:
    """A cluster's title as it reads (its label, an HTML-like one included, as text)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]*>", "", cluster.get("label", "")))
