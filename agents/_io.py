"""Small helpers: JSON encoding and writing (through :mod:`crop_gym.io`'s one writer), run
metadata, library versions."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.io import OutputFolder, atomic_write_text

__all__ = ["atomic_write_json", "read_json", "to_jsonable", "versions"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and paths to JSON-ready values (recursively)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def atomic_write_json(path: str | Path, data: Any, *, folder: OutputFolder | None = None) -> Path:
    """Write ``data`` as indented JSON, atomically (into ``folder`` as pinned, if given)."""
    text = json.dumps(to_jsonable(data), indent=2, sort_keys=False) + "\n"
    return atomic_write_text(path, text, folder=folder)


def read_json(path: str | Path) -> Any:
    """Read a JSON file."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def versions() -> dict[str, str]:
    """Versions of the libraries a result depends on."""
    out = {"python": platform.python_version()}
    for name in ("crop_gym", "numpy", "gymnasium", "torch", "stable_baselines3", "sb3_contrib"):
        try:
            mod = __import__(name)
            out[name] = str(getattr(mod, "__version__", "?"))
        except ImportError:  # pragma: no cover - optional
            out[name] = "missing"
    return out
