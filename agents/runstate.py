"""State of one training run: metadata, learning curve, validation, checkpoints, callbacks.

:class:`RunState` is what :func:`crop_gym.agents.training.train` keeps while a run goes: it rewrites
``run.json`` and ``curve.json`` atomically, validates on the validation seeds, keeps the best model
and the periodic checkpoints; :func:`callbacks` gives the SB3 callbacks that drive it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.agents._io import atomic_write_json, versions
from crop_gym.agents.checkpoint import checkpoint_metadata, read_metadata, save_checkpoint
from crop_gym.agents.config import EVAL_SEED_BASE, TRAIN_SEED_LIMIT, VALIDATION_SEED_BASE, RunConfig
from crop_gym.io import atomic_write_with

__all__ = [
    "GAIN_THRESHOLDS",
    "TARGET_RATIO",
    "RunState",
    "callbacks",
    "keeps_later",
    "latest_checkpoint",
    "plot_curve",
    "time_to_target",
]

#: The ratio to CROP whose first crossing is reported as "time to target".
TARGET_RATIO = 0.98

#: Gain-ratio thresholds whose first crossing is also reported.
GAIN_THRESHOLDS = (0.95, 0.98, 0.99, 0.995, 0.999)


def time_to_target(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps and wall seconds of the first validation reaching the targets.

    Args:
        curve: Validation rows (``steps``, ``wall_s``, ``phase``, ``ratio_to_crop``,
            ``gain_ratio_to_crop``).

    Returns:
        ``{"target": 0.98, "ratio_to_crop": hit, "gain_ratio_to_crop": hit, "gain_thresholds":
        {threshold: hit}}`` with ``hit = {"steps", "wall_s", "phase"}`` or ``None``.
    """

    def first(key: str, level: float) -> dict[str, Any] | None:
        hit = next((r for r in curve if (r.get(key) or 0.0) >= level), None)
        return (
            None
            if hit is None
            else {"steps": hit["steps"], "wall_s": hit["wall_s"], "phase": hit["phase"]}
        )

    return {
        "target": TARGET_RATIO,
        "ratio_to_crop": first("ratio_to_crop", TARGET_RATIO),
        "gain_ratio_to_crop": first("gain_ratio_to_crop", TARGET_RATIO),
        "gain_thresholds": {str(t): first("gain_ratio_to_crop", t) for t in GAIN_THRESHOLDS},
    }


def plot_curve(curve: list[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Plot the validation ratio to CROP versus environment steps (matplotlib, Agg backend).

    Args:
        curve: Rows with ``steps``, ``ratio_to_crop`` and optionally ``gain_ratio_to_crop`` and
            ``random_gain_ratio``.
        path: Destination PNG (written atomically).
        title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["steps"] for r in curve]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if curve and curve[0].get("kind") == "online":
        ax.plot(
            steps,
            [r.get("jct_ratio_to_crop") for r in curve],
            "o-",
            label="mean JCT / CROP's (lower is better)",
        )
        ax.plot(
            steps,
            [r.get("ratio_to_crop") for r in curve],
            "s-",
            label="effective GPU-hours / CROP's",
        )
    else:
        ax.plot(
            steps, [r.get("ratio_to_crop") for r in curve], "o-", label="mean F / CROP's mean F"
        )
        ax.plot(
            steps, [r.get("gain_ratio_to_crop") for r in curve], "s-", label="mean F gain / CROP's"
        )
        ref = [r.get("random_gain_ratio") for r in curve if r.get("random_gain_ratio") is not None]
        if ref:
            ax.axhline(
                float(np.mean(ref)), color="grey", ls=":", label="random valid actions (gain)"
            )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(TARGET_RATIO, color="r", ls="--", lw=0.8, label=f"{TARGET_RATIO} x CROP")
    ax.set_xlabel("environment steps (RL)")
    ax.set_ylabel("ratio to CROP (validation seeds)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()

    def write(tmp: Path) -> None:
        fig.savefig(tmp, dpi=110, format="png")

    dest = atomic_write_with(path, write)
    plt.close(fig)
    return dest


def keeps_later(score: float, best: float | None) -> bool:
    """Whether a validation ``score`` (higher is better) replaces the kept best model.

    Ties go to the later model: validation is greedy on fixed seeds, so a fine-tuned model that
    scores exactly what the clone scored plays those instances as well as the clone, and the
    rule no longer keeps step 0 whenever RL leaves the validation mean unchanged (issue 32 item
    4: the strict rule did). A model that scores less is never kept.

    Args:
        score: The new validation score (ratio to CROP; minus the JCT ratio online).
        best: The best score so far (``None``: nothing kept yet).
    """
    return best is None or score >= best


def callbacks() -> Any:
    """The callback classes (defined lazily: they subclass SB3's BaseCallback)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class ProgressCallback(BaseCallback):  # type: ignore[misc]
        """A tqdm bar over environment steps, with the latest validation ratio."""

        def __init__(self, total: int, run: RunState) -> None:
            super().__init__()
            self.total = int(total)
            self.run = run
            self.bar: Any = None

        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=int(self.num_timesteps),
                unit="step",
                desc=f"{self.run.algo}",
                dynamic_ncols=True,
            )

        def _postfix(self) -> None:
            last = self.run.curve[-1] if self.run.curve else {}
            if last.get("ratio_to_crop") is not None:
                self.bar.set_postfix(ratio_to_crop=f"{last['ratio_to_crop']:.4f}", refresh=False)

        def _on_step(self) -> bool:
            if self.bar is not None:
                self.bar.n = min(int(self.num_timesteps), self.total)
                if self.n_calls % 16 == 0:
                    self._postfix()
                    self.bar.refresh()
            return True

        def _on_training_end(self) -> None:
            # After RunCallback's final validation (callbacks end in order): the bar closes on
            # the steps that ran and the last validation, not the one before.
            if self.bar is not None:
                self.bar.n = min(int(self.num_timesteps), self.total)
                self._postfix()
                self.bar.close()

    class RunCallback(BaseCallback):  # type: ignore[misc]
        """Validation (learning curve, best model; at the start, every ``eval_freq`` steps and at
        the end, each logged as ``eval/*``) and periodic checkpoints.

        Validations run at the *start* of a rollout (and at the end of training), never inside
        one: SB3 updates the policy after a rollout's last step, so a validation at that step
        (what ``_on_step`` sees) would score the model before the rollout's update, and the last
        update of a run would never be validated or kept as the best model. At a rollout's
        start every update of the steps counted so far has been applied; a validation is due
        once ``eval_freq`` steps have passed since the last one, so with ``eval_freq`` not a
        multiple of the rollout size it happens at the next rollout boundary.
        """

        def __init__(self, run: RunState) -> None:
            super().__init__()
            self.run = run
            self.last_eval = -1
            self.last_ckpt = -1

        def _on_training_start(self) -> None:
            self.last_eval = self.run.curve[-1]["steps"] if self.run.curve else -1
            self.last_ckpt = int(self.num_timesteps)
            if self.last_eval < int(self.num_timesteps):
                self._validate()

        def _on_rollout_start(self) -> None:
            # Called after the previous rollout's update (SB3: collect_rollouts, then train).
            if int(self.model.num_timesteps) - self.last_eval >= self.run.eval_freq:
                self._validate()

        def _on_step(self) -> bool:
            n = int(self.num_timesteps)
            if n - self.last_ckpt >= self.run.checkpoint_freq:
                self.run.save_periodic(self.model)
                self.last_ckpt = n
            return True

        def _on_training_end(self) -> None:
            # A final validation point after the last update, logged with SB3's logger so
            # TensorBoard has eval/* at the end (and the last update's train/*, which SB3 only
            # dumps at the start of the next rollout).
            if self.last_eval < int(self.model.num_timesteps):
                self._validate()

        def _validate(self) -> None:
            n = int(self.model.num_timesteps)
            row = self.run.validate(self.model, n)
            self.last_eval = n
            for k in (
                "ratio_to_crop",
                "gain_ratio_to_crop",
                "jct_ratio_to_crop",
                "policy_mean_gain",
            ):
                if row.get(k) is not None:
                    self.logger.record(f"eval/{k}", row[k])
            self.logger.dump(n)

    return ProgressCallback, RunCallback


class RunState:
    """State of one training run (paths, metadata, curve, validation)."""

    def __init__(
        self,
        *,
        algo: str,
        env_id: str,
        steps: int,
        seed: int,
        out: Path,
        cfg: RunConfig,
        bc_demos: int,
        progress: bool,
        argv: list[str],
    ) -> None:
        self.algo = algo
        self.env_id = env_id
        self.steps = int(steps)
        self.seed = int(seed)
        self.out = out
        self.cfg = cfg
        self.bc_demos = int(bc_demos)
        self.progress = progress
        self.env_kwargs = dict(cfg.run["env_kwargs"] or {})
        self.eval_freq = int(cfg.run["eval_freq"])
        self.eval_episodes = int(cfg.run["eval_episodes"])
        self.checkpoint_freq = int(cfg.run["checkpoint_freq"])
        self.curve: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self.elapsed_before = 0.0  # wall time of earlier sessions (resume)
        self.eval_seconds = 0.0
        self.best: float | None = None
        #: JSON-ready constructor arguments stored in every checkpoint (``hyperparameters``).
        self.hyperparameters: dict[str, Any] = {}
        self.meta: dict[str, Any] = {
            "command": argv,
            "algo": algo,
            "policy": cfg.run["policy"],
            "env_id": env_id,
            "env_kwargs": self.env_kwargs,
            "seed": self.seed,
            "steps": self.steps,
            "bc_demos": self.bc_demos,
            "config_source": cfg.source,
            "config": cfg.to_dict(),
            "seeds": {
                "model_seed": self.seed,
                "train_env_seeds": [self.seed + i for i in range(int(cfg.run["n_envs"]))],
                "train_seed_limit": TRAIN_SEED_LIMIT,
                "demo_seeds": None,
                "validation_first_seed": VALIDATION_SEED_BASE,
                "validation_episodes": self.eval_episodes,
                "test_seed_base": EVAL_SEED_BASE,
                "note": "training instances come from seeds < 10^6; validation (learning curve, best model) "
                "from 5*10^8; crop-gym eval reports on held-out seeds from 10^9",
            },
            "status": "running",
            "phases": {},
            "versions": versions(),
        }

    # ----------------------------------------------------------------- paths/meta
    @property
    def wall(self) -> float:
        """Wall seconds of the run so far (all sessions)."""
        return self.elapsed_before + time.perf_counter() - self.t0

    def write_meta(self) -> None:
        """Rewrite run.json (atomically)."""
        self.meta["wall_s"] = self.wall
        self.meta["curve"] = self.curve
        self.meta["time_to_target"] = self.time_to_target()
        atomic_write_json(self.out / "run.json", self.meta)

    def time_to_target(self) -> dict[str, Any]:
        """First validation at or above :data:`TARGET_RATIO` (F ratio and gain ratio), and the
        first at or above each of :data:`GAIN_THRESHOLDS` (gain ratio)."""
        return time_to_target(self.curve)

    def checkpoint_meta(self, model: Any, **extra: Any) -> dict[str, Any]:
        """Metadata stored inside a checkpoint."""
        from crop_gym.agents.policies import scorer_of

        scorer = scorer_of(model)
        return checkpoint_metadata(
            algo=self.algo,
            policy=self.cfg.run["policy"],
            env_id=self.env_id,
            env_kwargs=self.env_kwargs,
            seed=self.seed,
            num_timesteps=int(model.num_timesteps),
            bc_demos=self.bc_demos,
            scorer=None if scorer is None else scorer.config.to_dict(),
            reward_scale=self.cfg.run["reward_scale"],
            validation=self.curve[-1] if self.curve else None,
            seeds=self.meta["seeds"],
            hyperparameters=self.hyperparameters,
            **extra,
        )

    def save_periodic(self, model: Any) -> Path:
        """A checkpoint in checkpoints/ (the two newest are kept)."""
        d = self.out / "checkpoints"
        path = save_checkpoint(
            model, d / f"model_{int(model.num_timesteps)}_steps.zip", self.checkpoint_meta(model)
        )
        for old in periodic_checkpoints(d)[:-2]:
            old.unlink()
        self.write_meta()
        return path

    # ------------------------------------------------------------------ validation
    def validate(self, model: Any, steps: int, phase: str = "rl") -> dict[str, Any]:
        """Evaluate on the validation seeds, extend the curve, keep the best model."""
        from crop_gym.agents.evaluation import PolicyAgent, evaluate

        t = time.perf_counter()
        rep = evaluate(
            PolicyAgent(model),
            self.env_id,
            episodes=self.eval_episodes,
            first_seed=VALIDATION_SEED_BASE,
            env_kwargs=self.env_kwargs,
            baselines=("crop",),
            references=("crop",),
            split="train",  # model selection never sees the eval part of the traces
        )
        dt = time.perf_counter() - t
        self.eval_seconds += dt
        row: dict[str, Any] = {
            "steps": int(steps),
            "phase": phase,
            "wall_s": self.wall,
            "kind": rep["kind"],
        }
        if rep["kind"] == "static":
            row.update(
                ratio_to_crop=rep.get("ratio_to_crop"),
                gain_ratio_to_crop=rep.get("gain_ratio_to_crop"),
                policy_mean_gain=rep["policy_mean_gain"],
                crop_mean_gain=rep.get("crop_mean_gain"),
                random_gain_ratio=(
                    rep["baselines"].get("random-valid-action", {}).get("mean_gain") or 0.0
                )
                / rep["crop_mean_gain"]
                if rep.get("crop_mean_gain")
                else None,
            )
            score = row["ratio_to_crop"]
        else:
            row.update(
                ratio_to_crop=rep.get("ratio_to_crop"),
                jct_ratio_to_crop=rep.get("jct_ratio_to_crop"),
                time_in_system_ratio_to_crop=rep.get("time_in_system_ratio_to_crop"),
                policy_mean_jct_s=rep.get("policy_mean_jct_s"),
                crop_mean_jct_s=rep.get("crop_mean_jct_s"),
            )
            row["mean_jct_ratio_to_crop"] = rep.get("mean_jct_ratio_to_crop")
            j = rep.get("mean_jct_ratio_to_crop") or rep.get("time_in_system_ratio_to_crop")
            score = None if j is None else -j
        row["eval_seconds"] = dt
        self.curve = [r for r in self.curve if r["steps"] < steps or r["phase"] != phase] + [row]
        atomic_write_json(self.out / "curve.json", self.curve)
        if score is not None and keeps_later(score, self.best):
            self.best = score
            save_checkpoint(
                model,
                self.out / "best_model.zip",
                self.checkpoint_meta(model, selected_by="validation"),
            )
            self.meta["best_validation"] = row
        self.write_meta()
        return row


def periodic_checkpoints(d: Path) -> list[Path]:
    def steps(p: Path) -> int:
        m = re.search(r"model_(\d+)_steps", p.name)
        return int(m.group(1)) if m else -1

    return sorted(d.glob("model_*_steps.zip"), key=steps) if d.exists() else []


def latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint of ``out`` with the most environment steps (periodic ones and the final one)."""
    found = [*periodic_checkpoints(out / "checkpoints")]
    if (out / "final_model.zip").exists():
        found.append(out / "final_model.zip")
    if not found:
        return None
    return max(found, key=lambda p: int(read_metadata(p).get("num_timesteps") or -1))
