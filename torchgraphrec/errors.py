"""The exceptions torchgraphrec raises of its own."""

__all__ = ["TorchGraphRecError", "SchemaError", "CaptureError", "SavedBytesNotCounted"]


class TorchGraphRecError(Exception):
    """Root of every exception raised by torchgraphrec itself."""


class SchemaError(TorchGraphRecError, ValueError):
    """A graph breaks a rule of the schema; the message names the node or edge and the rule.

    >>> raise SchemaError("node 'x': missing attribute 'kind'")
    Traceback (most recent call last):
    torchgraphrec.errors.SchemaError: node 'x': missing attribute 'kind'
    """


class CaptureError(TorchGraphRecError, RuntimeError):
    """The recorder itself failed; the user's model was left as it was."""


class SavedBytesNotCounted(UserWarning):
    """A forward in grad mode was recorded with ``memory=True`` but without ``saved_bytes``;
    the message says why."""
