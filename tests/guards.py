"""Guards shared by the fuzz and hardening tests: a hang becomes a failure, and outputs that must
be special files never touch the machine's own /dev/null."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Hang(TimeoutError):
    """The guarded body ran past its time."""


@contextlib.contextmanager
def no_hang(seconds: int = 10) -> Iterator[None]:
    """Raise :class:`Hang` when the body blocks longer than ``seconds`` (SIGALRM, main thread)."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hang(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def null_device(folder: Path) -> Path:
    """A character device to use as an output path: a copy of /dev/null made in ``folder``.

    Never the real /dev/null as an output: run as root, a regression would replace it with a
    regular file for the whole machine. Without the right to make device nodes (not root), the real
    one is safe to use, as /dev is then not writable.
    """
    node = folder / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        return Path(os.devnull)
    return node
