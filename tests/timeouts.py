"""A guard that turns a hang into a test failure (shared by the fuzz and hardening tests)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
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
