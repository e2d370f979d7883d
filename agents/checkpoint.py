"""Checkpoints: SB3 ``.zip`` files with the run's metadata inside, and the shipped default.

A checkpoint is what ``model.save`` writes plus one extra member, ``crop_gym_agent.json``: the
algorithm, the policy kind, the environment ID and arguments it was trained on, the scorer's
options, the seed, the step count and the library versions. SB3 ignores the extra member, so
``MaskablePPO.load(path)`` still works; :func:`load_checkpoint` reads both.

The checkpoint shipped with the package is ``agents/checkpoints/default.zip`` (``--model default``).
"""

from __future__ import annotations

import io
import json
import zipfile
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from agents._io import atomic_write, to_jsonable

__all__ = [
    "ALGO_CLASSES",
    "DEFAULT_CHECKPOINT",
    "META_NAME",
    "algo_class",
    "checkpoint_metadata",
    "default_checkpoint",
    "export_checkpoint",
    "load_checkpoint",
    "read_metadata",
    "resolve_model_path",
    "save_checkpoint",
]

#: Name of the metadata member inside a checkpoint zip.
META_NAME = "crop_gym_agent.json"
#: Format tag of the metadata.
FORMAT = "crop_gym-agent/1"
#: Algorithm name → "module:Class".
ALGO_CLASSES: dict[str, str] = {
    "maskable_ppo": "sb3_contrib:MaskablePPO",
    "ppo": "stable_baselines3:PPO",
    "dqn": "agents.policies:MaskedDQN",
}


def default_checkpoint() -> Path:
    """Path of the checkpoint shipped with the package."""
    return Path(str(resources.files("agents") / "checkpoints" / "default.zip"))


DEFAULT_CHECKPOINT = "default"


def algo_class(algo: str) -> Any:
    """The SB3 algorithm class of ``algo``."""
    import importlib

    try:
        module, cls = ALGO_CLASSES[algo].split(":")
    except KeyError:
        raise ValueError(
            f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGO_CLASSES)}"
        ) from None
    return getattr(importlib.import_module(module), cls)


def checkpoint_metadata(**fields: Any) -> dict[str, Any]:
    """Metadata with the format tag, a UTC timestamp and the library versions added."""
    from agents._io import versions

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

    return atomic_write(dest, write)


def export_checkpoint(
    src: str | Path, dest: str | Path, *, strip_optimizer: bool = True, **extra: Any
) -> Path:
    """Copy a checkpoint for shipping: optimizer moments dropped, metadata extended with ``extra``.

    Args:
        src: A checkpoint (see :func:`resolve_model_path`).
        dest: Destination ``.zip``.
        strip_optimizer: Drop Adam's moment estimates (about two thirds of the file).
        **extra: Metadata fields to add (e.g. ``source`` or an evaluation summary).
    """
    model, meta = load_checkpoint(src)
    meta.pop("path", None)
    meta.update(to_jsonable(extra))
    return save_checkpoint(model, dest, meta, strip_optimizer=strip_optimizer)


def resolve_model_path(model: str | Path) -> Path:
    """A checkpoint path from ``default``, a ``.zip`` file or a training run directory.

    A run directory resolves to its ``best_model.zip`` (best validation ratio to CROP), else its
    ``final_model.zip``, else the newest file in ``checkpoints/``.

    Raises:
        FileNotFoundError: If nothing loadable is found.
    """
    if str(model) == DEFAULT_CHECKPOINT:
        p = default_checkpoint()
        if not p.exists():
            raise FileNotFoundError(f"the shipped checkpoint {p} is missing (reinstall crop-gym)")
        return p
    p = Path(model)
    if p.is_dir():
        for name in ("best_model.zip", "final_model.zip"):
            if (p / name).exists():
                return p / name
        ckpts = sorted((p / "checkpoints").glob("*.zip"), key=lambda f: f.stat().st_mtime)
        if ckpts:
            return ckpts[-1]
        raise FileNotFoundError(f"{p}: no best_model.zip, final_model.zip or checkpoints/*.zip")
    if not p.exists():
        raise FileNotFoundError(f"no checkpoint at {p}")
    return p


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata inside a checkpoint (``{}`` for a plain SB3 zip)."""
    with zipfile.ZipFile(path) as z:
        if META_NAME not in z.namelist():
            return {}
        meta: dict[str, Any] = json.loads(z.read(META_NAME).decode("utf-8"))
        return meta


def load_checkpoint(
    model: str | Path, *, env: Any = None, algo: str | None = None, **kwargs: Any
) -> tuple[Any, dict[str, Any]]:
    """Load a checkpoint: ``(SB3 model, metadata)``.

    Args:
        model: ``default``, a ``.zip`` path or a run directory (see :func:`resolve_model_path`).
        env: Environment to attach (needed to continue training).
        algo: Algorithm, for a plain SB3 zip without metadata.
        **kwargs: Passed to ``Algo.load`` (e.g. ``tensorboard_log``).
    """
    path = resolve_model_path(model)
    meta = read_metadata(path)
    name = meta.get("algo") or algo
    if name is None:
        raise ValueError(
            f"{path}: no crop_gym metadata; pass the algorithm (maskable_ppo, ppo or dqn)"
        )
    cls = algo_class(name)
    loaded = cls.load(path, env=env, device="cpu", **kwargs)
    meta.setdefault("algo", name)
    meta["path"] = str(path)
    return loaded, meta
