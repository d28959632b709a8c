"""Layout hints: the main path drawn straight, parameters kept beside the op that uses them."""

from __future__ import annotations

from typing import Optional

import networkx as nx

from torchgraphrec.render.oproles import SIDE_ROLES
from torchgraphrec.render.view import View

__all__ = ["spine", "beside", "entries"]


def spine(view: View) -> list[str]:
    """The drawn nodes on the longest path of the flow, input to output: the network's main
    path, drawn straight (skips, shorter, curve around it).

    Parameters are left out: they feed the path, they are not on it; so are the edges of
    :data:`~torchgraphrec.render.oproles.SIDE_ROLES`: the path enters attention through its
    query, and the key and value come in beside it, in that order.
    """
    flow = nx.DiGraph()
    flow.add_nodes_from(n for n in view.nodes if view.kind(n) != "param")
    flow.add_edges_from((s, t) for s, t in view.edges if s in flow and t in flow
                        and view.labels.get((s, t)) not in SIDE_ROLES)
    return nx.dag_longest_path(flow) if flow.number_of_edges() else []


def beside(view: View) -> dict[Optional[str], list[tuple[str, str]]]:
    """Each drawn parameter with the first op it feeds in the same cluster, by cluster: the
    pair is put on one rank, so that parameters never push the flow apart."""
    pairs: dict[Optional[str], list[tuple[str, str]]] = {}
    targets: dict[str, list[str]] = {}
    for source, target in view.edges:
        targets.setdefault(source, []).append(target)
    for node in view.nodes:
        if view.kind(node) != "param":
            continue
        cluster = view.parent.get(node)
        near = [t for t in targets.get(node, ()) if view.parent.get(t) == cluster
                and view.kind(t) != "param"]
        if near:
            pairs.setdefault(cluster, []).append((node, near[0]))
    return pairs


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
