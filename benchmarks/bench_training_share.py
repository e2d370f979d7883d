"""How much of MaskablePPO's training time the environment takes, and the training rate.

Trains MaskablePPO (the repository's ``maskable_ppo`` config for ``crop_gym/Placement-v0``) after a
one-rollout warm-up and prints, per configuration, training steps per second (``learn`` wall
time: rollouts and updates) and the share of that time spent inside the single environments'
``step`` and ``reset`` (``PlacementEnv``'s, wrapped with a timer; with ``--vec-env batched`` the
batched environment's ``step`` and ``reset`` instead).

It uses only ``crop_gym.agents.config.load_config``, ``crop_gym.agents.envs.make_vec_env`` and
``crop_gym.agents.training.policy_spec``, which older checkouts have too (as ``agents.*`` before 0.2), so that a before/after
comparison can run the same script in both (``PYTHONPATH=<checkout> python .../this script``;
``crop_gym`` is printed with its path).

Usage::

    PYTHONPATH=. python benchmarks/bench_training_share.py [--steps 2048] [--n-envs 1]
        [--vec-env dummy|batched] [--policy CandidateScorer|MultiInputPolicy] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
from _common import Timer, write_rows

ENV_ID = "crop_gym/Placement-v0"


def measure(steps: int, n_envs: int, vec_env: str, policy: str) -> dict[str, Any]:
    """Train ``steps`` steps after a warm-up rollout; the rate and the environment's share."""
    import torch as th
    from sb3_contrib import MaskablePPO

    import crop_gym

    try:
        from crop_gym.agents.config import load_config
        from crop_gym.agents.envs import make_vec_env
        from crop_gym.agents.training import policy_spec
    except ImportError:  # a checkout from before agents/ installed as crop_gym.agents
        from agents.config import load_config  # type: ignore[no-redef]
        from agents.envs import make_vec_env  # type: ignore[no-redef]
        from agents.training import policy_spec  # type: ignore[no-redef]

    th.set_num_threads(1)
    timer = Timer()
    if vec_env == "batched":
        from crop_gym.envs.vector import PlacementVectorEnv as timed_cls
    else:
        from crop_gym.envs.placement import PlacementEnv as timed_cls
    for name in ("step", "reset"):
        setattr(timed_cls, name, timer.wrap(getattr(timed_cls, name)))
    cfg = load_config("maskable_ppo", ENV_ID)
    kw = cfg.algo_arguments()
    pol, pkw = policy_spec("maskable_ppo", policy, kw.pop("policy_kwargs", None), gym.make(ENV_ID))
    kw["n_steps"] = max(64, int(kw["n_steps"]) // n_envs)
    venv = make_vec_env(
        ENV_ID, n_envs=n_envs, seed=0, reward_scale=cfg.run["reward_scale"], vec_env=vec_env
    )
    model = MaskablePPO(pol, venv, seed=0, policy_kwargs=pkw, **kw)
    model.learn(kw["n_steps"] * n_envs)  # warm-up: first allocations, the memos filled
    timer.active = True
    start, t0 = int(model.num_timesteps), time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    wall = time.perf_counter() - t0
    timer.active = False
    venv.close()
    done = int(model.num_timesteps) - start
    return {
        "crop_gym": str(Path(crop_gym.__file__).parent),
        "policy": policy,
        "n_envs": n_envs,
        "vec_env": vec_env,
        "steps": done,
        "train_steps_per_s": done / wall,
        "env_share": timer.total / wall,
        "env_us_per_step": timer.total / max(done, 1) * 1e6,
    }


def main() -> None:
    """Parse the arguments, measure, print (and write) the figures."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=2048, help="training steps timed (>= 1)")
    ap.add_argument("--n-envs", type=int, default=1, help="environments (1 to 64)")
    ap.add_argument("--vec-env", choices=("dummy", "batched"), default="dummy")
    ap.add_argument(
        "--policy", choices=("CandidateScorer", "MultiInputPolicy"), default="CandidateScorer"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the row as JSON here")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: must be >= 1")
    if not 1 <= args.n_envs <= 64:
        ap.error(f"--n-envs {args.n_envs}: must be in [1, 64]")
    row = measure(args.steps, args.n_envs, args.vec_env, args.policy)
    print(f"crop_gym from {row['crop_gym']}")
    print(
        f"MaskablePPO, {row['policy']}, {row['n_envs']} env(s) {row['vec_env']}: "
        f"{row['train_steps_per_s']:.1f} training steps/s; environment "
        f"{100 * row['env_share']:.1f} % of the time ({row['env_us_per_step']:.0f} µs per step)"
    )
    write_rows(args.json, [row])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
