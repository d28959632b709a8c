"""Writing files atomically, for everything torchgraphrec writes (drawings, reports, probe records)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Union

__all__ = ["write_atomic", "PathLike"]

PathLike = Union[str, "os.PathLike[str]"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, so that a
    failure never leaves a partial file under the final name.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "a.txt", b"hello").read_bytes()
    b'hello'
    """
    target = Path(path)
    folder = target.parent or Path(".")
    if not folder.is_dir():  # else the error would name the temporary file
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(folder))
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 is not what users expect
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
