"""torchgraphrec: record one real execution of a PyTorch model as a networkx graph."""

from torchgraphrec.compare import GraphDiff, diff
from torchgraphrec.compare.ranks import RankComparison, compare_ranks
from torchgraphrec.distributed import gather
from torchgraphrec.errors import CaptureError, SchemaError, TorchGraphRecError
from torchgraphrec.graph import collapse, from_json, to_json, validate
from torchgraphrec.recording import Recording
from torchgraphrec.schema import SCHEMA_VERSION

__version__ = "0.1.0"

__all__ = [
    "Recorder",
    "probe",
    "select",
    "stats",
    "load",
    "Recording",
    "record",
    "validate",
    "collapse",
    "to_json",
    "from_json",
    "to_dot",
    "diff",
    "GraphDiff",
    "gather",
    "compare_ranks",
    "RankComparison",
    "SCHEMA_VERSION",
    "TorchGraphRecError",
    "SchemaError",
    "CaptureError",
    "__version__",
]


def __getattr__(name: str) -> object:
    # These import torch (a saved recording can be read and drawn without it) or graphviz
    # (a summary is written without it).
    import importlib

    lazy = {"Recorder": ("torchgraphrec.recorder", "Recorder"),
            "record": ("torchgraphrec.recorder", "record"),
            "probe": ("torchgraphrec.probes.probe", "probe"),
            "select": ("torchgraphrec.probes.select", None),
            "stats": ("torchgraphrec.probes.stats", None),
            "load": ("torchgraphrec.probes.persist", "load"),
            "to_dot": ("torchgraphrec.render.dot", "to_dot")}
    if name not in lazy:
        raise AttributeError(f"module 'torchgraphrec' has no attribute {name!r}")
    module_name, attribute = lazy[name]
    module = importlib.import_module(module_name)
    value = getattr(module, attribute) if attribute else module
    # found once: later reads (``tgr.record`` at every recording) skip this function
    globals()[name] = value
    return value
