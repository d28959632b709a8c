"""Exports for other tools: Model Explorer's graph and node data, Chrome/Perfetto traces."""

from torchgraphrec.export.model_explorer import to_model_explorer
from torchgraphrec.export.node_data import to_node_data
from torchgraphrec.export.trace import to_trace

__all__ = ["to_model_explorer", "to_node_data", "to_trace"]
