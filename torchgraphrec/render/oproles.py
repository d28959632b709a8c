"""What some ops mean to a reader: layout-only ops (drawn as an edge label) and argument roles."""

from __future__ import annotations

import itertools
from typing import Mapping

import networkx as nx

__all__ = ["LAYOUT_OPS", "IDENTITY_OPS", "RESHAPE", "ROLES", "SIDE_ROLES", "ROLE_PORTS",
           "is_layout", "is_identity", "is_bridged", "argument_roles", "stronger",
           "role_labels", "in_role_order"]

#: Ops that only change how a tensor's elements are laid out: a chain of them between two
#: drawn nodes is one edge labelled :data:`RESHAPE` (``include_ops="all"`` draws each).
LAYOUT_OPS = frozenset({"view", "reshape", "transpose", "permute", "contiguous", "flatten",
                        "unflatten", "squeeze", "unsqueeze", "expand", "view_as", "reshape_as",
                        "t", "movedim", "swapaxes"})
#: Ops that return their input as it is, only wrapped (the functional collectives' result
#: wrapped in an ``AsyncCollectiveTensor``) or waited for: bridged by an edge with no label
#: of their own (``include_ops="all"`` draws each). Names without their overload.
IDENTITY_OPS = frozenset({"_wrap_tensor_autograd", "wait_tensor"})
#: The label of an edge that stands for a chain of layout ops.
RESHAPE = "reshape"
#: What each tensor argument of an op is, in the order the op received them.
ROLES: Mapping[str, tuple[str, ...]] = {
    "scaled_dot_product_attention": ("query", "key", "value", "mask"),
}
#: The roles the main path never enters an op through: it comes in by the first argument
#: (attention's query, whose shape its output has), so that the key's longer way (rotary,
#: a cache's ``cat``) is not drawn straight down the middle with the query beside it.
SIDE_ROLES = frozenset(role for roles in ROLES.values() for role in roles[1:])
_RANK = {role: rank for roles in ROLES.values() for rank, role in enumerate(roles)}
#: Where each role's edge ends on the op, by ``rankdir``: in order along the side the flow
#: comes in by (Graphviz ignores a node's ``ordering`` inside a cluster; ports it keeps).
ROLE_PORTS: Mapping[str, Mapping[str, str]] = {
    "TB": {"query": "nw", "key": "n", "value": "ne", "mask": "e"},
    "BT": {"query": "sw", "key": "s", "value": "se", "mask": "e"},
    "LR": {"query": "nw", "key": "w", "value": "sw", "mask": "s"},
    "RL": {"query": "ne", "key": "e", "value": "se", "mask": "s"},
}


def is_layout(attrs: Mapping) -> bool:
    """Whether a node is a layout-only op.

    >>> is_layout({"kind": "op", "name": "transpose"}), is_layout({"kind": "op", "name": "add"})
    (True, False)
    """
    return attrs.get("kind") == "op" and attrs.get("name") in LAYOUT_OPS


def is_identity(attrs: Mapping) -> bool:
    """Whether a node is an identity wrapper op (:data:`IDENTITY_OPS`).

    >>> is_identity({"kind": "op", "name": "_wrap_tensor_autograd.default"})
    True
    >>> is_identity({"kind": "op", "name": "all_reduce"})
    False
    """
    return attrs.get("kind") == "op" and \
        str(attrs.get("name", "")).partition(".")[0] in IDENTITY_OPS


def is_bridged(attrs: Mapping) -> bool:
    """Whether a node is drawn as (part of) the edge that bridges it at
    ``include_ops=True``: a layout op or an identity wrapper."""
    return is_layout(attrs) or is_identity(attrs)


def argument_roles(graph: nx.DiGraph) -> dict[tuple[str, str], str]:
    """The role of each recorded edge into an op of :data:`ROLES`, by argument order (the
    order its edges were recorded in, or the ``positions`` an edge stands for where one
    source was given more than once: ``query/key/value`` for one tensor given as all
    three).

    >>> g = nx.DiGraph()
    >>> g.add_node("op", kind="op", name="scaled_dot_product_attention")
    >>> g.add_node("h", kind="tensor"); g.add_node("k", kind="tensor")
    >>> g.add_edge("h", "op", seq=1, positions=(0, 2)); g.add_edge("k", "op", seq=2, positions=(1,))
    >>> argument_roles(g)
    {('h', 'op'): 'query/value', ('k', 'op'): 'key'}
    """
    found: dict[tuple[str, str], str] = {}
    for node, attrs in graph.nodes(data=True):
        roles = ROLES.get(attrs.get("name", "")) if attrs["kind"] == "op" else None
        if not roles:
            continue
        edges = sorted(graph.in_edges(node, data=True), key=lambda edge: edge[2]["seq"])
        # each argument given, in order: an edge once per position it stands for
        given = sorted((position, order, source)
                       for order, (source, _, data) in enumerate(edges)
                       for position in data.get("positions", (order,)))
        given = [source for *_, source in given if graph.nodes[source]["kind"] != "param"]
        for source, role in zip(given, roles):
            key = (source, node)
            found[key] = stronger(found[key], role) if key in found else role
    return found


def stronger(*labels: str) -> str:
    """The label an edge keeps where several reach it: their roles, else ``reshape``, else
    none. Edges of different roles merged into one (query, key and value split from one
    projection) keep them all, joined in :data:`ROLES` order (:func:`role_labels`).

    >>> stronger("", "reshape", "query"), stronger("reshape", ""), stronger("", "")
    ('query', 'reshape', '')
    >>> stronger("value", "reshape", "key"), stronger("key/value", "query")
    ('key/value', 'query/key/value')
    """
    roles = {role for label in labels if label and label != RESHAPE
             for role in label.split("/")}
    if roles:
        return "/".join(sorted(roles, key=lambda role: (_RANK.get(role, len(_RANK)), role)))
    return RESHAPE if RESHAPE in labels else ""


def role_labels() -> list[str]:
    """Every label :func:`stronger` can give an edge of roles: each op's roles and every
    combination of them, in order.

    >>> role_labels()[:5]
    ['query', 'key', 'value', 'mask', 'query/key']
    """
    found: dict[str, None] = {}
    for roles in ROLES.values():
        for size in range(1, len(roles) + 1):
            for combination in itertools.combinations(roles, size):
                found["/".join(combination)] = None
    return list(found)


def in_role_order(edges: list[tuple[str, str]],
                  labels: Mapping[tuple[str, str], str]) -> list[tuple[str, str]]:
    """``edges`` with those into one op that carry a role put in the order of the roles,
    in the places they held (the engine draws an ``ordering=in`` node's arguments in the
    order its edges come: query, key, value). The page's composer does the same
    (``tgrInRoleOrder`` in ``templates/compose.js``).

    >>> in_role_order([("v", "a"), ("x", "y"), ("q", "a"), ("k", "a")],
    ...               {("v", "a"): "value", ("q", "a"): "query", ("k", "a"): "key"})
    [('q', 'a'), ('x', 'y'), ('k', 'a'), ('v', 'a')]
    """
    rank = {role: index for roles in ROLES.values() for index, role in enumerate(roles)}
    places: dict[str, list[int]] = {}
    for i, edge in enumerate(edges):
        if labels.get(edge) in rank:
            places.setdefault(edge[1], []).append(i)
    found = list(edges)
    for where in places.values():
        ordered = sorted((edges[i] for i in where), key=lambda edge: rank[labels[edge]])
        for place, edge in zip(where, ordered):
            found[place] = edge
    return found
