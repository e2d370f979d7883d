"""Rebuild the checkpoint shipped in ``agents/checkpoints/default.zip``.

Trains MaskablePPO with the candidate scorer on ``crop_gym/Placement-v0``: behaviour cloning on 200
CROP episodes and one DAgger round (the config's defaults), then 20,000 steps of RL fine-tuning
(seed 1), evaluates the final model on 50 held-out
seeds (from 10^9) and exports it without the optimizer's moments (a ~0.25 MB file) with the
evaluation summary in its metadata.

Usage::

    PYTHONPATH=. python scripts/train_default_checkpoint.py [--out runs/default_checkpoint]
        [--from-run DIR]   # export an existing run instead of training
        [--dest agents/checkpoints/default.zip]
"""

from __future__ import annotations

import argparse
from pathlib import Path

RECIPE = dict(
    algo="maskable_ppo", env_id="crop_gym/Placement-v0", bc_demos=200, steps=20_000, seed=1
)


def main() -> None:
    """Train (or take an existing run), evaluate on held-out seeds, export."""
    import torch as th

    from agents._io import read_json
    from agents.checkpoint import export_checkpoint, load_checkpoint
    from agents.config import EVAL_SEED_BASE
    from agents.evaluation import PolicyAgent, evaluate_static
    from agents.training import train

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default="runs/default_checkpoint", help="training run directory")
    ap.add_argument("--from-run", default=None, help="export this existing run instead of training")
    ap.add_argument(
        "--dest",
        default=str(Path(__file__).resolve().parents[1] / "agents" / "checkpoints" / "default.zip"),
    )
    ap.add_argument("--episodes", type=int, default=50, help="held-out evaluation episodes")
    args = ap.parse_args()
    th.set_num_threads(1)
    run = Path(args.from_run) if args.from_run else Path(args.out)
    if not args.from_run:
        train(
            out=run,
            progress=True,
            argv=["scripts/train_default_checkpoint.py", "--out", str(run)],
            **RECIPE,
        )  # type: ignore[arg-type]
    src = run / "final_model.zip"
    model, meta = load_checkpoint(src)
    rep = evaluate_static(
        PolicyAgent(model), meta["env_id"], episodes=args.episodes, first_seed=EVAL_SEED_BASE
    )
    summary = {
        k: rep[k]
        for k in (
            "episodes",
            "first_seed",
            "policy_mean_F",
            "crop_mean_F",
            "ratio_to_crop",
            "gain_ratio_to_crop",
            "episodes_vs_crop",
        )
    }
    summary["ratio_to"] = rep["ratio_to"]
    dest = export_checkpoint(
        src,
        args.dest,
        source_run=str(run),
        recipe="crop-gym train --algo maskable_ppo --env crop_gym/Placement-v0 --bc-demos 200 --steps 20000 --seed 1",
        command=" ".join(read_json(run / "run.json").get("command") or []) or None,
        test_evaluation=summary,
    )
    print(
        f"wrote {dest} ({dest.stat().st_size / 1024:.0f} KiB); held-out ratio_to_crop {rep['ratio_to_crop']:.4f}"
    )


if __name__ == "__main__":
    main()
