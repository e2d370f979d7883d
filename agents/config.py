"""Hyperparameter files in the style of rl-baselines3-zoo, and the seed ranges of the project.

One YAML file per algorithm (``agents/configs/<algo>.yml``), keyed by environment ID, plus a
``default`` entry that IDs without their own entry use. An entry mixes the algorithm's own
constructor arguments (``learning_rate``, ``n_steps``, ``policy_kwargs``, ...) with the keys of
:data:`RUN_KEYS`, which drive the run rather than the algorithm::

    default: &default
      policy: CandidateScorer     # or MultiInputPolicy (SB3's default, for comparison)
      n_envs: 1
      n_timesteps: 50000
      learning_rate: lin_3.0e-4   # "lin_X": linear decay from X to 0, as in the zoo
      ...
    crop_gym/Placement-v0:
      <<: *default
      n_timesteps: 60000

Seeds (documented in docs/AGENTS.md): training instances come from seeds below
:data:`TRAIN_SEED_LIMIT` (10^6); the periodic evaluations of a training run (learning curve, best
model) use the *validation* seeds from :data:`VALIDATION_SEED_BASE` (5·10^8); ``crop-gym eval``
reports on the held-out *test* seeds from :data:`EVAL_SEED_BASE` (10^9). The three ranges never
overlap, so no reported number is measured on an instance the agent trained or was selected on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ALGOS",
    "EVAL_SEED_BASE",
    "RUN_KEYS",
    "TRAIN_SEED_LIMIT",
    "VALIDATION_SEED_BASE",
    "RunConfig",
    "config_path",
    "linear_schedule",
    "load_config",
    "train_seed",
]

#: Training episode seeds are in ``[0, TRAIN_SEED_LIMIT)``.
TRAIN_SEED_LIMIT = 10**6
#: First validation seed (periodic evaluations during training, model selection).
VALIDATION_SEED_BASE = 5 * 10**8
#: First held-out test seed (``crop-gym eval``, docs/RESULTS.md).
EVAL_SEED_BASE = 10**9

#: Algorithms and their config files.
ALGOS: tuple[str, ...] = ("maskable_ppo", "ppo", "dqn")

#: Entry keys that configure the run, not the algorithm's constructor.
RUN_KEYS: dict[str, Any] = {
    "policy": "CandidateScorer",
    "n_envs": 1,
    "n_timesteps": 50_000,
    "vec_env": "dummy",  # or "subproc"
    "env_kwargs": {},
    "reward_scale": 1.0,
    "eval_freq": 5_000,  # env steps between validation evaluations
    "eval_episodes": 20,
    "checkpoint_freq": 10_000,  # env steps between checkpoints
    "torch_threads": 1,
    "bc": {},  # imitation options (see agents.imitation.BCConfig), used with --bc-demos
    "finetune": {},  # algorithm arguments that replace the entry's after behaviour cloning
}


def train_seed(seed: int, stream: int, index: int) -> int:
    """A training-range episode seed, distinct per (run seed, stream, index) in practice.

    Args:
        seed: The run's seed.
        stream: Which use (0 demonstrations, 1.. DAgger rounds).
        index: Episode index within the stream.

    Returns:
        A seed in ``[0, TRAIN_SEED_LIMIT)``.
    """
    return (seed * 7_919 + stream * 104_729 + index) % TRAIN_SEED_LIMIT


def linear_schedule(start: float) -> Callable[[float], float]:
    """``progress_remaining * start`` (SB3 passes progress from 1 down to 0)."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * start

    return schedule


def config_path(algo: str) -> Path:
    """The bundled config file of ``algo``."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGOS)}")
    return Path(str(resources.files("agents") / "configs" / f"{algo}.yml"))


class RunConfig:
    """A resolved config entry: the run keys and the algorithm's constructor arguments.

    Attributes:
        algo: Algorithm name.
        env_id: Environment ID the entry was resolved for.
        run: The :data:`RUN_KEYS` values.
        algo_kwargs: Constructor arguments of the algorithm (schedules still as strings).
        source: The file and entry it came from.
    """

    def __init__(self, algo: str, env_id: str, entry: Mapping[str, Any], source: str) -> None:
        self.algo = algo
        self.env_id = env_id
        self.source = source
        data = copy.deepcopy(dict(entry))
        self.run = {k: data.pop(k, copy.deepcopy(v)) for k, v in RUN_KEYS.items()}
        self.algo_kwargs = data

    def to_dict(self) -> dict[str, Any]:
        """The entry as a plain dict (run keys and algorithm arguments together)."""
        return {**copy.deepcopy(self.run), **copy.deepcopy(self.algo_kwargs)}

    def algo_arguments(self, *, finetune: bool = False) -> dict[str, Any]:
        """Constructor arguments with ``lin_X`` schedules resolved (and ``finetune`` applied)."""
        kw = copy.deepcopy(self.algo_kwargs)
        if finetune:
            kw.update(copy.deepcopy(self.run.get("finetune") or {}))
        for key in ("learning_rate", "clip_range"):
            v = kw.get(key)
            if isinstance(v, str) and v.startswith("lin_"):
                kw[key] = linear_schedule(float(v[4:]))
        return kw


def load_config(algo: str, env_id: str, path: str | Path | None = None) -> RunConfig:
    """Resolve the config entry of ``env_id`` (or ``default``) in ``algo``'s YAML file.

    Args:
        algo: ``maskable_ppo``, ``ppo`` or ``dqn``.
        env_id: The environment ID.
        path: A YAML file to read instead of the bundled one.

    Raises:
        ValueError: If the file has neither an entry for ``env_id`` nor a ``default`` one, or an
            entry is not a mapping.
    """
    file = Path(path) if path is not None else config_path(algo)
    with open(file, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a mapping of environment IDs to hyperparameters")
    key = env_id if env_id in data else "default"
    if key not in data:
        raise ValueError(f"{file}: no entry for {env_id!r} and no 'default' entry")
    entry = data[key]
    if not isinstance(entry, dict):
        raise ValueError(f"{file}: entry {key!r} must be a mapping")
    return RunConfig(algo, env_id, entry, f"{file}:{key}")
