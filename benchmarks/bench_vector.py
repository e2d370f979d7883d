"""Per-environment step rate of the batched placement environment, beside CartPole, in one run.

Every row is random masked play (uniform over the valid actions) of ``N`` environments,
timed inside ``step`` only, autoresets included (a vector environment resets inside ``step``;
the single environments are reset the same way, inside the timed call, so every row counts the
same work). The rate is environment-steps per second: ``N`` times the vector steps per second.

Rows, for each ID and ``N``:

* ``single``: one ``gymnasium.make(id)`` environment (``N = 1``);
* ``sync``: ``gymnasium.make_vec(id, N, vectorization_mode="sync")`` (``N`` single environments
  stepped one after another: the reference, and what a batch of one-at-a-time code costs);
* ``vector``: ``gymnasium.make_vec(id, N)``, the registered
  :class:`~crop_gym.envs.placement_vector.PlacementVectorEnv` (the action tables of all ``N``
  built together);

and CartPole-v1 the same three ways (its vector row is Gymnasium's ``CartPoleVectorEnv``). The
``x CartPole`` column divides by the single CartPole-v1 of the same run (the ratio issue 11 sets
its targets in); ``x sync`` divides by the sync row of the same ``N``.

Usage::

    PYTHONPATH=. python benchmarks/bench_vector.py                      # ~1 minute
    PYTHONPATH=. python benchmarks/bench_vector.py --num-envs 1 4 16 64 --steps 400
    PYTHONPATH=. python benchmarks/bench_vector.py --json out.json      # also write the rows
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import crop_gym
from crop_gym.io import atomic_write_text

DEFAULT_IDS = ("crop_gym/Placement-v0", "crop_gym/Placement-1024-v0")
CARTPOLE = "CartPole-v1"


def _masks(vec: Any, n: int) -> Any:
    """``bool[N, A]`` valid actions (all valid for CartPole)."""
    u = vec.unwrapped
    if hasattr(u, "action_masks"):
        return np.atleast_2d(u.action_masks())  # (a single environment: one row)
    envs = getattr(u, "envs", None)
    if envs is not None and hasattr(envs[0].unwrapped, "action_masks"):
        return np.stack([e.unwrapped.action_masks() for e in envs])
    return np.ones((n, int(vec.single_action_space.n)), dtype=bool)


class _Single:
    """One environment behind the vector interface (reset inside ``step`` when it ended)."""

    def __init__(self, env_id: str) -> None:
        self.env = gym.make(env_id)
        self.unwrapped = self.env.unwrapped
        self.single_action_space = self.env.action_space
        self._done = False

    def reset(self, seed: int) -> None:
        self.env.reset(seed=seed)

    def step(self, actions: Any) -> None:
        if self._done:
            self.env.reset()
            self._done = False
            return
        _, _, te, tr, _ = self.env.step(actions[0])
        self._done = bool(te or tr)

    def close(self) -> None:
        self.env.close()


def measure(env_id: str, kind: str, n: int, steps: int, seed: int = 0) -> float:
    """Environment-steps per second of ``kind`` (single, sync, vector) with ``n`` environments."""
    if kind == "single":
        vec: Any = _Single(env_id)
    else:
        mode = "sync" if kind == "sync" else None
        vec = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    vec.reset(seed=seed)
    rng = np.random.default_rng(seed)
    spent = 0.0
    for t in range(steps + 10):
        masks = _masks(vec, n)
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        t0 = time.perf_counter()
        vec.step(acts)
        if t >= 10:  # the first steps warm the caches of pure functions
            spent += time.perf_counter() - t0
    vec.close()
    return steps * n / spent


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS))
    ap.add_argument("--num-envs", nargs="+", type=int, default=[4, 16])
    ap.add_argument("--steps", type=int, default=150, help="vector steps per row")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    print(
        f"crop_gym {crop_gym.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}"
    )
    rows: list[dict[str, Any]] = []
    cart = measure(CARTPOLE, "single", 1, 20 * args.steps)
    rows.append({"id": CARTPOLE, "kind": "single", "num_envs": 1, "rate": cart})
    for n in args.num_envs:
        for kind in ("sync", "vector"):
            rows.append(
                {
                    "id": CARTPOLE,
                    "kind": kind,
                    "num_envs": n,
                    "rate": measure(CARTPOLE, kind, n, 20 * args.steps),
                }
            )
    for env_id in args.ids:
        big = "512" in env_id or "1024" in env_id
        steps = max(args.steps // 3, 10) if big else args.steps
        rows.append(
            {
                "id": env_id,
                "kind": "single",
                "num_envs": 1,
                "rate": measure(env_id, "single", 1, steps * 4),
            }
        )
        for n in args.num_envs:
            for kind in ("sync", "vector"):
                k_steps = max(steps * 4 // n, 10)
                rows.append(
                    {
                        "id": env_id,
                        "kind": kind,
                        "num_envs": n,
                        "rate": measure(env_id, kind, n, k_steps),
                    }
                )
    sync = {(r["id"], r["num_envs"]): r["rate"] for r in rows if r["kind"] == "sync"}
    for r in rows:
        r["x_cartpole"] = r["rate"] / cart
        r["x_sync"] = r["rate"] / sync[(r["id"], r["num_envs"])] if r["kind"] == "vector" else None
    print()
    print(
        f"{'env':30s} {'kind':7s} {'N':>4s} {'env-steps/s':>12s} {'x CartPole':>11s} {'x sync':>7s}"
    )
    print("-" * 76)
    for r in rows:
        xs = f"{r['x_sync']:7.2f}" if r["x_sync"] is not None else " " * 7
        print(
            f"{r['id']:30s} {r['kind']:7s} {r['num_envs']:4d} {r['rate']:12,.0f} "
            f"{r['x_cartpole']:11.4f} {xs}"
        )
    print("(autoresets inside the timed steps; x CartPole: / single CartPole-v1 of this run)")
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
