"""Comparing two recordings: matching their nodes, what changed, the union graph, the summary."""

from torchgraphrec.compare.core import GraphDiff, diff

__all__ = ["GraphDiff", "diff"]
