"""Speed and memory of the placement environments, measured beside Gymnasium's CartPole-v1.

Random *masked* actions (uniform over the valid ones), resets when an episode ends. For each
environment it prints:

* ``step/s``: steps per second counting only the time inside ``env.step`` (the raw step rate);
* ``best/s``: the same for the fastest block of 250 consecutive steps. On a shared virtual
  machine other tenants' load slows some blocks down; as with :mod:`timeit`, the fastest run is
  the best estimate of the code's own speed (``step/s`` is the plain mean over all steps);
* ``e2e/s``: steps per second including the resets (what a training loop sees);
* ``reset ms``: mean reset time (sampling an instance: background jobs, queue, first candidates);
* ``ep len``: mean episode length in steps;
* ``MiB``: peak Python memory allocated while building the env and running it (tracemalloc);
* ``RSS+``: growth of a fresh process's peak RSS over ``import crop_gym`` for one env;
* a breakdown of the step time: ``ClusterState.add``, the candidate generator, and the rest of the
  environment (observation features, mask, info).

Usage::

    PYTHONPATH=. python benchmarks/bench_envs.py            # default set, ~1 minute
    PYTHONPATH=. python benchmarks/bench_envs.py --steps 2000 --ids crop_gym/Placement-v0

Targets (issue 5): >= 5,000 step/s on the 64-GPU env and >= 1,000 step/s on a 1,024-GPU env.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
import tracemalloc
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Timer, cartpole_step_rate

import crop_gym
import crop_gym.envs.actions as view_mod
from crop_gym.model.state import ClusterState

DEFAULT_IDS = (
    "crop_gym/Placement-Testbed8-v0",
    "crop_gym/Placement-v0",
    "crop_gym/PlacementGPU-v0",
    "crop_gym/Placement-512-v0",
    "crop_gym/Placement-1024-v0",
)
TARGETS = {"crop_gym/Placement-v0": 5000.0, "crop_gym/Placement-1024-v0": 1000.0}
#: Steps per block for the ``best/s`` column.
_BLOCK = 250


def _run(
    env: gym.Env[Any, Any], steps: int, seed: int, timers: list[Timer] = ()
) -> dict[str, float]:  # type: ignore[assignment]
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    _, info = env.reset(seed=seed)
    resets = [time.perf_counter() - t]
    step_time, n, episodes = 0.0, 0, 0
    block_time, best_block = 0.0, np.inf
    while n < steps:
        valid = np.flatnonzero(info["action_mask"])
        a = int(valid[rng.integers(len(valid))])
        for tm in timers:
            tm.active = True
        t = time.perf_counter()
        _, _, term, trunc, info = env.step(a)
        dt = time.perf_counter() - t
        step_time += dt
        block_time += dt
        for tm in timers:
            tm.active = False
        n += 1
        if n % _BLOCK == 0:
            best_block = min(best_block, block_time)
            block_time = 0.0
        if term or trunc:
            episodes += 1
            t = time.perf_counter()
            _, info = env.reset()
            resets.append(time.perf_counter() - t)
    return {
        "step_per_s": n / step_time,
        "best_per_s": _BLOCK / best_block if best_block < np.inf else n / step_time,
        "e2e_per_s": n / (step_time + float(np.sum(resets[1:]))),
        "reset_ms": 1e3 * float(np.mean(resets)),
        "ep_len": n / max(episodes, 1),
        "step_time": step_time,
    }


def bench_env(env_id: str, steps: int, seed: int, breakdown: bool) -> dict[str, float]:
    """Measure one environment; returns the figures printed by :func:`main`."""
    gc.collect()
    env = gym.make(env_id)
    _run(env, min(steps, 200), seed + 1)  # warm-up: imports, caches
    out = _run(env, steps, seed)
    env.close()
    if breakdown:
        add_t, cand_t = Timer(), Timer()
        orig_add = ClusterState.add
        # The action table asks the generator through this one.
        orig_gen = {n: getattr(view_mod, n) for n in ("candidate_sets_many",)}
        ClusterState.add = add_t.wrap(orig_add)  # type: ignore[method-assign]
        for n, fn in orig_gen.items():
            setattr(view_mod, n, cand_t.wrap(fn))
        try:
            env = gym.make(env_id)
            r = _run(env, steps, seed, [add_t, cand_t])
            env.close()
        finally:
            ClusterState.add = orig_add  # type: ignore[method-assign]
            for n, fn in orig_gen.items():
                setattr(view_mod, n, fn)
        out["share_add"] = add_t.total / r["step_time"]
        out["share_candidates"] = cand_t.total / r["step_time"]
    # Memory: a separate, traced run (tracemalloc slows everything down).
    gc.collect()
    tracemalloc.start()
    env = gym.make(env_id)
    _run(env, min(steps, 300), seed)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    env.close()
    out["peak_mib"] = peak / 2**20
    return out


_RSS_CODE = """
import sys, numpy as np, gymnasium as gym, crop_gym
def hwm():  # peak RSS of this process image, KiB (ru_maxrss would include the parent's)
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
base = hwm()
env = gym.make(sys.argv[1])
_, info = env.reset(seed=0)
rng = np.random.default_rng(0)
for _ in range(300):
    valid = np.flatnonzero(info["action_mask"])
    _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
    if term or trunc:
        _, info = env.reset()
print(base, hwm())
"""


def rss_mib(env_id: str) -> tuple[float, float]:
    """Peak RSS (MiB) of a fresh process after ``import crop_gym``, and its growth with one env
    made, reset and stepped 300 times (Linux: reads ``VmHWM``)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _RSS_CODE, env_id], capture_output=True, text=True, check=True
    ).stdout.split()
    base, peak = (float(x) / 1024 for x in out[-2:])
    return base, peak - base


def reset_breakdown(env_id: str, resets: int = 5) -> dict[str, float]:
    """Where reset time goes: sampling the instance vs the env's first table and observation."""
    env = gym.make(env_id)
    base = env.unwrapped
    env.reset(seed=0)
    sample_t, total_t = 0.0, 0.0
    orig = base.sampler.sample

    def timed(rng: np.random.Generator) -> Any:
        nonlocal sample_t
        t = time.perf_counter()
        try:
            return orig(rng)
        finally:
            sample_t += time.perf_counter() - t

    base.sampler.sample = timed
    for _ in range(resets):
        t = time.perf_counter()
        env.reset()
        total_t += time.perf_counter() - t
    env.close()
    return {"sample_ms": 1e3 * sample_t / resets, "total_ms": 1e3 * total_t / resets}


def main(argv: list[str] | None = None) -> None:
    """Print the benchmark table."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ids", nargs="*", default=list(DEFAULT_IDS), help="environment IDs")
    ap.add_argument("--steps", type=int, default=3000, help="steps per environment")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cartpole-seconds", type=float, default=2.0)
    ap.add_argument("--no-breakdown", action="store_true", help="do not time add/candidates")
    args = ap.parse_args(argv)

    print(
        f"crop_gym {crop_gym.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}"
    )
    cp = cartpole_step_rate(args.cartpole_seconds)
    print(f"CartPole-v1 (same run): {cp:,.0f} step/s\n")
    header = (
        f"{'env':34s} {'step/s':>8s} {'best/s':>8s} {'e2e/s':>8s} {'x CartPole':>10s} {'reset ms':>9s} {'ep len':>7s} "
        f"{'MiB':>6s} {'RSS+':>6s}  step time: add / candidates / env"
    )
    print(header)
    print("-" * len(header))
    results = {}
    for env_id in args.ids:
        r = bench_env(env_id, args.steps, args.seed, not args.no_breakdown)
        base_rss, r["rss_mib"] = rss_mib(env_id)
        results[env_id] = r
        shares = ""
        if "share_add" in r:
            rest = 1.0 - r["share_add"] - r["share_candidates"]
            shares = f"  {r['share_add']:5.0%} / {r['share_candidates']:5.0%} / {rest:5.0%}"
        print(
            f"{env_id:34s} {r['step_per_s']:8,.0f} {r['best_per_s']:8,.0f} {r['e2e_per_s']:8,.0f} {r['step_per_s'] / cp:10.3f} "
            f"{r['reset_ms']:9.1f} {r['ep_len']:7.1f} {r['peak_mib']:6.1f} {r['rss_mib']:6.1f}{shares}"
        )
    print(
        f"(MiB: peak traced Python allocations of make + 300 steps; RSS+: process RSS growth over "
        f"'import crop_gym' ({base_rss:.0f} MiB) for make + reset + 300 steps)\n"
    )
    for env_id in args.ids:
        rb = reset_breakdown(env_id)
        print(
            f"reset {env_id:34s} {rb['total_ms']:7.1f} ms, of which ScenarioSampler.sample {rb['sample_ms']:7.1f} ms"
        )
    print()
    for env_id, target in TARGETS.items():
        if env_id in results:
            got, best = results[env_id]["step_per_s"], results[env_id]["best_per_s"]
            verdict = "met" if got >= target else "NOT met"
            print(
                f"target {env_id}: >= {target:,.0f} step/s -> mean {got:,.0f} ({verdict}); "
                f"fastest {_BLOCK}-step block {best:,.0f} ({'met' if best >= target else 'NOT met'})"
            )


if __name__ == "__main__":
    main()
