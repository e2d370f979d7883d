"""Atomic file writes, used by every command and result writer.

A file is written to a temporary file in its destination folder and moved over the destination with
``os.replace``, so readers see the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "atomic_write_with"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Write a file atomically through a writer that takes a path (``savefig``, ``model.save``...).

    Args:
        path: The destination; missing parent folders are created.
        write: Writes the whole content to the temporary path it is given.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    dest = Path(path)
    if str(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent or Path("."))
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp_path, dest)
    finally:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
    return dest


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""

    def write(p: Path) -> None:
        p.write_bytes(data)

    return atomic_write_with(path, write)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    return atomic_write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)
