"""Rendering: recorded graphs drawn as nested Graphviz clusters (DOT, SVG, PNG, PDF)."""

from torchgraphrec.render.dot import to_dot, to_pydot
from torchgraphrec.render.engine import EngineError, EngineFailure, find_engines
from torchgraphrec.render.options import RenderOptions

__all__ = ["to_dot", "to_pydot", "RenderOptions", "EngineError", "EngineFailure", "find_engines"]
