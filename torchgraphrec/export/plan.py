"""Which recorded nodes become Model Explorer nodes, in which nested layer, wired how."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Optional

import networkx as nx

__all__ = ["Plan", "graph_id", "namespace_part"]


def graph_id(graph: nx.DiGraph) -> str:
    """The id of the one Model Explorer graph a recording becomes (node data refers to it)."""
    return str(graph.graph.get("model") or "model")


def namespace_part(name: str) -> str:
    """A call's name written as one part of a Model Explorer namespace, which Model
    Explorer shows as the name itself. There ``/`` separates the parts unless written
    ``\\/`` (shown as ``/`` again), and of a namespace holding ``;`` it keeps only the
    last ``;``-separated part, with no escape: a ``;`` is written as the fullwidth ``；``.

    >>> print(namespace_part("d.enc/dec: Linear"), namespace_part("d.a;b: ReLU"))
    d.enc\\/dec: Linear d.a；b: ReLU
    """
    return name.replace("/", "\\/").replace(";", "\uff1b")


def _name_in(parent: Optional[dict], attrs: dict) -> str:
    """A call's name inside its parent call: ``attn`` for ``h.0.attn`` under ``h.0``."""
    qualname, outer = attrs["qualname"], (parent or {}).get("qualname", "")
    if outer and qualname.startswith(outer + "."):
        return qualname[len(outer) + 1:]
    return qualname


class Plan:
    """How one recording maps onto Model Explorer's graph.

    * A layer call holding ops or other calls is a *group*: Model Explorer's nested layer,
      named by a path of call names (``h.0: GPT2Block/attn: GPT2Attention``). A recording
      with one root call leaves the root out, so the model's own children are on top.
    * Ops, params, the model's inputs, constants and calls holding nothing (a
      ``Dropout`` in eval mode, every call with ``ops="none"``) are Model Explorer nodes,
      placed in the group of the call they belong to. Every model output gets a node too.
    * A tensor at a call's boundary is not a node but an edge: an output of the node that
      produced it, whose shape and dtype are that output's metadata.
    """

    def __init__(self, graph: nx.DiGraph) -> None:
        self.graph = graph
        layers = {n: a for n, a in graph.nodes(data=True) if a["kind"] == "layer"}
        self.groups = self._groups(layers)
        self.names: dict[str, str] = {}
        self.paths = self._paths(layers, self.names)
        self.producers = self._producers()
        #: a model output that is a value returned as it came in (an input, a parameter):
        #: not a node, but the edge out of the node it was
        self.passed = dict(self._passed_sources())
        self.outputs: dict[str, list[str]] = defaultdict(list)
        for tensor in sorted(self.producers, key=lambda n: graph.nodes[n]["seq"]):
            self.outputs[self.producers[tensor]].append(tensor)

    def _groups(self, layers: dict) -> set[str]:
        groups: set[str] = set()
        for _, attrs in self.graph.nodes(data=True):
            if attrs["kind"] in ("op", "layer"):
                up = attrs["parent"]
                while up is not None and up not in groups:
                    groups.add(up)
                    up = layers[up]["parent"]
        return groups

    @staticmethod
    def _paths(layers: dict, names: dict[str, str]) -> dict[Optional[str], str]:
        """Each call's group path; ``names`` gets each call's name, its own part of the
        path before :func:`namespace_part` writes it there."""
        children: dict[Optional[str], list[str]] = defaultdict(list)
        for node in sorted(layers, key=lambda n: layers[n]["seq"]):
            children[layers[node]["parent"]].append(node)
        paths: dict[Optional[str], str] = {None: ""}
        if len(children[None]) == 1:  # the model itself: its children go on top
            paths[children[None][0]] = ""
        for parent in sorted(children, key=lambda n: -1 if n is None else layers[n]["depth"]):
            outer = layers.get(parent) if parent is not None else None
            short = {n: _name_in(outer, layers[n]) if outer else layers[n]["type"]
                     for n in children[parent]}
            clashes = Counter((short[n], layers[n]["call_index"]) for n in children[parent])
            # at the top, modules of one type a Recorder saw called apart, named by type
            modules = defaultdict(set)
            for node in children[parent]:
                modules[short[node]].add(layers[node]["qualname"])
            for node in children[parent]:
                attrs = layers[node]
                # two modules called side by side under one name: by their qualnames (at the
                # top, by any call of theirs; the model's own qualname is "")
                clash = clashes[short[node], attrs["call_index"]] > 1 if outer else \
                    len(modules[short[node]]) > 1 and attrs["qualname"] != ""
                name = attrs["qualname"] if clash else short[node]
                # a name with a "#" of its own ("x#1", beside x's second call "x#1") has its
                # call number always, as the layer's id has it
                name += f"#{attrs['call_index']}" if attrs["call_index"] or "#" in name else ""
                names[node] = f"{name}: {attrs['type']}" if outer or clash else name
                part = namespace_part(names[node])
                paths.setdefault(node, "/".join(filter(None, (paths[parent], part))))
        return paths

    def _passed_sources(self) -> list[tuple[str, str]]:
        """``(tensor, the tensor or param it is)`` for each output fed by nothing else."""
        graph, found = self.graph, []
        for node, attrs in graph.nodes(data=True):
            if attrs["kind"] == "tensor" and attrs["role"] == "output" \
                    and graph.in_degree(node) == 1:
                source = next(iter(graph.predecessors(node)))
                if graph.nodes[source]["kind"] in ("tensor", "param"):
                    found.append((node, source))
        return found

    def _producers(self) -> dict[str, str]:
        """``{tensor: node}`` for the tensors drawn as an output of another node."""
        found = {}
        for node, attrs in self.graph.nodes(data=True):
            if attrs["kind"] != "tensor":
                continue
            sources = [(self.graph.nodes[s]["kind"] != "op", -self.graph.nodes[s]["depth"],
                        self.graph.edges[s, node]["seq"], s)
                       for s in self.graph.predecessors(node)
                       if self.graph.nodes[s]["kind"] == "op" or self._drawn_call(s)]
            if sources:
                found[node] = min(sources)[3]  # an op first, else the innermost call
        return found

    def is_node(self, node: str) -> bool:
        """Whether ``node`` is drawn as a Model Explorer node of its own."""
        attrs = self.graph.nodes[node]
        if attrs["kind"] == "layer":
            return node not in self.groups
        return attrs["kind"] != "tensor" or (node not in self.producers
                                             and node not in self.passed)

    def _drawn_call(self, node: str) -> bool:
        # A call drawn as a node (it holds nothing) can produce a tensor; a group cannot.
        return self.graph.nodes[node]["kind"] == "layer" and node not in self.groups

    def namespace(self, node: str) -> str:
        """The group path a node is drawn in: its call's, or the nearest group above."""
        up = self.graph.nodes[node]["parent"]
        while up is not None and up not in self.groups:
            up = self.graph.nodes[up]["parent"]
        return self.paths[up]

    def source(self, node: str) -> Optional[tuple[str, int]]:
        """The Model Explorer node and output index that ``node``'s value comes out of."""
        if node in self.producers:
            producer = self.producers[node]
            return producer, self.outputs[producer].index(node)
        if node in self.passed:
            return self.source(self.passed[node])
        return (node, 0) if self.is_node(node) else None
