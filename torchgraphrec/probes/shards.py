"""Probes on sharded tensors: statistics are of this rank's shard, computed without communicating."""

from __future__ import annotations

import torch

from torchgraphrec._torch import dtensor_local, dtensor_type

__all__ = ["local_shard"]


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``tensor``: a ``DTensor``'s local shard (a plain tensor, detached,
    so that a statistic of it never runs a collective; read as the DTensor holds it, with no
    autograd function, which a torch.func transform around it would refuse), any other
    tensor as it is.

    >>> x = torch.ones(2)
    >>> local_shard(x) is x
    True
    """
    found = dtensor_type()
    if found is not None and isinstance(tensor, found):
        return dtensor_local(tensor).detach()
    return tensor
