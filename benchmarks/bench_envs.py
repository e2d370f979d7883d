"""Speed and memory of the placement environments beside CartPole-v1, compiled and reference.

Random *masked* play (uniform over ``info["action_mask"]``), resets when an episode ends, through
the public API only (``gymnasium.make``, ``reset``, ``step``). For each environment ID:

* ``step/s``: steps per second counting only the time inside ``env.step`` (the raw step rate);
* ``best/s``: the same for the fastest block of 250 consecutive steps (on a shared machine other
  tenants slow some blocks down; as with :mod:`timeit`, the fastest is the best estimate of the
  code's own speed);
* ``e2e/s``: steps per second with the resets counted (what a training loop sees);
* ``x CP``: ``step/s`` over CartPole-v1's, measured the same way in the same run;
* ``reset ms``: mean reset time; ``ep len``: mean episode length;
* ``MiB``: peak Python allocations while making the env and playing 300 steps (tracemalloc);
* ``ref step/s``: ``step/s`` of the numpy reference path (``CROP_GYM_KERNELS=numpy``), measured
  in a subprocess of this run with the same seeds and steps, and ``x ref``, the compiled path's
  ``step/s`` over it (without numba both columns measure the reference).

Before the timed steps each process plays 200 untimed steps: the one-time costs (loading the
compiled kernels, filling memos) are in ``benchmarks/bench_kernels.py``, not here.

Usage::

    PYTHONPATH=. python benchmarks/bench_envs.py                     # default IDs, ~2 minutes
    PYTHONPATH=. python benchmarks/bench_envs.py --steps 500 --ids crop_gym/Placement-v0 \\
        --json envs.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Parser, cartpole_step_rate, write_rows

import crop_gym
from crop_gym.model import kernels

DEFAULT_IDS = (
    "crop_gym/Placement-Testbed8-v0",
    "crop_gym/Placement-v0",
    "crop_gym/PlacementGPU-v0",
    "crop_gym/Placement-512-v0",
    "crop_gym/Placement-1024-v0",
    "crop_gym/OnlinePlacement-v1",
)
#: Steps per block for the ``best/s`` column.
BLOCK = 250
WARMUP = 200


def play(env_id: str, steps: int, seed: int) -> dict[str, float]:
    """Random masked play of ``steps`` steps after :data:`WARMUP` untimed ones; the rates and
    reset time of the module docstring."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed + 1)
    for _ in range(WARMUP):
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    gc.collect()
    t = time.perf_counter()
    _, info = env.reset(seed=seed)
    resets = [time.perf_counter() - t]
    step_time, n, episodes = 0.0, 0, 0
    block, best = 0.0, np.inf
    while n < steps:
        valid = np.flatnonzero(info["action_mask"])
        a = int(valid[rng.integers(len(valid))])
        t = time.perf_counter()
        _, _, term, trunc, info = env.step(a)
        dt = time.perf_counter() - t
        step_time += dt
        block += dt
        n += 1
        if n % BLOCK == 0:
            best, block = min(best, block), 0.0
        if term or trunc:
            episodes += 1
            t = time.perf_counter()
            _, info = env.reset()
            resets.append(time.perf_counter() - t)
    env.close()
    return {
        "step_per_s": n / step_time,
        "best_per_s": BLOCK / best if best < np.inf else n / step_time,
        "e2e_per_s": n / (step_time + float(np.sum(resets[1:]))),
        "reset_ms": 1e3 * float(np.mean(resets)),
        "ep_len": n / max(episodes, 1),
    }


def peak_mib(env_id: str, seed: int) -> float:
    """Peak traced Python allocations (MiB) of making ``env_id`` and playing 300 steps."""
    gc.collect()
    tracemalloc.start()
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    for _ in range(300):
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    env.close()
    return peak / 2**20


def reference_rates(ids: list[str], steps: int, seed: int) -> dict[str, dict[str, float]]:
    """:func:`play` of every ID on the numpy reference path, in a subprocess with
    ``CROP_GYM_KERNELS=numpy``."""
    cmd = [sys.executable, __file__, "--worker", "--steps", str(steps), "--seed", str(seed)]
    env = dict(os.environ, CROP_GYM_KERNELS="numpy")
    out = subprocess.run(
        [*cmd, "--ids", *ids], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"bench_envs.py: the reference run failed: {tail[0]}")
    rates: dict[str, dict[str, float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return rates


def main(argv: list[str] | None = None) -> None:
    """Print the table (and write the rows as JSON with ``--json``)."""
    ap = Parser(__doc__)
    ap.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS), help="environment IDs")
    ap.add_argument("--steps", type=int, default=2000, help="timed steps per environment (>= 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cartpole-seconds", type=float, default=2.0, help="> 0")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: must be >= 1")
    if not args.cartpole_seconds > 0:
        ap.error(f"--cartpole-seconds {args.cartpole_seconds}: must be > 0")
    unknown = [i for i in args.ids if i not in gym.registry]
    if unknown:
        ap.error(f"--ids: unknown environment ID {unknown[0]!r} (crop_gym registers crop_gym/...)")
    if args.worker:  # (the reference run: one JSON line)
        print(json.dumps({i: play(i, args.steps, args.seed) for i in args.ids}))
        return

    print(
        f"crop_gym {crop_gym.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}; compiled kernels: "
        f"{'on' if kernels.enabled() else 'off'}"
    )
    cp = cartpole_step_rate(args.cartpole_seconds)
    print(f"CartPole-v1 (same run): {cp:,.0f} step/s; {args.steps} timed steps per ID\n")
    rows: list[dict[str, Any]] = []
    for env_id in args.ids:
        r: dict[str, Any] = {"id": env_id, "kernels": kernels.enabled()}
        r.update(play(env_id, args.steps, args.seed))
        r["x_cartpole"] = r["step_per_s"] / cp
        r["peak_mib"] = peak_mib(env_id, args.seed)
        rows.append(r)
    ref = reference_rates(args.ids, args.steps, args.seed)
    for r in rows:
        rr = ref[r["id"]]
        r["ref_step_per_s"] = rr["step_per_s"]
        r["ref_e2e_per_s"] = rr["e2e_per_s"]
        r["ref_reset_ms"] = rr["reset_ms"]
        r["ref_x_cartpole"] = rr["step_per_s"] / cp
        r["x_ref"] = r["step_per_s"] / rr["step_per_s"]
        r["cartpole_step_per_s"] = cp
    header = (
        f"{'env':34s} {'step/s':>8s} {'best/s':>8s} {'e2e/s':>8s} {'x CP':>7s} "
        f"{'reset ms':>8s} {'ep len':>6s} {'MiB':>6s}   {'ref step/s':>10s} {'ref x CP':>8s} "
        f"{'ref reset':>9s} {'x ref':>6s}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['id']:34s} {r['step_per_s']:8,.0f} {r['best_per_s']:8,.0f} "
            f"{r['e2e_per_s']:8,.0f} {r['x_cartpole']:7.4f} {r['reset_ms']:8.2f} "
            f"{r['ep_len']:6.1f} {r['peak_mib']:6.1f}   {r['ref_step_per_s']:10,.0f} "
            f"{r['ref_x_cartpole']:8.4f} {r['ref_reset_ms']:9.2f} {r['x_ref']:6.2f}"
        )
    print(
        "(x CP: step/s over CartPole-v1 of this run; ref: CROP_GYM_KERNELS=numpy in a subprocess "
        "of this run, same seeds and steps; x ref: step/s over ref step/s; MiB: peak traced "
        "allocations of make + 300 steps)"
    )
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
