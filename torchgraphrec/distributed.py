"""Ranks on the graph: the rank stamps of a recording made under torch.distributed, and gather().

Nothing here communicates implicitly: :func:`gather` is a collective the user calls on every
rank; reading the stamps only asks the local process group what it already knows.
"""

from __future__ import annotations

from typing import Any, Optional

import networkx as nx

from torchgraphrec.compare.ranks import graph_of

__all__ = ["rank_stamps", "backward_not_seen", "COLLECTIVES_WITHOUT_FLOW", "gather", "save_rank", "annotate_shards"]


def backward_not_seen(ops: str, *, late: bool = False) -> str:
    """Why the recorder draws no backward collective (``g.graph["backward_collectives"]``)
    where it cannot watch the backward (``late``: torch.distributed was initialized after
    the recording began, which is when the recorder attaches what listens to them).

    >>> backward_not_seen("none")[:9]
    'not seen:'
    >>> backward_not_seen("torch", late=True)[:48]
    'not seen: torch.distributed was initialized insi'
    """
    if late:
        why = ("torch.distributed was initialized inside the recording's block, after the "
               "recorder attached its hooks (begin recording once init_process_group has run)")
    elif ops != "torch":
        why = f"ops={ops!r} records no op nodes to draw them as"
    else:
        why = ("this torch does not restore dispatch modes after each autograd node, so the "
               "recorder cannot listen to them from backward hooks")
    return (f"not seen: {why}; the backward's collectives (DDP's bucket all-reduce, FSDP2's "
            "re-gathers and reduce-scatters) run from autograd hooks; torch's flight recorder "
            "logs them (TORCH_FR_BUFFER_SIZE set before init_process_group)")


#: Why torch.distributed's collectives have no edges (``g.graph["collectives"]``), on a
#: torch whose c10d does not dispatch torch functions.
COLLECTIVES_WITHOUT_FLOW = (
    "without data flow: this torch's torch.distributed calls its backend without "
    "torch-function dispatch, so all_reduce, broadcast and the like are recorded from the "
    "dispatcher (ops='torch') as op nodes without edges, and a tensor they write keeps its "
    "old value in the graph (newer releases dispatch them); the functional collectives are "
    "recorded with their edges")


def _dist() -> Any:
    """``torch.distributed`` where a process group is initialized, else ``None``."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def rank_stamps() -> dict[str, Any]:
    """``rank``, ``world_size`` and ``dist_backend`` of the default process group, or ``{}``
    where torch.distributed is not initialized (asks nothing of the other ranks).

    >>> rank_stamps()
    {}
    """
    dist = _dist()
    if dist is None:
        return {}
    stamps = {"rank": int(dist.get_rank()), "world_size": int(dist.get_world_size()),
              "dist_backend": str(dist.get_backend())}
    from torchgraphrec._torch import C10D_DISPATCHES_TORCH_FUNCTION  # torch is in use here

    if not C10D_DISPATCHES_TORCH_FUNCTION:
        stamps["collectives"] = COLLECTIVES_WITHOUT_FLOW
    return stamps


def gather(rec_or_graph: Any, dst: int = 0, group: Optional[Any] = None
           ) -> Optional[list[nx.DiGraph]]:
    """Every rank's graph, in rank order, on rank ``dst`` (``None`` on the others).

    A collective: every rank of ``group`` (default: the whole world) must call it, as with
    any ``torch.distributed`` collective. The graphs travel as their JSON text
    (:func:`~torchgraphrec.to_json`), through ``gather_object``.

    Raises ``RuntimeError`` where torch.distributed is not initialized.
    """
    from torchgraphrec.graph import from_json, to_json

    dist = _dist()
    if dist is None:
        raise RuntimeError("gather() needs torch.distributed initialized "
                           "(init_process_group) on every rank")
    text = to_json(graph_of(rec_or_graph))
    here = dist.get_rank()
    size = dist.get_world_size(group)
    found: Optional[list] = [None] * size if here == dst else None
    dist.gather_object(text, found, dst=dst, group=group)
    if found is None:
        return None
    return [from_json(item, check=False) for item in found]


def save_rank(graph: nx.DiGraph, folder: Any) -> Any:
    """Write ``graph`` to ``folder/rank-N.json`` (N its ``rank``, 0 without one), atomically:
    a rank killed later leaves the last one written whole.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> save_rank(nx.DiGraph(schema_version="2.1", model="M", torch_version="2", ops="none",
    ...                      rank=1), folder).name
    'rank-1.json'
    """
    from pathlib import Path

    from torchgraphrec.files import write_atomic
    from torchgraphrec.graph import to_json

    path = Path(folder) / f"rank-{graph.graph.get('rank', 0)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, to_json(graph).encode())



def annotate_shards(graph: nx.DiGraph, model: Any) -> None:
    """Give the param nodes of ``DTensor`` parameters (tensor parallel, FSDP2) ``local_shape``
    (this rank's), ``placements`` (``repr`` of each, e.g. ``"Shard(dim=0)"``), ``bytes``
    of this rank's shard and its ``dtype`` (FSDP2's mixed precision hands the forward a
    cast copy: the parameter is the shard); their ``shape`` stays the global one.

    A parameter FSDP2 holds unsharded right now (the root unit's, kept gathered after its
    forward) is described by the sharded parameter FSDP2 keeps for it."""
    from torchgraphrec._torch import dtensor_type, fsdp_sharded_params

    found = dtensor_type()
    if found is None:
        return
    nodes, kept = graph.nodes, fsdp_sharded_params(model)
    for qualname, module in model.named_modules():
        for name, tensor in module.named_parameters(recurse=False):
            attrs = nodes.get(f"param:{qualname}.{name}" if qualname else f"param:{name}")
            if not isinstance(tensor, found):
                tensor = kept.get((id(module), name))
            if attrs is None or not isinstance(tensor, found):
                continue
            local = tensor.detach().to_local()
            attrs["local_shape"] = tuple(int(d) for d in local.shape)
            attrs["placements"] = tuple(repr(p) for p in tensor.placements)
            attrs["bytes"] = local.numel() * local.element_size()
            attrs["dtype"] = str(local.dtype).replace("torch.", "")
