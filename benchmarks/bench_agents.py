"""Benchmark of the RL agents: MaskablePPO training throughput and wall time to 0.98 x CROP.

Prints:

* training throughput (environment steps per second during ``MaskablePPO.learn``, rollouts and
  updates included) on ``crop_gym/Placement-v0`` with the candidate scorer, with 1 environment
  (``DummyVecEnv``) and 2 environments (``DummyVecEnv`` in-process and ``SubprocVecEnv``), and with
  SB3's ``MultiInputPolicy`` (1 and 2 environments): the median of ``--repeats`` timings, with
  their range, and the machine's load average (other processes on the cores slow every figure);
* the raw environment step rate with random valid actions (for reference);
* the wall time to reach 0.98 x CROP's mean F on validation seeds: read from the ``run.json`` of
  training runs given with ``--runs`` (``time_to_target``), or measured by a short behaviour-cloning
  run with ``--measure-target``.

Usage::

    PYTHONPATH=. python benchmarks/bench_agents.py [--steps 2048] [--repeats 3]
        [--runs runs/bc_ppo runs/scratch] [--measure-target]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch as th

import crop_gym  # noqa: F401

ENV_ID = "crop_gym/Placement-v0"


def env_rate(seconds: float = 3.0) -> float:
    """Raw environment steps/s with random valid actions (resets included)."""
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        m = env.unwrapped.action_masks()
        v = np.flatnonzero(m[:-1])
        a = int(rng.choice(v)) if len(v) else len(m) - 1
        _, _, term, trunc, _ = env.step(a)
        n += 1
        if term or trunc:
            env.reset(seed=int(rng.integers(10**6)))
    return n / (time.perf_counter() - t0)


def train_rate(
    n_envs: int, steps: int, policy: str = "CandidateScorer", vec_env: str | None = None
) -> float:
    """MaskablePPO steps/s (learn() wall time, rollouts and updates) with ``n_envs`` environments.

    ``n_steps`` is the config's divided by ``n_envs`` (the same rollout size in steps);
    ``vec_env`` defaults to ``subproc`` for more than one environment.
    """
    from sb3_contrib import MaskablePPO

    from crop_gym.agents.config import load_config
    from crop_gym.agents.envs import make_vec_env
    from crop_gym.agents.training import policy_spec

    cfg = load_config("maskable_ppo", ENV_ID)
    kw = cfg.algo_arguments()
    probe = gym.make(ENV_ID)
    pol, pkw = policy_spec("maskable_ppo", policy, kw.pop("policy_kwargs", None), probe)
    kw["n_steps"] = max(64, int(kw["n_steps"]) // n_envs)
    venv = make_vec_env(
        ENV_ID,
        n_envs=n_envs,
        seed=0,
        reward_scale=cfg.run["reward_scale"],
        vec_env=vec_env or ("subproc" if n_envs > 1 else "dummy"),
    )
    model = MaskablePPO(pol, venv, seed=0, policy_kwargs=pkw, **kw)
    model.learn(kw["n_steps"] * n_envs)  # warm-up (process start, first allocations)
    t0 = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    rate = (int(model.num_timesteps) - kw["n_steps"] * n_envs) / (time.perf_counter() - t0)
    venv.close()
    return rate


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    """Run the benchmark and print the figures."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--steps", type=int, default=2048, help="training steps timed per configuration"
    )
    ap.add_argument("--repeats", type=int, default=3, help="timings per configuration (median)")
    ap.add_argument(
        "--runs", nargs="*", default=[], help="training run directories to read time-to-target from"
    )
    ap.add_argument(
        "--measure-target",
        action="store_true",
        help="time a short BC + MaskablePPO run to 0.98 x CROP",
    )
    args = ap.parse_args()
    th.set_num_threads(1)
    print(f"environment: {ENV_ID}; {os.cpu_count()} CPUs, load average {_load()}")
    print(f"raw env step rate (random valid actions): {env_rate():8.1f} steps/s")
    cases = [
        ("scorer", 1, "CandidateScorer", "dummy"),
        ("scorer", 2, "CandidateScorer", "dummy"),
        ("scorer", 2, "CandidateScorer", "subproc"),
        ("MultiInputPolicy", 1, "MultiInputPolicy", "dummy"),
        ("MultiInputPolicy", 2, "MultiInputPolicy", "subproc"),
    ]
    print(
        f"MaskablePPO training steps/s, median of {args.repeats} x {args.steps} steps [min, max]:"
    )
    for label, n_envs, policy, vec in cases:
        rates = [train_rate(n_envs, args.steps, policy, vec) for _ in range(args.repeats)]
        print(
            f"  {label:<17} {n_envs} env(s) {vec:<8} {np.median(rates):8.1f}"
            f"   [{min(rates):.1f}, {max(rates):.1f}]"
        )
    print(f"load average after: {_load()}")
    runs = [Path(r) for r in args.runs]
    if args.measure_target:
        from crop_gym.agents.training import train

        tmp = Path(tempfile.mkdtemp(prefix="bench_agents_"))
        t0 = time.perf_counter()
        train(
            env_id=ENV_ID,
            steps=0,
            seed=0,
            out=tmp,
            bc_demos=100,
            progress=False,
            argv=["bench_agents"],
        )
        print(f"BC run (100 CROP episodes, no RL) total wall: {time.perf_counter() - t0:.1f} s")
        runs.append(tmp)
    from crop_gym.agents.training import time_to_target

    for run in runs:
        meta = json.loads((run / "run.json").read_text())
        ttt = time_to_target(meta.get("curve") or [])
        label = f"{meta['algo']}{' + BC(' + str(meta['bc_demos']) + ')' if meta.get('bc_demos') else ' from scratch'}"
        label += f", {meta.get('policy', 'CandidateScorer')}"
        hit = ttt["ratio_to_crop"]
        if hit:
            print(
                f"{run}: {label}: mean F >= 0.98 x CROP (validation) at step {hit['steps']} ({hit['phase']}), {hit['wall_s']:.0f} s wall"
            )
        else:
            print(f"{run}: {label}: mean F did not reach 0.98 x CROP")
        for level, h in ttt["gain_thresholds"].items():
            where = (
                f"step {h['steps']} ({h['phase']}), {h['wall_s']:.0f} s wall"
                if h
                else "not reached"
            )
            print(f"    gain (F(end) - F(start)) >= {level} x CROP's: {where}")


if __name__ == "__main__":
    main()
