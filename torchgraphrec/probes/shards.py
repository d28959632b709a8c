"""Probes on sharded tensors: statistics are of this rank's shard, computed without communicating."""

from __future__ import annotations

import torch

from torchgraphrec._torch import dtensor_type

__all__ = ["local_shard"]


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: a ``DTensor``'s local shard (a plain tensor, detached,
    so that a statistic of it never runs a collective), any other tensor as it is.

    >>> x = torch.ones(2)
    >>> local_shard(x) is x
    True
    """
    found = dtensor_type()
    if found is not None and isinstance(tensor, found):
        return tensor.detach().to_local()
    return tensor
