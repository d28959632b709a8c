"""FSDP's unshard (copy-in, all-gather, split, views) drawn as one ``all_gather`` box per unit.

FSDP2 gathers a unit's parameters when the unit's forward starts: ``all_gather_copy_in``
packs this rank's shards, the collective gathers them, views and ``split_with_sizes_copy``
unpack them and ``as_strided`` views make the full parameters. Recorded op by op, that is a
dozen ops per unit standing where the weights should be; drawn, each unit's ops are one
``all_gather`` box (the collective's bytes on it) feeding the unit's parameters (in a later
forward, the ops that read them). Every op stays in the graph: ``include_ops="all"`` draws them as recorded.
"""

from __future__ import annotations

from typing import Iterable, Optional

import networkx as nx

from torchgraphrec.graph import calls_around

__all__ = ["COPY_IN", "BOX", "INTO", "unshard_units", "add_unshard"]

#: The op that starts each unit's unshard (``torch.ops.fsdp.all_gather_copy_in``).
COPY_IN = "all_gather_copy_in"
#: The attribute of a unit's box: the unit's call (a ``layer`` node).
BOX = "unshard_of"
#: The attribute of each node folded into a box: the box.
INTO = "folds_into"


def _machinery(graph: nx.DiGraph, own: set[str]) -> set[str]:
    """Of the ops and tensors a unit's call ran itself (``own``), those whose every
    neighbour it ran too: the unshard's ops talk only to one another, the model's own ops
    reach other calls."""
    return {node for node in own
            if all(n in own for n in (*graph.predecessors(node), *graph.successors(node)))}


def unshard_units(graph: nx.DiGraph) -> dict[str, list[str]]:
    """Each unit's unshard, by its ``all_gather_copy_in`` op: the ops and tensors connected
    to it among those its call ran for nothing but one another, in ``seq`` order.

    >>> g = nx.DiGraph()
    >>> for node, kind in [("l", "layer"), ("s", "tensor"), ("c", "op"), ("g", "op"),
    ...                    ("x", "tensor"), ("f", "op")]:
    ...     g.add_node(node, kind=kind, parent=None if node == "l" else "l", seq=len(g),
    ...                name={"c": COPY_IN, "g": "all_gather_single", "f": "relu"}.get(node))
    >>> g.add_edges_from([("s", "c"), ("c", "g"), ("x", "f")])
    >>> unshard_units(g)
    {'c': ['s', 'c', 'g']}
    """
    found: dict[str, list[str]] = {}
    units = {attrs["parent"] for _, attrs in graph.nodes(data=True)
             if attrs["kind"] == "op" and attrs.get("name") == COPY_IN}
    if not units:
        return found
    own: dict[Optional[str], set[str]] = {unit: set() for unit in units}
    for node, attrs in graph.nodes(data=True):
        if attrs["parent"] in own and attrs["kind"] in ("op", "tensor") \
                and attrs.get("role") not in ("input", "output"):
            own[attrs["parent"]].add(node)
    machinery = {unit: _machinery(graph, nodes) for unit, nodes in own.items()}
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] != "op" or attrs.get("name") != COPY_IN:
            continue
        unit = attrs["parent"]
        if node not in machinery[unit]:
            continue
        members = nx.node_connected_component(
            graph.subgraph(machinery[unit]).to_undirected(as_view=True), node)
        found[node] = sorted(members, key=lambda n: graph.nodes[n]["seq"])
    return found


def _unit_params(params: list[tuple[str, str]], qualname: str, nested: set[str]) -> list[str]:
    """The parameters FSDP gathers for the unit of module ``qualname``: those of its
    subtree outside the subtrees of the units nested in it (``nested``: their qualnames),
    from ``params`` (each param node with its qualname, in ``seq`` order)."""
    def inside(name: str, prefix: str) -> bool:
        return prefix == "" or name.startswith(prefix + ".")

    inner = [q for q in nested if q != qualname and inside(q, qualname)]
    return [node for node, name in params
            if inside(name, qualname) and not any(inside(name, q) for q in inner)]


def _box_attrs(graph: nx.DiGraph, copy_in: str, members: Iterable[str]) -> dict:
    """The box's attributes: an op named ``all_gather`` where the unit's collective ran,
    carrying the collective's bytes, and the time and costs of the whole unshard."""
    nodes = graph.nodes
    ops = [nodes[n] for n in members if nodes[n]["kind"] == "op"]
    gathers = [a for a in ops if a.get("collective") == "all_gather"]
    first = gathers[0] if gathers else nodes[copy_in]
    attrs = {key: value for key, value in first.items() if key not in ("shape", INTO)}
    # the same text for every unit alike: repeated blocks still fold into one
    attrs.update(name="all_gather", grad_fn=None, collective="all_gather",
                 args=f"FSDP unshard: {len(ops)} ops "
                      f"({', '.join(dict.fromkeys(a['name'] for a in ops))})")
    if gathers:
        attrs["comm_bytes"] = sum(int(a.get("comm_bytes", 0)) for a in gathers)
    for key, pick in (("t_start_ns", min), ("t_end_ns", max)):
        times = [a[key] for a in ops if a.get(key) is not None]
        if times:
            attrs[key] = pick(times)
    # the whole unshard's costs, not its first op's: its span, and its ops' own sums
    if "forward_ms" in attrs and "t_start_ns" in attrs:
        attrs["forward_ms"] = (attrs["t_end_ns"] - attrs["t_start_ns"]) / 1e6
    for key in ("self_ms", "flops", "backward_flops", "saved_bytes", "backward_ms"):
        if key in attrs:
            attrs[key] = sum(a.get(key, 0) for a in ops)
    return attrs


def add_unshard(graph: nx.DiGraph) -> nx.DiGraph:
    """``graph`` with one box per FSDP unit's unshard (a copy where any is found, else
    ``graph`` itself): an op node ``unshard:<copy-in id>`` with :data:`BOX` (the unit's
    call), an edge to each parameter the unit gathers, and :data:`INTO` on every node it
    stands for. The drawing maps those nodes to their box unless ``include_ops="all"``."""
    units = unshard_units(graph)
    if not units:
        return graph
    found = graph.copy()
    nodes = graph.nodes

    def qualname(unit: Optional[str]) -> str:
        return nodes[unit]["qualname"] if unit is not None else ""

    nested = {qualname(nodes[c]["parent"]) for c in units}
    params = sorted(((n, a["qualname"]) for n, a in nodes(data=True) if a["kind"] == "param"),
                    key=lambda item: nodes[item[0]]["seq"])
    for copy_in, members in units.items():
        box = f"unshard:{copy_in}"
        attrs = _box_attrs(graph, copy_in, members)
        found.add_node(box, **attrs, **{BOX: nodes[copy_in]["parent"]})
        for member in members:
            found.nodes[member][INTO] = box
        unit = nodes[copy_in]["parent"]
        for target in _gathered_for(graph, unit, _unit_params(params, qualname(unit), nested)):
            found.add_edge(box, target, kind="flow", seq=attrs["seq"], t_ns=0)
    return found


def _gathered_for(graph: nx.DiGraph, call: Optional[str], params: list[str]) -> list[str]:
    """What one unshard of the unit's ``params`` feeds: each parameter drawn inside ``call``
    (a parameter is drawn in the first call that used it), and in a later call of the unit
    (a second forward) the ops of that call that read the parameters, never the parameters
    drawn in an earlier call: an edge back to that call would run against time (and, with
    the edges of the data the calls truly share, make a cycle)."""
    def inside(node: str) -> bool:
        return call is None or call in calls_around(graph, node)

    fed: list[str] = []
    for param in params:
        if inside(param):
            fed.append(param)
            continue
        fed.extend(reader for reader in graph.successors(param)
                   if inside(reader) and reader not in fed)
    return fed
