"""Reading a drawing back through the engine's -Tjson0 output (never by parsing DOT)."""

from __future__ import annotations

import json
from typing import Any, Optional

from torchgraphrec.render.engine import run_engine


def layout(dot: str) -> dict[str, Any]:
    """The engine's JSON description of ``dot``'s layout."""
    return json.loads(run_engine(dot, "json0"))


def cluster_parents(drawing: dict[str, Any]) -> dict[str, Optional[str]]:
    """Each cluster's ``id`` mapped to its enclosing cluster's ``id`` (``None`` at the top)."""
    objects = {o["_gvid"]: o for o in drawing.get("objects", [])}
    parents: dict[str, Optional[str]] = {}
    for obj in objects.values():
        if "subgraphs" in obj or obj.get("name", "").startswith("cluster_"):
            parents.setdefault(obj["id"], None)
            for child in obj.get("subgraphs", []):
                parents[objects[child]["id"]] = obj["id"]
    return parents


def drawn_nodes(drawing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The drawn nodes (not clusters) by their ``id``."""
    return {o["id"]: o for o in drawing.get("objects", []) if not o["name"].startswith("cluster_")}


def cluster_depth(parents: dict[str, Optional[str]], cluster: str) -> int:
    depth = 0
    while parents[cluster] is not None:
        cluster, depth = parents[cluster], depth + 1
    return depth
