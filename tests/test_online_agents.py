"""Tests of the online agents: teacher imitation, the mean-JCT report, the shipped online policy."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

import crop_gym  # noqa: E402, F401
from crop_gym.agents.checkpoint import default_checkpoint, load_checkpoint, read_metadata  # noqa: E402
from crop_gym.agents.evaluation import PolicyAgent, evaluate_online  # noqa: E402
from crop_gym.agents.networks import CandidateScorer, ObsSpec, ScorerConfig, obs_to_tensors  # noqa: E402
from crop_gym.agents.training import train  # noqa: E402
from crop_gym.baselines.online import make_online_policy  # noqa: E402
from crop_gym.cli import main  # noqa: E402
from crop_gym.errors import ConfigError  # noqa: E402

BURSTY = "crop_gym/OnlinePlacement-Bursty-v1"
SHIPPED = default_checkpoint("default-online")
needs_shipped = pytest.mark.skipif(not SHIPPED.exists(), reason="default-online.zip not built")


class TeacherAgent:
    """An online baseline acting through the agent interface (``bind`` / ``act``)."""

    name = "teacher"

    def __init__(self, policy: str) -> None:
        self.policy = make_online_policy(policy)
        self.env: Any = None

    def bind(self, env: gym.Env[Any, Any]) -> None:
        self.env = env.unwrapped

    def act(self, obs: Any, mask: np.ndarray) -> int:
        return int(self.policy(self.env))


def test_policy_and_references_measure_mean_jct_alike() -> None:
    """The agent's mean JCT (the env's Little's-law integral) equals the reference's (ledger) when
    the agent plays the reference's own actions; the ratio keys follow."""
    rep = evaluate_online(
        TeacherAgent("sjf-crop"), BURSTY, episodes=2, first_seed=10**9 + 5, baselines=()
    )
    for r in rep["per_episode"]:
        assert r["policy"]["mean_jct_h"] == pytest.approx(r["references"]["sjf-crop"], rel=1e-9)
    assert rep["mean_jct_ratio_to"]["sjf-crop"] == pytest.approx(1.0, rel=1e-9)
    crop = np.mean([r["references"]["crop"] for r in rep["per_episode"]])
    assert rep["crop_mean_jct_h"] == pytest.approx(crop)
    assert rep["mean_jct_ratio_to_crop"] == pytest.approx(rep["policy_mean_jct_h"] / crop)


def test_slot_tables_reach_their_own_rows_only() -> None:
    """Per-slot tables are appended to the rows of their slot: changing slot q's remaining work
    changes the embeddings of q's rows only (context keys left out here)."""
    env = gym.make(BURSTY)
    spec = ObsSpec.from_env(env)
    assert spec.slot_tables == (("slots", 2),)
    assert ObsSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in spec.to_dict().items() if k != "slot_tables"}
    assert ObsSpec.from_dict(old).slot_tables == ()  # checkpoints from before load unchanged
    no_ctx = ObsSpec(**{**spec.__dict__, "context": ()})
    th.manual_seed(0)
    net = CandidateScorer(ScorerConfig(hidden=16, embed=8, spec=no_ctx))
    obs, _ = env.reset(seed=3)
    x = obs_to_tensors({k: obs[k] for k in ("gpus", "candidates", "queue", "summary", "slots")})
    x["candidates"] = th.ones_like(x["candidates"])  # every row valid
    y = {**x, "slots": x["slots"].clone()}
    y["slots"][0, 2 * 3] = 0.9  # slot 3's work
    with th.no_grad():  # row embeddings, before the rows are pooled into every logit
        a, b = net.actor(x)[1][0], net.actor(y)[1][0]
    C = env.unwrapped.max_candidates
    changed = np.flatnonzero((a != b).any(dim=-1).numpy())
    assert len(changed) and set(changed) <= set(range(3 * C, 4 * C))


def test_static_envs_refuse_an_online_teacher(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="teacher"):
        train(
            env_id="crop_gym/Placement-Testbed8-v0",
            steps=0,
            bc_demos=1,
            out=tmp_path / "r",
            hyperparams=["bc={teacher: sjf-crop}"],
            progress=False,
            log=None,
        )
    assert not (tmp_path / "r").exists()


def test_online_teacher_cloning_smoke(tmp_path: Path) -> None:
    """Clone sjf-crop on 2 windows, fine-tune 64 steps, validate on 1 window: the run completes,
    the curve reports the mean JCT ratio, and the checkpoint names the online env."""
    hp = [
        "eval_episodes=1",
        "n_steps=64",
        "batch_size=32",
        "bc={teacher: sjf-crop, epochs: 2, dagger_iterations: 0}",
    ]
    meta = train(
        env_id=BURSTY,
        steps=64,
        seed=3,
        bc_demos=2,
        out=tmp_path / "r",
        hyperparams=hp,
        progress=False,
        log=None,
    )
    assert meta["status"] == "done" and meta["phases"]["bc"]["train_agreement"] > 0
    assert all(r["mean_jct_ratio_to_crop"] > 0 for r in meta["curve"])
    assert read_metadata(tmp_path / "r" / "best_model.zip")["env_id"] == BURSTY


@needs_shipped
def test_shipped_online_checkpoint_loads_without_unpickling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cloudpickle

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("the safe loader unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(cloudpickle, "loads", refuse)
    model, meta = load_checkpoint("default-online")
    assert meta["env_id"].startswith("crop_gym/OnlinePlacement")
    assert meta["bc_demos"] > 0 and "held_out_evaluation" in meta
    assert PolicyAgent(model).scorer is not None


@needs_shipped
def test_eval_default_online_json_reports_mean_jct_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["eval", "--model", "default-online", "--episodes", "1", "--baselines", "none"]
    rc = main([*argv, "--json", "-", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["env_id"] == rep["trained_on"] == read_metadata(SHIPPED)["env_id"]
    assert rep["held_out"] and rep["mean_jct_ratio_to_crop"] > 0
    assert rep["mean_jct_ratio_to_crop"] == pytest.approx(
        rep["policy_mean_jct_h"] / rep["crop_mean_jct_h"]
    )
    assert rep["split"]["part"] == "eval"
    heur = rep["heuristic_mean_jct_h"]
    assert set(heur) == {"sjf-crop", "srsf-crop", "las-crop", "fifo-backfill-crop"}
    assert heur[rep["best_heuristic"]] == min(heur.values())
    assert rep["mean_jct_ratio_to_best_heuristic"] == pytest.approx(
        rep["policy_mean_jct_h"] / min(heur.values())
    )
    lo, hi = rep["mean_jct_ratio_to_best_heuristic_ci"]
    assert lo <= rep["mean_jct_ratio_to_best_heuristic"] <= hi


def test_training_plays_the_train_part_and_refuses_the_eval_part(tmp_path: Path) -> None:
    meta = train(
        env_id="crop_gym/OnlinePlacement-v2",
        steps=0,
        out=tmp_path / "r",
        progress=False,
        log=None,
        dry_run=True,
    )
    assert meta["config"]["env_kwargs"]["split"] == "train"
    v1 = train(env_id=BURSTY, steps=0, out=tmp_path / "r1", progress=False, log=None, dry_run=True)
    assert v1["config"]["env_kwargs"]["split"] == "train"  # v1 too: its first 70 %
    with pytest.raises(ConfigError, match=r"split='eval': training plays the train part"):
        train(
            env_id="crop_gym/OnlinePlacement-v2",
            steps=0,
            out=tmp_path / "r2",
            hyperparams=["env_kwargs={split: eval}"],
            progress=False,
            log=None,
            dry_run=True,
        )


def test_evaluation_plays_the_eval_part_and_records_the_split() -> None:
    rep = evaluate_online(
        TeacherAgent("sjf-crop"),
        "crop_gym/OnlinePlacement-Bursty-v2",
        episodes=2,
        first_seed=10**9,
        env_kwargs={"split": "train"},  # overridden: evaluation is on the eval part
        baselines=(),
        references=("crop",),
    )
    split = rep["split"]
    assert split["part"] == "eval" and split["train_fraction"] == 0.7
    assert split["held_out_traces"] == ["elasticflow:cluster06"]
    assert split["traces"] == [
        "elasticflow:cluster04",
        "elasticflow:cluster03",
        "elasticflow:cluster06",
    ]
    assert all(r["trace"] in split["traces"] for r in rep["per_episode"])
    val = evaluate_online(
        TeacherAgent("sjf-crop"),
        "crop_gym/OnlinePlacement-Bursty-v2",
        episodes=1,
        first_seed=5 * 10**8,
        baselines=(),
        references=(),
        split="train",
    )
    assert val["split"]["part"] == "train" and "elasticflow:cluster06" not in val["split"]["traces"]


def test_best_heuristic_and_its_bootstrap_interval() -> None:
    """The agent plays srsf-crop: its ratio to srsf-crop is 1 with no width, the best heuristic is
    the one of the lowest mean on these windows, and the interval brackets the ratio."""
    rep = evaluate_online(
        TeacherAgent("srsf-crop"), "crop_gym/OnlinePlacement-v2", episodes=4, baselines=()
    )
    heur = rep["heuristic_mean_jct_h"]
    best = rep["best_heuristic"]
    assert heur[best] == min(heur.values())
    ratio = rep["mean_jct_ratio_to_best_heuristic"]
    assert ratio == pytest.approx(rep["policy_mean_jct_h"] / heur[best])
    lo, hi = rep["mean_jct_ratio_to_best_heuristic_ci"]
    assert lo <= ratio <= hi
    assert rep["mean_jct_ratio_to"]["srsf-crop"] == pytest.approx(1.0, rel=1e-9)
    if best == "srsf-crop":
        assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    again = evaluate_online(
        TeacherAgent("srsf-crop"), "crop_gym/OnlinePlacement-v2", episodes=4, baselines=()
    )
    assert again["mean_jct_ratio_to_best_heuristic_ci"] == [lo, hi]  # seeded
    lo_c, hi_c = rep["mean_jct_ratio_to_crop_ci"]
    assert lo_c <= rep["mean_jct_ratio_to_crop"] <= hi_c
    partial = evaluate_online(
        TeacherAgent("srsf-crop"),
        "crop_gym/OnlinePlacement-v2",
        episodes=1,
        baselines=(),
        references=("crop", "sjf-crop"),
    )
    assert "best_heuristic" not in partial  # not all four played: no "best" of a subset
