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
import pickle
import zipfile
import zlib
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from crop_gym.agents._io import to_jsonable
from crop_gym.agents.algorithms import ALGO_CLASSES, algo_class, policy_class
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
    with _open_zip(path) as z:
        members = [(i, _read_member(z, path, i.filename, MAX_WEIGHTS_BYTES)) for i in z.infolist()]

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
#: Pickled SB3 fields the safe loader rebuilds (from the metadata, the environment, the settings).
_REBUILT = frozenset(
    {
        "policy_class",
        "observation_space",
        "action_space",
        "lr_schedule",
        "exploration_schedule",
        "rollout_buffer_class",
        "replay_buffer_class",
    }
)
#: Pickled run-time state that acting does not need and training resets.
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
#: Plain ``data`` fields never copied onto the model.
_PROTECTED = frozenset({"policy", "env", "device", "policy_aliases", "_vec_normalize_env"})
_TRUST_HINT = "pass --trust-checkpoint (trust=True) to unpickle it, only for a file you trust"


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _open_zip(path: Path) -> zipfile.ZipFile:
    check_regular_input(path, what="checkpoint")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable checkpoint zip ({_one_line(e)})") from None


def _read_member(z: zipfile.ZipFile, path: Path, name: str, limit: int) -> bytes:
    try:
        info = z.getinfo(name)
    except KeyError:
        raise ConfigError(f"{path}: not an SB3 checkpoint (no {name!r} member)") from None
    if info.file_size > limit:
        raise ConfigError(f"{path}: member {name!r} is larger than {limit} bytes")
    try:
        with z.open(info) as fh:
            raw = fh.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError) as e:
        raise ConfigError(f"{path}: member {name!r} is damaged ({_one_line(e)})") from None
    except NotImplementedError as e:
        raise ConfigError(f"{path}: member {name!r}: {_one_line(e)}") from None
    if len(raw) > limit:
        raise ConfigError(f"{path}: member {name!r} is larger than {limit} bytes")
    return raw


def _json_member(z: zipfile.ZipFile, path: Path, name: str) -> dict[str, Any]:
    raw = _read_member(z, path, name, MAX_DATA_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: member {name!r} is not UTF-8 text (byte {e.start})") from None
    if name == META_NAME:
        return parse_mapping(text, "json", f"{path}:{name}")
    try:  # SB3 writes NaN/Infinity for non-finite floats: plain json, no parse_mapping
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"{path}: member {name!r} is not JSON ({_one_line(e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: member {name!r} is not a JSON object")
    return data


def _weights(z: zipfile.ZipFile, path: Path, name: str) -> Any:
    import torch as th

    raw = _read_member(z, path, name, MAX_WEIGHTS_BYTES)
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
    p = Path(path)
    with _open_zip(p) as z:
        if META_NAME not in z.namelist():
            return {}
        return _json_member(z, p, META_NAME)


def _spaces(path: Path, meta: dict[str, Any]) -> tuple[Any, Any]:
    """The observation and action spaces of the environment the checkpoint was trained on."""
    from crop_gym.agents.config import check_env_id

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


def _safe_load(
    path: Path, meta: dict[str, Any], name: str, env: Any, kwargs: dict[str, Any]
) -> Any:
    """Rebuild an SB3 model from the JSON fields and the tensors only (nothing unpickled)."""
    from stable_baselines3.common.save_util import recursive_getattr, recursive_setattr

    from crop_gym.agents.config import check_entry, resolve_schedule

    if not meta:
        raise ConfigError(
            f"{path}: no crop_gym metadata ({META_NAME}), so its policy class is only stored "
            f"pickled; {_TRUST_HINT}"
        )
    with _open_zip(path) as z:
        data = _json_member(z, path, "data")
        pickled = {k for k, v in data.items() if isinstance(v, dict) and ":serialized:" in v}
        needed = sorted(pickled - _REBUILT - _RUNTIME - _FROM_META)
        if needed:
            raise ConfigError(f"{path}: {', '.join(needed)} stored only pickled; {_TRUST_HINT}")
        names = [n for n in z.namelist() if n.endswith(".pth")]
        if "policy.pth" not in names:
            raise ConfigError(f"{path}: not an SB3 checkpoint (no 'policy.pth' member)")
        tensors = {n[: -len(".pth")]: _weights(z, path, n) for n in names}
    plain = {k: v for k, v in data.items() if k not in pickled}
    pkw = plain.get("policy_kwargs")
    if pkw is not None and not isinstance(pkw, dict):
        raise ConfigError(f"{path}: policy_kwargs in 'data' is not a mapping")
    policy = meta.get("policy") or (
        "CandidateScorer" if "scorer" in (pkw or {}) else "MultiInputPolicy"
    )
    hyper = meta.get("hyperparameters") or {}
    if not isinstance(hyper, dict):
        raise ConfigError(f"{path}: hyperparameters in the metadata is not a mapping")
    restore = {k: hyper[k] for k in sorted(pickled & _FROM_META) if k in hyper}
    check_entry(name, restore, f"{path}: hyperparameters")
    pvars = tensors.pop("pytorch_variables", None)
    try:
        model = algo_class(name)(
            policy=policy_class(name, str(policy)), env=env, device="cpu", _init_setup_model=False
        )
        if env is None:
            model.observation_space, model.action_space = _spaces(path, meta)
        skip = _PROTECTED | ({"n_envs"} if env is not None else set())
        for k, v in plain.items():
            # Only data attributes: never a name that shadows a method or property of the class.
            if k in skip or k.startswith("__") or hasattr(type(model), k):
                continue
            setattr(model, k, v)
        if isinstance(model.policy_kwargs, dict):
            model.policy_kwargs.pop("device", None)
        for k, v in restore.items():
            setattr(model, k, tuple(v) if isinstance(v, list) else resolve_schedule(v))
        model.__dict__.update(kwargs)
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
