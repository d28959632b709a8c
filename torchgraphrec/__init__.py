"""torchgraphrec: record one real execution of a PyTorch model as a networkx graph."""

from torchgraphrec.errors import CaptureError, SchemaError, TorchGraphRecError
from torchgraphrec.graph import collapse, from_json, to_json, validate
from torchgraphrec.recording import Recording, record
from torchgraphrec.render.dot import to_dot
from torchgraphrec.schema import SCHEMA_VERSION

__version__ = "0.1.0"

__all__ = [
    "Recorder",
    "Recording",
    "record",
    "validate",
    "collapse",
    "to_json",
    "from_json",
    "to_dot",
    "SCHEMA_VERSION",
    "TorchGraphRecError",
    "SchemaError",
    "CaptureError",
    "__version__",
]


def __getattr__(name: str) -> object:
    # The recorder imports torch; a saved recording can be read and drawn without it.
    if name == "Recorder":
        from torchgraphrec.capture.recorder import Recorder

        return Recorder
    raise AttributeError(f"module 'torchgraphrec' has no attribute {name!r}")
