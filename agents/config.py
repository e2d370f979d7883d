"""Hyperparameter files in the style of rl-baselines3-zoo, and the seed ranges of the project.

One YAML file per algorithm (``agents/configs/<algo>.yml``), keyed by environment ID, plus a
``default`` entry that IDs without their own entry use. An entry mixes the algorithm's own
constructor arguments (``learning_rate``, ``n_steps``, ``policy_kwargs``, ...) with the keys of
:data:`RUN_KEYS`, which drive the run rather than the algorithm::

    default:
      policy: CandidateScorer     # or MultiInputPolicy (SB3's default, for comparison)
      n_envs: 1
      n_timesteps: 50000
      learning_rate: lin_3.0e-4   # "lin_X": linear decay from X to 0, as in the zoo
      ...
    crop_gym/Placement-v0:        # every entry starts from "default" and replaces its keys
      n_timesteps: 60000

Files are read with :func:`crop_gym.io.read_mapping` (no YAML anchors or aliases, no duplicate
keys), and every entry is checked (:func:`check_entry`): an unknown key, a value of the wrong type
or out of its range is a :class:`~crop_gym.errors.ConfigError` naming the file, the entry and the
key, with the allowed keys or range.

Seeds (documented in docs/AGENTS.md): training instances come from seeds below
:data:`TRAIN_SEED_LIMIT` (10^6); the periodic evaluations of a training run (learning curve, best
model) use the *validation* seeds from :data:`VALIDATION_SEED_BASE` (5·10^8); ``crop-gym eval``
reports on the held-out *test* seeds from :data:`EVAL_SEED_BASE` (10^9). The three ranges never
overlap, so no reported number is measured on an instance the agent trained or was selected on.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from importlib import resources
from pathlib import Path
from typing import Any

from crop_gym.agents.algorithms import ALGOS, POLICIES, algo_class
from crop_gym.errors import ConfigError
from crop_gym.io import parse_mapping, read_mapping

__all__ = [
    "EVAL_SEED_BASE",
    "RUN_KEYS",
    "TRAIN_SEED_LIMIT",
    "VALIDATION_SEED_BASE",
    "RunConfig",
    "algo_parameters",
    "check_entry",
    "check_env_id",
    "config_path",
    "crop_gym_ids",
    "linear_schedule",
    "load_config",
    "parse_config_text",
    "parse_hyperparams",
    "read_config_file",
    "train_seed",
]

#: Training episode seeds are in ``[0, TRAIN_SEED_LIMIT)``.
TRAIN_SEED_LIMIT = 10**6
#: First validation seed (periodic evaluations during training, model selection).
VALIDATION_SEED_BASE = 5 * 10**8
#: First held-out test seed (``crop-gym eval``, docs/RESULTS.md).
EVAL_SEED_BASE = 10**9

#: The kinds of vector environment (``vec_env``; agents/envs.py ``make_vec_env``).
VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "batched")

#: Entry keys that configure the run, not the algorithm's constructor.
RUN_KEYS: dict[str, Any] = {
    "policy": "CandidateScorer",
    "n_envs": 1,
    "n_timesteps": 50_000,
    "vec_env": "dummy",  # or "subproc", "batched"
    "env_kwargs": {},
    "reward_scale": 1.0,
    "eval_freq": 5_000,  # env steps between validation evaluations
    "eval_episodes": 20,
    "checkpoint_freq": 10_000,  # env steps between checkpoints
    "torch_threads": 1,
    "bc": {},  # imitation options (see crop_gym.agents.imitation.BCConfig), used with --bc-demos
    "finetune": {},  # algorithm arguments that replace the entry's after behaviour cloning
}

#: Constructor arguments an entry may not set (the run sets them, or they are Python objects).
_NOT_CONFIGURABLE = frozenset(
    {
        "policy",
        "env",
        "seed",
        "device",
        "verbose",
        "tensorboard_log",
        "_init_setup_model",
        "rollout_buffer_class",
        "replay_buffer_class",
    }
)

#: Allowed ranges of numeric keys (closed intervals); other numbers must be finite and >= 0.
_RANGES: dict[str, tuple[float, float]] = {
    "n_envs": (1, 64),
    "n_timesteps": (0, 10**10),
    "eval_freq": (1, 10**10),
    "eval_episodes": (1, 10**5),
    "checkpoint_freq": (1, 10**10),
    "torch_threads": (1, 256),
    "reward_scale": (1e-9, 1e9),
    "learning_rate": (0.0, 1.0),
    "n_steps": (1, 2**16),
    "batch_size": (1, 2**16),
    "n_epochs": (1, 10**4),
    "epochs": (0, 10**5),
    "gamma": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "tau": (0.0, 1.0),
    "clip_range": (0.0, 10.0),
    "clip_range_vf": (0.0, 1e6),
    "ent_coef": (0.0, 1e3),
    "vf_coef": (0.0, 1e3),
    "max_grad_norm": (0.0, 1e6),
    "target_kl": (0.0, 1e3),
    "buffer_size": (1, 10**6),
    "learning_starts": (0, 10**10),
    "gradient_steps": (-1, 10**4),
    "target_update_interval": (1, 10**10),
    "train_freq": (1, 10**6),
    "exploration_fraction": (0.0, 1.0),
    "exploration_initial_eps": (0.0, 1.0),
    "exploration_final_eps": (0.0, 1.0),
    "stats_window_size": (1, 10**6),
    "sde_sample_freq": (-1, 10**6),
    "weight_decay": (0.0, 1.0),
    "val_fraction": (0.0, 0.99),
    "dagger_iterations": (0, 100),
    "dagger_episodes": (0, 10**5),
    "dagger_beta": (0.0, 1.0),
    "dagger_epochs": (0, 10**5),
    "hidden": (1, 4096),
    "embed": (1, 4096),
}
#: Keys whose values must be integers (other numeric keys take any finite number).
_INTEGERS = frozenset(
    {
        "n_envs",
        "n_timesteps",
        "eval_freq",
        "eval_episodes",
        "checkpoint_freq",
        "torch_threads",
        "n_steps",
        "batch_size",
        "n_epochs",
        "epochs",
        "buffer_size",
        "learning_starts",
        "gradient_steps",
        "target_update_interval",
        "train_freq",
        "stats_window_size",
        "sde_sample_freq",
        "dagger_iterations",
        "dagger_episodes",
        "dagger_epochs",
        "hidden",
        "embed",
    }
)
#: String keys and their allowed values.
_CHOICES: dict[str, tuple[str, ...]] = {
    "policy": POLICIES,
    "vec_env": VEC_ENVS,
    "critic": ("detached", "separate", "shared"),
    "teacher": (
        "crop",
        "crop-rollout",
        "sjf-crop",
        "fifo-first-fit",
    ),  # bc: (crop_gym.agents.teachers.teacher_of)
}
#: Keys that take a number or a ``lin_X`` schedule string.
_SCHEDULES = frozenset({"learning_rate", "clip_range", "clip_range_vf"})
_LIN = re.compile(r"lin_([0-9.eE+-]+)")


def read_config_file(path: str | Path, what: str = "hyperparameter") -> dict[str, Any]:
    """:func:`crop_gym.io.read_mapping`, its message folded onto one line.

    (PyYAML's reader errors span two lines, "... in <unicode string>, position N".)
    """
    try:
        return read_mapping(path, what=what)
    except ConfigError as e:
        raise ConfigError(" ".join(str(e).split())) from None


def parse_config_text(text: str, source: str) -> dict[str, Any]:
    """:func:`crop_gym.io.parse_mapping` of YAML ``text``, its message folded onto one line."""
    try:
        return parse_mapping(text, "yaml", source)
    except ConfigError as e:
        raise ConfigError(" ".join(str(e).split())) from None


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


def resolve_schedule(value: Any) -> Any:
    """``lin_X`` as :func:`linear_schedule` (X), any other value unchanged."""
    if isinstance(value, str):
        m = _LIN.fullmatch(value)
        if m:
            return linear_schedule(float(m.group(1)))
    return value


def crop_gym_ids() -> list[str]:
    """The registered ``crop_gym/`` environment IDs, sorted (registers them first)."""
    import gymnasium as gym

    import crop_gym  # noqa: F401  (registers the crop_gym/ IDs)

    return sorted(k for k in gym.registry if k.startswith("crop_gym/"))


def check_env_id(env_id: str, *, where: str = "--env") -> None:
    """Raise a one-line :class:`ConfigError` unless ``env_id`` is a registered ``crop_gym/`` ID.

    Other Gymnasium IDs (``CartPole-v1``) are refused too: training and evaluation read the
    placement environments' observation layout, action masks and F. The message lists the
    ``crop_gym/`` IDs.
    """
    known = crop_gym_ids()
    if not isinstance(env_id, str) or env_id not in known:
        raise ConfigError(
            f"{where}: unknown environment {env_id!r} (crop-gym trains and evaluates on the "
            f"crop_gym/ placement environments); known: {', '.join(known)}"
        )


def config_path(algo: str) -> Path:
    """The bundled config file of ``algo``."""
    if algo not in ALGOS:
        raise ConfigError(f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGOS)}")
    return Path(str(resources.files("crop_gym.agents") / "configs" / f"{algo}.yml"))


def algo_parameters(algo: str) -> dict[str, Any]:
    """Constructor arguments an entry may set for ``algo``, with their defaults (imports SB3)."""
    import inspect

    sig = inspect.signature(algo_class(algo))
    return {
        name: p.default
        for name, p in sig.parameters.items()
        if name not in _NOT_CONFIGURABLE and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def _type_name(v: Any) -> str:
    return type(v).__name__


def _check_number(where: str, key: str, value: Any, *, integer: bool) -> None:
    kind = "an integer" if integer else "a number"
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok:
        raise ConfigError(f"{where}: {key} must be {kind}, got {value!r} ({_type_name(value)})")
    lo, hi = _RANGES.get(key, (0, math.inf))
    if not (isinstance(value, int) or math.isfinite(value)) or not lo <= value <= hi:
        raise ConfigError(f"{where}: {key}={value!r} is outside its allowed range [{lo:g}, {hi:g}]")


def _check_value(where: str, key: str, value: Any, default: Any) -> None:
    """Check one value against the type of its default (and its range or choices)."""
    if key in _SCHEDULES and isinstance(value, str):
        m = _LIN.fullmatch(value)
        if not m:
            raise ConfigError(f"{where}: {key} must be a number or 'lin_X', got {value!r}")
        try:
            start = float(m.group(1))
        except ValueError:
            raise ConfigError(f"{where}: {key}: 'lin_X' needs a number X, got {value!r}") from None
        _check_number(where, key, start, integer=False)
        return
    if key in _SCHEDULES or (default is None and key in _RANGES):
        if value is None and default is None:
            return
        _check_number(where, key, value, integer=False)
        return
    if key == "train_freq" and isinstance(value, list):
        if len(value) != 2 or value[1] not in ("step", "episode"):
            raise ConfigError(f"{where}: train_freq must be N or [N, step|episode], got {value!r}")
        _check_number(where, key, value[0], integer=True)
        return
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
    elif isinstance(default, int | float):
        _check_number(where, key, value, integer=key in _INTEGERS)
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ConfigError(f"{where}: {key}={value!r} must be one of {', '.join(_CHOICES[key])}")
    elif isinstance(default, tuple):
        if not isinstance(value, list | tuple) or any(not isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
    elif isinstance(default, dict) or key.endswith("_kwargs"):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a mapping, got {value!r}")
        if isinstance(value, dict) and any(not isinstance(k, str) for k in value):
            raise ConfigError(f"{where}: {key} keys must be strings")


def _check_keys(where: str, block: Mapping[Any, Any], allowed: Mapping[str, Any]) -> None:
    for key, value in block.items():
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r}; allowed keys: {', '.join(sorted(allowed))}"
            )
        _check_value(where, key, value, allowed[key])


def _check_block(where: str, block: Mapping[Any, Any], allowed: Mapping[str, Any]) -> None:
    """Keys, types and ranges of an entry (or ``finetune`` block), the scorer's options too."""
    from crop_gym.agents.networks import ScorerConfig

    _check_keys(where, block, allowed)
    pk = block.get("policy_kwargs")
    if isinstance(pk, dict) and pk.get("scorer") is not None:
        scorer = pk["scorer"]
        if not isinstance(scorer, dict):
            raise ConfigError(f"{where}: policy_kwargs.scorer must be a mapping, got {scorer!r}")
        fields = {n: f.default for n, f in ScorerConfig.__dataclass_fields__.items()}
        _check_keys(f"{where}: policy_kwargs.scorer", scorer, fields)


def check_entry(algo: str, entry: Mapping[Any, Any], where: str) -> None:
    """Check a config entry: known keys, value types and ranges.

    Args:
        algo: The algorithm whose constructor arguments are allowed besides :data:`RUN_KEYS`.
        entry: The entry (run keys and algorithm arguments together).
        where: What to call the entry in errors (file and entry name, or ``--hyperparams``).

    Raises:
        ConfigError: One line naming ``where`` and the key, with the allowed keys or range.
    """
    from crop_gym.agents.imitation import BCConfig

    if algo not in ALGOS:
        raise ConfigError(f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGOS)}")
    params = algo_parameters(algo)
    _check_block(where, entry, {**RUN_KEYS, **params})
    _check_block(f"{where}: finetune", entry.get("finetune") or {}, params)
    bc = entry.get("bc") or {}
    fields = {
        n: f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
        for n, f in BCConfig.__dataclass_fields__.items()
    }
    _check_keys(f"{where}: bc", bc, fields)
    try:
        BCConfig.from_dict(dict(bc))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def parse_hyperparams(items: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` overrides, values parsed as YAML (no aliases, anchors or duplicate keys).

    Raises:
        ConfigError: One line naming the item.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--hyperparams: expected KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(f"--hyperparams: empty key in {item!r}")
        if "\n" in v or "\r" in v:
            raise ConfigError(f"--hyperparams {k}: the value must be one line")
        if k in out:
            raise ConfigError(f"--hyperparams: {k} is given twice")
        out[k] = parse_config_text(f"value: {v}", f"--hyperparams {k}").get("value")
    return out


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

    def with_overrides(self, overrides: Mapping[str, Any], where: str) -> RunConfig:
        """A copy with ``overrides`` replacing entries (checked, errors naming ``where``)."""
        check_entry(self.algo, dict(overrides), where)
        return RunConfig(self.algo, self.env_id, {**self.to_dict(), **overrides}, self.source)

    def hyperparameters(self, *, finetune: bool = False) -> dict[str, Any]:
        """JSON-ready constructor arguments (schedules as ``lin_X`` strings, ``finetune`` applied)."""
        kw = copy.deepcopy(self.algo_kwargs)
        if finetune:
            kw.update(copy.deepcopy(self.run.get("finetune") or {}))
        return kw

    def algo_arguments(self, *, finetune: bool = False) -> dict[str, Any]:
        """Constructor arguments with ``lin_X`` schedules resolved (and ``finetune`` applied)."""
        kw = self.hyperparameters(finetune=finetune)
        for key in _SCHEDULES:
            if key in kw:
                kw[key] = resolve_schedule(kw[key])
        if isinstance(kw.get("train_freq"), list):
            kw["train_freq"] = tuple(kw["train_freq"])
        return kw


def load_config(algo: str, env_id: str, path: str | Path | None = None) -> RunConfig:
    """Resolve the config entry of ``env_id`` (or ``default``) in ``algo``'s YAML file.

    An entry starts from the ``default`` entry and replaces its keys. Every entry of the file is
    checked (:func:`check_entry`), not only the one used.

    Args:
        algo: ``maskable_ppo``, ``ppo`` or ``dqn``.
        env_id: The environment ID.
        path: A YAML file to read instead of the bundled one.

    Raises:
        ConfigError: One line naming the file (and entry and key): unreadable file, YAML error,
            alias or duplicate key, neither an entry for ``env_id`` nor a ``default`` one, an entry
            named neither ``default`` nor a registered ``crop_gym/`` ID (a typo would otherwise be
            ignored silently), an entry that is not a mapping, an unknown key, a value of the wrong type or out of range.
    """
    file = Path(path) if path is not None else config_path(algo)
    if algo not in ALGOS:
        raise ConfigError(f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGOS)}")
    data = read_config_file(file)
    for name, entry in data.items():
        if not isinstance(name, str):
            raise ConfigError(f"{file}: entry names must be environment IDs, got {name!r}")
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{file}: entry {name!r} must be a mapping of hyperparameters, "
                f"got {_type_name(entry)}"
            )
    known = crop_gym_ids()
    for name in data:
        if name != "default" and name not in known:
            raise ConfigError(
                f"{file}: entry {name!r} is neither 'default' nor a registered environment ID; "
                f"known: {', '.join(known)}"
            )
    base = data.get("default", {})
    for name, entry in data.items():
        check_entry(algo, {**base, **entry}, f"{file}: entry {name!r}")
    key = env_id if env_id in data else "default"
    if key not in data:
        raise ConfigError(f"{file}: no entry for {env_id!r} and no 'default' entry")
    return RunConfig(algo, env_id, {**base, **data[key]}, f"{file}:{key}")
