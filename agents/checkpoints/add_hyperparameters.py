"""Make a checkpoint loadable without unpickling: record its pickled hyperparameters as JSON.

SB3 stores ``clip_range``, a scheduled ``learning_rate`` and DQN's ``train_freq`` only pickled. This
one-off converter loads a checkpoint you trust with SB3's loader, reads those values (constant
schedules become numbers), and writes them into the metadata's ``hyperparameters`` together with
the JSON-readable constructor arguments; every other member of the zip is copied byte for byte, so
the weights, and every number evaluated from them, stay identical (checked on 5 held-out seeds).

Usage (how ``agents/checkpoints/default.zip`` was converted)::

    PYTHONPATH=. python agents/checkpoints/add_hyperparameters.py agents/checkpoints/default.zip
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path
from typing import Any


def _constant(key: str, value: Any) -> Any:
    if callable(value):
        a, b = float(value(1.0)), float(value(0.0))
        if a != b:
            raise SystemExit(f"{key} is a non-constant schedule; record it as lin_X by hand")
        return a
    if hasattr(value, "frequency"):  # DQN's TrainFreq
        return [int(value.frequency), str(value.unit.value)]
    return value


def main() -> None:
    """Convert the checkpoint in place (atomically) and check its evaluation is unchanged."""
    from crop_gym.agents.checkpoint import load_checkpoint, read_metadata, update_metadata
    from crop_gym.agents.config import EVAL_SEED_BASE, algo_parameters
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_static

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    args = ap.parse_args()
    meta = read_metadata(args.path)
    model, _ = load_checkpoint(args.path, trust=True)
    with zipfile.ZipFile(args.path) as z:
        data = json.loads(z.read("data"))
    hyper: dict[str, Any] = {}
    for key in algo_parameters(meta["algo"]):
        if key == "policy_kwargs" or key not in data:
            continue
        value = data[key]
        pickled = isinstance(value, dict) and ":serialized:" in value
        hyper[key] = _constant(key, getattr(model, key)) if pickled else value

    def score(m: Any) -> list[float]:
        rep = evaluate_static(
            PolicyAgent(m),
            meta["env_id"],
            episodes=5,
            first_seed=EVAL_SEED_BASE,
            baselines=("crop",),
            random_reference=False,
        )
        return [r["policy"]["F"] for r in rep["per_episode"]]

    before = score(model)
    update_metadata(args.path, args.path, hyperparameters=hyper)
    safe, _ = load_checkpoint(args.path)
    after = score(safe)
    if before != after:
        raise SystemExit(f"evaluation changed: {before} -> {after}")
    print(f"{args.path}: hyperparameters {hyper}; F on 5 held-out seeds unchanged: {after}")


if __name__ == "__main__":
    main()
