"""Probes: record what flows through a model (activations, gradients, their statistics)."""

from torchgraphrec.probes.probe import SITES, Context, Probe, probe

__all__ = ["SITES", "Context", "Probe", "probe"]
