"""The storages a tensor's data lives in, sparse layouts (which have no storage of their own) included."""

from __future__ import annotations

from typing import Any

import torch

from torchgraphrec._torch import DisableTorchFunction, exclude_python_dispatch
from torchgraphrec._torch.distributed import dtensor_local

__all__ = ["storages_of"]

_PLAIN = torch.Tensor

#: The tensors a sparse layout keeps its data in, by the methods that return them.
_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),  # private: the public ones coalesce first
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def storages_of(tensor: torch.Tensor) -> list[Any]:
    """The untyped storages holding ``tensor``'s data: its own, for a ``DTensor`` its
    local shard's (what this rank holds), or for a sparse tensor those of its indices and
    values; none where neither can be read (a layout PyTorch adds later), so that what
    cannot be counted is left out rather than guessed.

    >>> dense = torch.zeros(2, 3)
    >>> [storage.nbytes() for storage in storages_of(dense)]
    [24]
    >>> sparse = torch.sparse_coo_tensor([[0, 1], [2, 0]], [1.0, 2.0], (2, 3), check_invariants=True)
    >>> [storage.nbytes() for storage in storages_of(sparse)]  # int64 indices, float values
    [32, 8]
    """
    if type(tensor) is not _PLAIN:  # a DTensor's own storage is a placeholder
        tensor = dtensor_local(tensor)
    try:
        return [tensor.untyped_storage()]
    except (NotImplementedError, RuntimeError):  # "Cannot access storage of Sparse…Impl"
        names = _PARTS.get(tensor.layout, ())
    found = []
    for name in names:
        try:
            found.append(_part(tensor, name).untyped_storage())
        except (NotImplementedError, RuntimeError):
            continue
    return found


def _part(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """One part of a sparse tensor, read as the recorder's own work: without autograd (a
    CSR tensor's ``values()`` is differentiable, and would save the tensor again) and, for
    a plain tensor, out of sight of the user's function and dispatch modes."""
    with torch.no_grad(), DisableTorchFunction():
        if type(tensor) is not torch.Tensor:
            return getattr(tensor, name)()
        with exclude_python_dispatch():
            return getattr(tensor, name)()
