"""Step and reset speed of two checkouts of crop_gym, measured alternately in one session.

Speed figures from different days or machines cannot be set side by side (this shared machine's
speed moves by 2x); a before/after comparison has to run both in one session. This script runs
the same measurement in this checkout and in another one (for example a ``git worktree`` of an
older commit), ``--rounds`` times alternately, each in a fresh process with that checkout first on
``sys.path``, and prints one row per (checkout, environment, round):

* ``step/s``: random masked play (uniform over ``info["action_mask"]``), the time inside
  ``env.step`` only, the same seeds in both checkouts;
* ``x CartPole``: over CartPole-v1 measured in the same process the same way;
* ``reset ms``: mean time of the resets between the episodes;
* ``cpu step/s``, ``cpu reset ms``: the same measured in this thread's CPU time
  (``time.thread_time``), which other work on a shared machine inflates far less than wall time;
* ``warm-up s``: the first episode (a reset and up to 64 steps), run before the timed steps and
  not counted in them: it pays the one-time costs (loading compiled kernels, filling memos).

It uses only the public API (``gymnasium.make``, ``reset``, ``step``, ``info["action_mask"]``), so
it runs on old checkouts too.

Usage::

    git worktree add /tmp/old <commit>
    PYTHONPATH=. python benchmarks/bench_checkouts.py --other /tmp/old          # ~3 minutes
    PYTHONPATH=. python benchmarks/bench_checkouts.py --other /tmp/old --rounds 1 \\
        --ids crop_gym/Placement-v0:500 --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import cartpole_step_rate, write_rows

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_IDS = ("crop_gym/Placement-v0:1500", "crop_gym/Placement-1024-v0:1200")


def _play(env_id: str, steps: int, seed: int) -> dict[str, float]:
    """Step rate and mean reset time of ``steps`` random masked steps of ``env_id``."""
    import gymnasium as gym
    import numpy as np

    import crop_gym  # noqa: F401  (registers the IDs)

    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    # Warm-up (not timed, reported): the first episode pays one-time costs (a compiled kernel's
    # load, memo and cache fills), which a run of many steps amortises.
    t = time.perf_counter()
    _, info = env.reset(seed=seed + 1)
    for _ in range(min(steps, 64)):
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            break
    warmup = time.perf_counter() - t
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    stepping, resets, cpu_stepping, cpu_resets = 0.0, [], 0.0, 0.0
    for _ in range(steps):
        valid = np.flatnonzero(info["action_mask"])
        action = int(valid[rng.integers(len(valid))])
        c, t = time.thread_time(), time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        stepping += time.perf_counter() - t
        cpu_stepping += time.thread_time() - c
        if term or trunc:
            c, t = time.thread_time(), time.perf_counter()
            _, info = env.reset()
            resets.append(time.perf_counter() - t)
            cpu_resets += time.thread_time() - c
    env.close()
    return {
        "step_per_s": steps / stepping,
        "reset_ms": 1e3 * sum(resets) / max(len(resets), 1),
        "cpu_step_per_s": steps / max(cpu_stepping, 1e-9),
        "cpu_reset_ms": 1e3 * cpu_resets / max(len(resets), 1),
        "resets": float(len(resets)),
        "warmup_s": warmup,
    }


def _measure(ids: list[tuple[str, int]], seed: int, cartpole_s: float) -> list[dict[str, Any]]:
    """The rows of one process (the checkout first on ``sys.path``)."""
    cart = cartpole_step_rate(cartpole_s)
    rows = []
    for env_id, steps in ids:
        r: dict[str, Any] = {"id": env_id, "steps": steps, **_play(env_id, steps, seed)}
        r["cartpole_per_s"] = cart
        r["x_cartpole"] = r["step_per_s"] / cart
        rows.append(r)
    return rows


def _parse_ids(specs: list[str]) -> list[tuple[str, int]]:
    out = []
    for spec in specs:
        env_id, _, steps = spec.rpartition(":")
        if not env_id or not steps.isdigit() or int(steps) < 1:
            raise SystemExit(f"--ids {spec!r}: expected ID:STEPS with STEPS >= 1")
        out.append((env_id, int(steps)))
    return out


def main(argv: list[str] | None = None) -> None:
    """Run both checkouts alternately and print the table (or, with ``--worker``, measure)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", type=Path, help="the other checkout (its repository root)")
    ap.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS), help="ID:STEPS")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cartpole-seconds", type=float, default=3.0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ids = _parse_ids(args.ids)
    if args.worker:  # one measurement in this process; rows as JSON on stdout
        rows = _measure(ids, args.seed, args.cartpole_seconds)
        import crop_gym

        print(json.dumps({"package": str(Path(crop_gym.__file__).resolve()), "rows": rows}))
        return
    if args.other is None or not (args.other / "crop_gym" / "__init__.py").is_file():
        raise SystemExit(f"--other {args.other}: not a crop_gym checkout (no crop_gym/__init__.py)")
    if args.rounds < 1 or args.cartpole_seconds <= 0:
        raise SystemExit("--rounds must be >= 1 and --cartpole-seconds > 0")
    checkouts = {"other": args.other.resolve(), "this": ROOT}
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for name, root in checkouts.items():
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
            cmd += ["--seed", str(args.seed), "--cartpole-seconds", str(args.cartpole_seconds)]
            cmd += ["--ids", *args.ids]
            env = {**_env(), "PYTHONPATH": str(root)}
            out = subprocess.run(
                cmd, cwd=root, env=env, capture_output=True, text=True, check=False
            )
            if out.returncode != 0:
                tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
                raise SystemExit(f"checkout {root}: the measurement failed: {tail[0]}")
            measured = json.loads(out.stdout.strip().splitlines()[-1])
            if not Path(measured["package"]).is_relative_to(root):
                raise SystemExit(f"checkout {root}: imported crop_gym from {measured['package']}")
            for r in measured["rows"]:
                rows.append({"checkout": name, "path": str(root), "round": rnd + 1, **r})
    print(f"this: {ROOT}\nother: {checkouts['other']}\n")
    print(
        f"{'checkout':8s} {'round':>5s}  {'env':28s} {'step/s':>8s} {'x CartPole':>11s} "
        f"{'reset ms':>9s} {'resets':>6s} {'CartPole/s':>11s} {'warm-up s':>9s} "
        f"{'cpu step/s':>10s} {'cpu reset ms':>12s}"
    )
    for r in rows:
        print(
            f"{r['checkout']:8s} {r['round']:5d}  {r['id']:28s} {r['step_per_s']:8,.0f} "
            f"{r['x_cartpole']:11.4f} {r['reset_ms']:9.2f} {int(r['resets']):6d} "
            f"{r['cartpole_per_s']:11,.0f} {r['warmup_s']:9.2f} "
            f"{r.get('cpu_step_per_s', float('nan')):10,.0f} {r.get('cpu_reset_ms', float('nan')):12.2f}"
        )
    _print_ratios(rows)
    write_rows(args.json, rows)


def _print_ratios(rows: list[dict[str, Any]]) -> None:
    """Per environment, this checkout over the other: the median over rounds of each round's
    ratio (step rates, x CartPole and CPU step rates: > 1 is faster; reset times: < 1 is
    faster)."""
    import statistics

    keys = (
        ("x_cartpole", "x CartPole"),
        ("step_per_s", "step/s"),
        ("cpu_step_per_s", "cpu step/s"),
        ("reset_ms", "reset ms"),
        ("cpu_reset_ms", "cpu reset ms"),
    )
    print("\nthis / other, median over rounds (min-max):")
    for env_id in dict.fromkeys(r["id"] for r in rows):
        by = {(r["checkout"], r["round"]): r for r in rows if r["id"] == env_id}
        rounds = sorted({rnd for _, rnd in by})
        parts = []
        for key, label in keys:
            ratios = [
                by["this", n][key] / by["other", n][key]
                for n in rounds
                if ("this", n) in by
                and ("other", n) in by
                and key in by["other", n]
                and by["other", n][key]
            ]
            if ratios:
                parts.append(
                    f"{label} {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                )
        print(f"  {env_id}: " + "; ".join(parts))


def _env() -> dict[str, str]:
    """This process's environment without ``PYTHONPATH`` (each worker gets its checkout's)."""
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    main()
