"""One training run per seed, for the scripts that train several seeds and ship one.

``scripts/train_default_online.py`` and ``scripts/train_default_severe.py`` train a recipe on
seeds 1..5 in worker processes, evaluate every run on held-out instances and ship the first seed's.
:func:`train_seed` is the worker's job (a top-level function, so a process pool can pickle it);
:func:`run_summary` reads the same record back from a finished run's ``run.json``
(``--skip-train``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["run_summary", "train_seed"]


def _summary(meta: dict[str, Any]) -> dict[str, Any]:
    bc = (meta.get("phases") or {}).get("bc") or {}
    return {
        "seed": meta["seed"],
        "steps": meta.get("steps"),
        "teacher": ((meta.get("config") or {}).get("bc") or {}).get("teacher", "crop"),
        "bc": {k: v for k, v in bc.items() if k in ("train_agreement", "val_agreement", "wall_s")},
        "best_validation": meta.get("best_validation"),
        "final_validation": meta.get("final_validation"),
    }


def train_seed(job: dict[str, Any]) -> dict[str, Any]:
    """Train ``job`` (:func:`crop_gym.agents.training.train` keywords: ``env_id``, ``steps``, ``seed``,
    ``out``, ``bc_demos``, ``dagger``) on one torch thread; the run's summary with its CPU and
    wall seconds."""
    import torch as th

    th.set_num_threads(1)
    from crop_gym.agents.training import train

    t_cpu, t_wall = time.process_time(), time.perf_counter()
    meta = train(**job, progress=False, log=None)
    return {
        **_summary(meta),
        "cpu_s": time.process_time() - t_cpu,
        "wall_s": time.perf_counter() - t_wall,
    }


def run_summary(out: str | Path) -> dict[str, Any]:
    """The summary of the finished run in ``out`` (CPU time unknown: ``None``)."""
    meta = json.loads((Path(out) / "run.json").read_text(encoding="utf-8"))
    return {**_summary(meta), "cpu_s": None, "wall_s": meta.get("wall_s")}
