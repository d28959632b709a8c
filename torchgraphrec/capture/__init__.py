"""Capture: module hooks and a torch-function mode that record a model's execution as flat records."""

from torchgraphrec.capture.capture import OPS, Capture, check_ops

__all__ = ["Capture", "OPS", "check_ops"]
