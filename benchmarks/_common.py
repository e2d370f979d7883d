"""What the benchmark scripts share: the CartPole-v1 reference rate, a timer of wrapped
functions, an argument parser whose errors are one line, and writing rows as JSON.

Only gymnasium is imported at module level (``crop_gym`` lazily, where it is used), so that
``bench_checkouts.py`` can run it against old checkouts of the package.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import gymnasium as gym


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2 (no usage
    block, no traceback)."""

    def __init__(self, doc: str | None) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)


class Timer:
    """Accumulates the time spent in a wrapped function while :attr:`active` (not re-entrant)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.active = False

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return fn(*args, **kwargs)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t

        return timed


def cartpole_step_rate(seconds: float) -> float:
    """CartPole-v1 steps per second for about ``seconds``: random actions, the time inside
    ``env.step`` only (resets between episodes are not timed)."""
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.action_space.seed(0)
    n, spent = 0, 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        a = env.action_space.sample()
        t = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        spent += time.perf_counter() - t
        n += 1
        if term or trunc:
            env.reset()
    env.close()
    return n / spent


def write_rows(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` as indented JSON to ``path`` atomically and say so (``None``: nothing)."""
    if path is None:
        return
    from crop_gym.io import atomic_write_text

    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")
    print(f"wrote {path}")
