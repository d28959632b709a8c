"""Layout hints: the main path straight, parameters just above their op, q, k, v in a row."""

from __future__ import annotations

from typing import Optional

import networkx as nx

from torchgraphrec.render.oproles import ROLES, SIDE_ROLES
from torchgraphrec.render.view import View

__all__ = ["spine", "under_params", "entries", "role_rows"]


def spine(view: View) -> list[str]:
    """The drawn nodes on the longest path of the flow, input to output: the network's main
    path, drawn straight (skips, shorter, curve around it).

    Parameters are left out: they feed the path, they are not on it; so are the edges of
    :data:`~torchgraphrec.render.oproles.SIDE_ROLES`: the path enters attention through its
    query, and the key and value come in beside it, in that order. Where the drawn flow has
    a cycle (two calls drawn as boxes that each feed the other), there is no such path.
    """
    flow = nx.DiGraph()
    flow.add_nodes_from(n for n in view.nodes if view.kind(n) != "param")
    flow.add_edges_from((s, t) for s, t in view.edges if s in flow and t in flow
                        and view.labels.get((s, t)) not in SIDE_ROLES)
    if not flow.number_of_edges():
        return []
    try:
        return nx.dag_longest_path(flow)
    except nx.NetworkXUnfeasible:  # lifting closed a cycle (see edges.bridge): no one path
        return []


def under_params(view: View) -> dict[str, int]:
    """Each op drawn under parameters of its own cluster, with how many parameters feed it:
    a drawn parameter takes the rank before the first op it feeds in its cluster, so that
    its edge runs down inside the cluster (on one rank it was a flat edge, which Graphviz
    routes as an arc above the rank, out of every cluster). The report's composer finds the
    same (``tgrUnderParams``)."""
    targets: dict[str, list[str]] = {}
    for source, target in view.edges:
        targets.setdefault(source, []).append(target)
    under: dict[str, int] = {}
    for node in view.nodes:
        if view.kind(node) != "param":
            continue
        cluster = view.parent.get(node)
        near = [t for t in targets.get(node, ()) if view.parent.get(t) == cluster
                and view.kind(t) != "param"]
        if near:
            under[near[0]] = 0
    for source, target in view.edges:
        if target in under and view.kind(source) == "param":
            under[target] += 1
    return under


def entries(view: View, main_path: list[str]) -> dict[str, str]:
    """Each cluster's entry node: where the flow comes in at its top, under its title (the
    first node of ``main_path`` inside it, else the first one fed from outside)."""
    found: dict[str, str] = {}
    inside = view.inside()
    for node in main_path:
        for cluster, members in inside.items():
            if node in members:
                found.setdefault(cluster, node)
    fed = {target: source for source, target in view.edges}
    for cluster, members in inside.items():
        if cluster in found:
            continue
        order = sorted(members, key=lambda n: view.folded.nodes[n]["seq"])
        outside = [n for n in order if fed.get(n) is not None and fed[n] not in members]
        if outside or order:
            found[cluster] = (outside or order)[0]
    return found


def role_rows(view: View) -> dict[Optional[str], list[list[str]]]:
    """The boxes that make an op's role arguments (``q_proj``, ``k_proj``, ``v_proj``), by
    cluster, in role order: put on one rank left to right, so the projections read q, k, v
    whatever way each one's output takes (rotary, a cache's ``cat``) to attention.

    A role's box is the nearest box upstream of its edge among the op's cluster's own
    members (a mask made outside has none); a row is kept where at least two roles found
    one, all different, none feeding another.
    """
    rank = {role: index for roles in ROLES.values() for index, role in enumerate(roles)}
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for source, target in view.edges:
        preds.setdefault(target, []).append(source)
        succs.setdefault(source, []).append(target)
    rows: dict[Optional[str], list[list[str]]] = {}
    drawn = set(view.nodes)
    for node in view.nodes:
        into = sorted(((rank[view.labels[s, t]], s) for s, t in view.edges
                       if t == node and view.labels.get((s, t)) in rank), key=lambda i: i[0])
        cluster = view.parent.get(node)
        found = [_nearest_box(view, source, cluster, preds, drawn) for _, source in into]
        row = [box for box in found if box is not None]
        if len(row) >= 2 and len(set(row)) == len(row) \
                and not any(_reaches(a, set(row) - {a}, succs) for a in row):
            rows.setdefault(cluster, []).append(row)
    return rows


def _nearest_box(view: View, start: str, cluster: Optional[str], preds: dict[str, list[str]],
                 drawn: set[str]) -> Optional[str]:
    """The one box nearest upstream of ``start`` (itself included) walking the cluster's own
    members; ``None`` where there is none, or two at the same distance."""
    frontier, seen = [start], {start}
    while frontier:
        members = [n for n in frontier if view.parent.get(n) == cluster]
        boxes = [n for n in members if n in drawn and view.kind(n) == "box"]
        if boxes:
            return boxes[0] if len(boxes) == 1 else None
        frontier = []
        for node in members:
            for source in preds.get(node, ()):
                if source not in seen:
                    seen.add(source)
                    frontier.append(source)
    return None


def _reaches(start: str, others: set[str], succs: dict[str, list[str]]) -> bool:
    stack, seen = [start], {start}
    while stack:
        for target in succs.get(stack.pop(), ()):
            if target in others:
                return True
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return False
