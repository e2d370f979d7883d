"""Helpers shared by several test files: a hang becomes a failure (:func:`no_hang`), outputs that
must be special files never touch the machine's own /dev/null (:func:`null_device`), and exact
equality of nested observations (:func:`assert_same`)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


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


def assert_same(a: Any, b: Any) -> None:
    """Exact equality of nested observations: dicts, tuples and lists, arrays (with dtype), scalars."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b
