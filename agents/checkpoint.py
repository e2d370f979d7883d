"""Checkpoints: SB3 ``.zip`` files with the run's metadata inside, and the shipped default.

A checkpoint is what ``model.save`` writes plus one extra member, ``crop_gym_agent.json``: the
algorithm, the policy kind, the environment ID and arguments it was trained on, the scorer's
options, the seed, the step count and the library versions. SB3 ignores the extra member, so
``MaskablePPO.load(path)`` still works; :func:`load_checkpoint` reads both.

The checkpoints shipped with the package are ``agents/checkpoints/default.zip`` (``--model
default``, static placement), ``agents/checkpoints/default-online.zip`` (``--model
default-online``, the online policy of ``scripts/train_default_online.py``) and
``agents/checkpoints/default-severe.zip`` (``--model default-severe``, the static policy of
``scripts/train_default_severe.py`` that beats CROP on ``Placement-Severe-v0``).

Loading never unpickles by default. SB3's ``Algo.load`` rebuilds some of a model's settings with
``cloudpickle`` from the ``data`` member, so a crafted zip runs any command it likes when loaded.
:func:`load_checkpoint` instead reads ``data`` as plain JSON and skips every pickled field: the
policy class comes from the metadata, the observation and action spaces from the environment, the
schedules and other pickled hyperparameters from the metadata's ``hyperparameters``, and the
weights through ``torch.load(..., weights_only=True)``. A checkpoint that cannot be rebuilt so is
refused with one line; ``trust=True`` (``--trust-checkpoint``) uses ``Algo.load`` for files you trust.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import zipfile
import zlib
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from crop_gym.agents._io import to_jsonable
from crop_gym.agents.algorithms import ALGO_CLASSES, algo_class, policy_class
from crop_gym.agents.config import algo_parameters, check_entry, check_env_id, resolve_schedule
from crop_gym.errors import ConfigError
from crop_gym.io import atomic_write_with, check_regular_input, parse_mapping

__all__ = [
    "DEFAULT_CHECKPOINT",
    "DEFAULT_ONLINE_CHECKPOINT",
    "META_NAME",
    "checkpoint_metadata",
    "default_checkpoint",
    "export_checkpoint",
    "load_checkpoint",
    "read_metadata",
    "resolve_model_path",
    "save_checkpoint",
    "update_metadata",
]

#: Name of the metadata member inside a checkpoint zip.
META_NAME = "crop_gym_agent.json"
#: Format tag of the metadata.
FORMAT = "crop_gym-agent/1"


def default_checkpoint(name: str = "default") -> Path:
    """Path of a checkpoint shipped with the package (one of :data:`SHIPPED_CHECKPOINTS`)."""
    return Path(str(resources.files("crop_gym.agents") / "checkpoints" / f"{name}.zip"))


DEFAULT_CHECKPOINT = "default"
#: The shipped online policy (``--model default-online``): trained on the env ID in its metadata.
DEFAULT_ONLINE_CHECKPOINT = "default-online"
#: The shipped static policy that beats CROP on ``Placement-Severe-v0`` (``--model default-severe``,
#: scripts/train_default_severe.py).
DEFAULT_SEVERE_CHECKPOINT = "default-severe"
#: Every shipped checkpoint name.
SHIPPED_CHECKPOINTS = (DEFAULT_CHECKPOINT, DEFAULT_ONLINE_CHECKPOINT, DEFAULT_SEVERE_CHECKPOINT)


def checkpoint_metadata(**fields: Any) -> dict[str, Any]:
    """Metadata with the format tag, a UTC timestamp and the library versions added."""
    from crop_gym.agents._io import versions

    meta = {"format": FORMAT, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    meta.update(fields)
    meta.setdefault("versions", versions())
    return to_jsonable(meta)


def save_checkpoint(
    model: Any, path: str | Path, metadata: dict[str, Any], *, strip_optimizer: bool = False
) -> Path:
    """Save ``model`` with ``metadata`` inside, atomically.

    Args:
        model: An SB3 model.
        path: Destination ``.zip``.
        metadata: JSON-ready run metadata (see :func:`checkpoint_metadata`).
        strip_optimizer: Drop the optimizer's moment estimates (a smaller file to ship; training
            resumed from it restarts Adam's statistics).
    """
    dest = Path(path)
    opt = getattr(model.policy, "optimizer", None)
    saved_state = None
    if strip_optimizer and opt is not None:
        saved_state = opt.state_dict()
        opt.state.clear()
    buf = io.BytesIO()
    try:
        model.save(buf)
    finally:
        if saved_state is not None and opt is not None:
            opt.load_state_dict(saved_state)
    meta_text = json.dumps(to_jsonable(metadata), indent=2)

    def write(tmp: Path) -> None:
        buf.seek(0)
        with zipfile.ZipFile(buf) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                if item.filename != META_NAME:
                    dst.writestr(item, src.read(item.filename))
            dst.writestr(META_NAME, meta_text)

    return atomic_write_with(dest, write)


def update_metadata(src: str | Path, dest: str | Path, **fields: Any) -> Path:
    """Copy a checkpoint with ``fields`` added to its metadata; every other member byte for byte.

    Args:
        src: A checkpoint ``.zip``.
        dest: Destination (may be ``src``: written atomically).
        **fields: Metadata fields to add or replace (JSON-ready).
    """
    path = Path(src)
    meta = read_metadata(path)
    meta.update(to_jsonable(fields))
    meta_text = json.dumps(meta, indent=2)
    with _Members(path) as z:
        members = [(i, z.read(i.filename, MAX_WEIGHTS_BYTES)) for i in z.infolist()]

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            for info, raw in members:
                if info.filename != META_NAME:
                    dst.writestr(info, raw)
            dst.writestr(META_NAME, meta_text)

    return atomic_write_with(Path(dest), write)


def export_checkpoint(
    src: str | Path,
    dest: str | Path,
    *,
    strip_optimizer: bool = True,
    trust: bool = False,
    **extra: Any,
) -> Path:
    """Copy a checkpoint for shipping: optimizer moments dropped, metadata extended with ``extra``.

    Args:
        src: A checkpoint (see :func:`resolve_model_path`).
        dest: Destination ``.zip``.
        strip_optimizer: Drop Adam's moment estimates (about two thirds of the file).
        trust: Load ``src`` with SB3's unpickling loader (see :func:`load_checkpoint`).
        **extra: Metadata fields to add (e.g. ``source`` or an evaluation summary).
    """
    model, meta = load_checkpoint(src, trust=trust)
    meta.pop("path", None)
    meta.update(to_jsonable(extra))
    return save_checkpoint(model, dest, meta, strip_optimizer=strip_optimizer)


def resolve_model_path(model: str | Path) -> Path:
    """A checkpoint path from a shipped name (``default``, ``default-online``, ``default-severe``),
    a ``.zip`` file or a run directory.

    A run directory resolves to its ``best_model.zip`` (best validation ratio to CROP), else its
    ``final_model.zip``, else the newest file in ``checkpoints/``.

    Raises:
        ConfigError: If nothing loadable is found (one line naming the path).
    """
    if str(model) in SHIPPED_CHECKPOINTS:
        p = default_checkpoint(str(model))
        if not p.exists():
            raise ConfigError(f"the shipped checkpoint {p} is missing (reinstall crop-gym)")
        return p
    p = Path(model)
    if p.is_dir():
        for name in ("best_model.zip", "final_model.zip"):
            if (p / name).exists():
                return p / name
        ckpts = sorted((p / "checkpoints").glob("*.zip"), key=lambda f: f.stat().st_mtime)
        if ckpts:
            return ckpts[-1]
        raise ConfigError(f"{p}: no best_model.zip, final_model.zip or checkpoints/*.zip")
    if not p.exists():
        raise ConfigError(f"{p}: no checkpoint there (expected a .zip, a run directory or default)")
    return p


# ------------------------------------------------------------------------- reading zips safely
#: Largest ``data`` or metadata member read (bytes).
MAX_DATA_BYTES = 64 << 20
#: Largest ``.pth`` member read (bytes).
MAX_WEIGHTS_BYTES = 1 << 30
#: Largest total of every member's uncompressed size (bytes): a zip of many members, each under
#: its own limit, is refused as a whole, whatever its headers claim.
MAX_CHECKPOINT_BYTES = 1 << 30
#: Largest rollout or replay buffer a checkpoint's settings may ask for (bytes, estimated from the
#: environment's observations before anything is allocated).
MAX_BUFFER_BYTES = 8 << 30
#: SB3 fields the safe loader rebuilds (from the metadata, the environment, the settings): their
#: stored values, pickled or not, are never read.
_REBUILT = frozenset(
    {
        "batch_norm_stats",  # DQN: references to the network's running statistics, made in setup
        "batch_norm_stats_target",
        "policy_class",
        "observation_space",
        "action_space",
        "lr_schedule",
        "exploration_schedule",
        "rollout_buffer_class",
        "replay_buffer_class",
    }
)
#: Run-time state that acting does not need and training resets: never read either.
_RUNTIME = frozenset(
    {
        "_last_obs",
        "_last_episode_starts",
        "_last_original_obs",
        "ep_info_buffer",
        "ep_success_buffer",
    }
)
#: Pickled hyperparameters taken from the metadata's ``hyperparameters`` (else the default).
_FROM_META = frozenset({"learning_rate", "clip_range", "clip_range_vf", "train_freq"})
#: Attributes a stored field may never set (SB3 excludes them from its own files).
_PROTECTED = frozenset({"policy", "env", "device", "policy_aliases", "_vec_normalize_env"})
_TRUST_HINT = "pass --trust-checkpoint (trust=True) to unpickle it, only for a file you trust"
#: How every torch file since torch 1.6 begins (a zip archive); SB3 writes no other kind.
_TORCH_ZIP_MAGIC = b"PK\x03\x04"


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


class _Members:
    """The members of one checkpoint zip, read within one budget of decompressed bytes for all.

    The budget starts at :data:`MAX_CHECKPOINT_BYTES`; the sizes the zip's directory declares are
    checked against it before anything is read, and every read stops at what is left of it (a
    header that under-declares a member cannot get past).
    """

    def __init__(self, path: Path) -> None:
        check_regular_input(path, what="checkpoint")
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
            raise ConfigError(f"{path}: not a readable checkpoint zip ({_one_line(e)})") from None
        declared = sum(i.file_size for i in self.zip.infolist())
        if declared > MAX_CHECKPOINT_BYTES:
            self.zip.close()
            raise ConfigError(
                f"{path}: its members hold {declared} bytes uncompressed, more than the "
                f"{MAX_CHECKPOINT_BYTES} a checkpoint may hold"
            )
        self.left = MAX_CHECKPOINT_BYTES

    def __enter__(self) -> _Members:
        return self

    def __exit__(self, *exc: object) -> None:
        self.zip.close()

    def names(self) -> list[str]:
        """The members' names."""
        return self.zip.namelist()

    def infos(self) -> list[zipfile.ZipInfo]:
        """The members' directory entries."""
        return self.zip.infolist()

    def read(self, name: str, limit: int) -> bytes:
        """Member ``name``, refused if larger than ``limit`` or than what is left of the budget."""
        path = self.path
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            raise ConfigError(f"{path}: not an SB3 checkpoint (no {name!r} member)") from None
        cap = min(limit, self.left)
        if info.file_size > limit:
            raise ConfigError(f"{path}: member {name!r} is larger than {limit} bytes")
        try:
            with self.zip.open(info) as fh:
                raw = fh.read(cap + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError) as e:
            raise ConfigError(f"{path}: member {name!r} is damaged ({_one_line(e)})") from None
        except NotImplementedError as e:
            raise ConfigError(f"{path}: member {name!r}: {_one_line(e)}") from None
        if len(raw) > limit:
            raise ConfigError(f"{path}: member {name!r} is larger than {limit} bytes")
        if len(raw) > cap:
            raise ConfigError(
                f"{path}: its members hold more than the {MAX_CHECKPOINT_BYTES} bytes uncompressed "
                "a checkpoint may hold"
            )
        self.left -= len(raw)
        return raw

    def json(self, name: str) -> dict[str, Any]:
        """A JSON member (the metadata strictly; SB3's ``data`` with its NaN and Infinity)."""
        path = self.path
        raw = self.read(name, MAX_DATA_BYTES)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                f"{path}: member {name!r} is not UTF-8 text (byte {e.start})"
            ) from None
        if name == META_NAME:
            return parse_mapping(text, "json", f"{path}:{name}")
        try:  # SB3 writes NaN/Infinity for non-finite floats: plain json, no parse_mapping
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ConfigError(f"{path}: member {name!r} is not JSON ({_one_line(e)})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: member {name!r} is not a JSON object")
        return data

    def weights(self, name: str) -> Any:
        """A torch member, loaded with ``weights_only=True`` (tensors and plain values only)."""
        import torch as th

        path = self.path
        raw = self.read(name, MAX_WEIGHTS_BYTES)
        if not raw.startswith(_TORCH_ZIP_MAGIC):
            raise ConfigError(
                f"{path}: member {name!r} is not a torch weights file (torch writes a zip "
                f"archive; this begins {raw[:8]!r})"
            )
        try:
            return th.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise ConfigError(
                f"{path}: member {name!r} holds objects other than tensors; {_TRUST_HINT}"
            ) from None
        except Exception as e:  # (torch raises many kinds on damaged files)
            raise ConfigError(
                f"{path}: member {name!r} is not a torch weights file ({_one_line(e)})"
            ) from None


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata inside a checkpoint (``{}`` for a plain SB3 zip).

    Raises:
        ConfigError: One line naming the file if it is not a zip or its metadata is not JSON.
    """
    with _Members(Path(path)) as z:
        if META_NAME not in z.names():
            return {}
        return z.json(META_NAME)


def _spaces(path: Path, meta: dict[str, Any]) -> tuple[Any, Any]:
    """The observation and action spaces of the environment the checkpoint was trained on."""
    env_id = meta.get("env_id")
    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"{path}: the metadata names no environment (env_id)")
    check_env_id(env_id, where=f"{path}: env_id")
    kwargs = meta.get("env_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}: env_kwargs in the metadata is not a mapping")
    import gymnasium as gym

    try:
        env = gym.make(env_id, **kwargs)
    except Exception as e:  # (any constructor error of the stored arguments)
        raise ConfigError(
            f"{path}: cannot make {env_id} with the stored env_kwargs ({_one_line(e)})"
        ) from None
    spaces = (env.observation_space, env.action_space)
    env.close()
    return spaces


def _check_stored_values(path: Path, name: str, model: Any, plain: dict[str, Any]) -> None:
    """Every stored field is one the algorithm saves, of the type and range it takes.

    Constructor arguments are checked as a hyperparameter file's are (:func:`check_entry`: types
    and ranges); SB3's counters by the type of the fresh model's value.
    """
    where = f"{path}: 'data'"
    settable = (set(vars(model)) | {"n_envs"}) - set(model._excluded_save_params()) - _PROTECTED
    unknown = sorted(set(plain) - settable - _REBUILT - _RUNTIME)
    if unknown:
        raise ConfigError(
            f"{where}: field(s) {', '.join(map(repr, unknown))} the loader does not know "
            f"({name} stores none of them)"
        )
    params = {*algo_parameters(name), "n_envs"}
    check_entry(name, {k: v for k, v in plain.items() if k in params}, where)
    for key, value in plain.items():
        if key in params or key in _REBUILT or key in _RUNTIME:
            continue
        current = getattr(model, key, None)
        if isinstance(current, bool):
            ok = isinstance(value, bool)
        elif isinstance(current, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(current, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:  # a field whose fresh value is None: any JSON scalar
            ok = value is None or isinstance(value, str | int | float)
        if not ok:
            raise ConfigError(
                f"{where}: {key} must be {type(current).__name__ if current is not None else 'a scalar'}"
                f", got {value!r}"
            )


def _observation_bytes(space: Any) -> int:
    """Bytes of one observation as SB3's buffers store it (float32 and the like per element)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return sum(_observation_bytes(s) for s in space.spaces.values())
    shape = getattr(space, "shape", None) or (1,)
    return 4 * math.prod(int(d) for d in shape)


def _check_buffer_size(path: Path, model: Any) -> None:
    """Refuse settings whose rollout or replay buffer would exceed :data:`MAX_BUFFER_BYTES`."""
    from gymnasium import spaces

    obs = _observation_bytes(model.observation_space)
    act = model.action_space
    mask = 4 * int(act.n) if isinstance(act, spaces.Discrete) else 0
    row = obs + mask + 32  # the observation, the action mask, action/reward/value/advantage
    n_envs = int(getattr(model, "n_envs", 1) or 1)
    if hasattr(model, "buffer_size"):  # off-policy: observations and next observations
        rows, field = int(model.buffer_size), f"buffer_size={model.buffer_size}"
        need = rows * (obs + row)
    else:
        rows, field = int(model.n_steps) * n_envs, f"n_steps={model.n_steps} x n_envs={n_envs}"
        need = rows * row
    if need > MAX_BUFFER_BYTES:
        raise ConfigError(
            f"{path}: 'data': {field} rows of this environment's observations need "
            f"{need / 2**30:.1f} GiB, more than the {MAX_BUFFER_BYTES / 2**30:.0f} GiB a checkpoint "
            "may ask for"
        )


def _check_network(path: Path, name: str, model: Any, weights: Any) -> None:
    """The network ``policy_kwargs`` asks for has exactly the shapes of the stored weights.

    The policy is built on torch's ``meta`` device, which allocates nothing and runs no
    initialisation, so a 100,000-wide request costs what a 64-wide one does; only then is the real
    network built.
    """
    import torch as th

    if not isinstance(weights, dict) or not all(isinstance(v, th.Tensor) for v in weights.values()):
        raise ConfigError(f"{path}: member 'policy.pth' is not a state dict of tensors")
    from torch.overrides import TorchFunctionMode

    class KeepOnMeta(TorchFunctionMode):
        """Leave meta tensors where they are when a layer moves itself (SB3's ``.to(device)``)."""

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is th.Tensor.to and args and isinstance(args[0], th.Tensor) and args[0].is_meta:
                return args[0]
            return func(*args, **(kwargs or {}))

    extra = {"use_sde": model.use_sde} if name == "ppo" else {}  # what PPO's setup passes on
    try:
        with th.device("meta"), KeepOnMeta():
            probe = model.policy_class(
                model.observation_space,
                model.action_space,
                lambda _: 0.0,
                **extra,
                **model.policy_kwargs,
            )
    except Exception as e:  # (the policy's own checks of its keyword arguments)
        raise ConfigError(f"{path}: 'data': policy_kwargs are refused ({_one_line(e)})") from None
    wanted = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
    stored = {k: tuple(v.shape) for k, v in weights.items()}
    if wanted != stored:
        diff = sorted(set(wanted) ^ set(stored)) or sorted(
            k for k in wanted if wanted[k] != stored[k]
        )
        key = diff[0]
        raise ConfigError(
            f"{path}: 'data': policy_kwargs ask for a network that policy.pth does not hold "
            f"({len(diff)} tensor(s) differ; {key}: asked {wanted.get(key)}, stored "
            f"{stored.get(key)})"
        )


def _safe_load(
    path: Path, meta: dict[str, Any], name: str, env: Any, kwargs: dict[str, Any]
) -> Any:
    """Rebuild an SB3 model from the JSON fields and the tensors only (nothing unpickled).

    Everything is checked before a network or buffer is built: every stored field is known and of
    its type and range, the buffers fit :data:`MAX_BUFFER_BYTES`, and the network ``policy_kwargs``
    asks for has the stored weights' shapes.
    """
    from stable_baselines3.common.save_util import recursive_getattr, recursive_setattr

    if not meta:
        raise ConfigError(
            f"{path}: no crop_gym metadata ({META_NAME}), so its policy class is only stored "
            f"pickled; {_TRUST_HINT}"
        )
    with _Members(path) as z:
        data = z.json("data")
        pickled = {k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v}
        needed = sorted(pickled - _REBUILT - _RUNTIME - _FROM_META)
        if needed:
            raise ConfigError(f"{path}: {', '.join(needed)} stored only pickled; {_TRUST_HINT}")
        names = [n for n in z.names() if n.endswith(".pth")]
        if "policy.pth" not in names:
            raise ConfigError(f"{path}: not an SB3 checkpoint (no 'policy.pth' member)")
        tensors = {n[: -len(".pth")]: z.weights(n) for n in names}
    plain = {k: v for k, v in data.items() if k not in pickled}
    pkw = plain.get("policy_kwargs")
    if pkw is not None and not isinstance(pkw, dict):
        raise ConfigError(f"{path}: 'data': policy_kwargs is not a mapping")
    policy = meta.get("policy") or (
        "CandidateScorer" if "scorer" in (pkw or {}) else "MultiInputPolicy"
    )
    if not isinstance(policy, str):
        raise ConfigError(f"{path}: the metadata's policy must be a name, got {policy!r}")
    hyper = meta.get("hyperparameters") or {}
    if not isinstance(hyper, dict):
        raise ConfigError(f"{path}: hyperparameters in the metadata is not a mapping")
    restore = {k: hyper[k] for k in sorted(pickled & _FROM_META) if k in hyper}
    check_entry(name, restore, f"{path}: hyperparameters")
    pvars = tensors.pop("pytorch_variables", None)
    try:
        model = algo_class(name)(
            policy=policy_class(name, policy), env=env, device="cpu", _init_setup_model=False
        )
        if env is None:
            model.observation_space, model.action_space = _spaces(path, meta)
        _check_stored_values(path, name, model, plain)
        for k, v in plain.items():
            if k in _REBUILT or k in _RUNTIME or (k == "n_envs" and env is not None):
                continue
            setattr(model, k, v)
        if isinstance(model.policy_kwargs, dict):
            model.policy_kwargs.pop("device", None)
        for k, v in restore.items():
            setattr(model, k, tuple(v) if isinstance(v, list) else resolve_schedule(v))
        model.__dict__.update(kwargs)
        _check_buffer_size(path, model)
        _check_network(path, name, model, tensors.get("policy"))
        model._setup_model()
        model.set_parameters(tensors, exact_match=True, device="cpu")
        for var, value in (pvars or {}).items() if isinstance(pvars, dict) else ():
            if value is None:
                continue
            import torch as th

            if not isinstance(value, th.Tensor) or not isinstance(
                recursive_getattr(model, var), th.Tensor
            ):
                raise ValueError(f"pytorch variable {var!r} is not a tensor of the model")
            recursive_setattr(model, f"{var}.data", value.data)
        if model.use_sde:
            model.policy.reset_noise()
    except ConfigError as e:
        raise (e if str(path) in str(e) else ConfigError(f"{path}: {e}")) from None
    except Exception as e:  # (SB3 and torch raise many kinds on mismatched files)
        raise ConfigError(
            f"{path}: cannot rebuild the model from its settings and weights ({_one_line(e)})"
        ) from None
    return model


def load_checkpoint(
    model: str | Path,
    *,
    env: Any = None,
    algo: str | None = None,
    trust: bool = False,
    **kwargs: Any,
) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint: ``(SB3 model, metadata)``, without unpickling anything by default.

    Args:
        model: ``default``, a ``.zip`` path or a run directory (see :func:`resolve_model_path`).
        env: Environment to attach (needed to continue training); its spaces are used.
        algo: Algorithm, for a plain SB3 zip without metadata.
        trust: Load with SB3's ``Algo.load``, which unpickles the file's stored objects (and so
            runs whatever code a crafted file holds): only for files you trust, and needed for
            plain SB3 zips without crop_gym metadata or with other pickled settings.
        **kwargs: Attributes to set on the model (e.g. ``tensorboard_log``).

    Raises:
        ConfigError: One line naming the file: not found, not a zip, damaged, members missing,
            pickled objects where the safe loader would need them, weights that do not fit.
    """
    path = resolve_model_path(model)
    meta = read_metadata(path)
    name = meta.get("algo") or algo
    if name is None:
        raise ConfigError(
            f"{path}: no crop_gym metadata; pass the algorithm (maskable_ppo, ppo or dqn)"
        )
    if not isinstance(name, str) or name not in ALGO_CLASSES:
        raise ConfigError(
            f"{path}: unknown algorithm {name!r}; algorithms: {', '.join(ALGO_CLASSES)}"
        )
    if trust:
        cls = algo_class(str(name))
        try:
            loaded = cls.load(path, env=env, device="cpu", **kwargs)
        except Exception as e:
            raise ConfigError(f"{path}: SB3 cannot load it ({_one_line(e)})") from None
    else:
        loaded = _safe_load(path, meta, str(name), env, kwargs)
    meta.setdefault("algo", name)
    meta["path"] = str(path)
    return loaded, meta
