"""The lookahead teacher, the rliable-style statistics and the shipped policy that beats CROP."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401
from crop_gym.agents.stats import iqm, ratio_bootstrap
from crop_gym.baselines.rollout_expert import CropRolloutExpert
from crop_gym.policy import apply, make_policy

ROOT = Path(__file__).resolve().parents[1]
SEVERE = "crop_gym/Placement-Severe-v0"
RESULTS = ROOT / "docs/results/static_rl_Placement-Severe-v0.json"


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # the middle four: 3, 4, 5, 6
    assert iqm([1.0, 1.0, 1.0, 100.0]) == 1.0


def test_ratio_bootstrap_of_constant_ratios_has_no_width() -> None:
    ref = np.array([1.0, 2.0, 4.0])
    out = ratio_bootstrap(np.vstack([1.1 * ref, 1.1 * ref]), ref, reps=200)
    assert out["ratio_of_means"] == pytest.approx(1.1) and out["iqm_ratio"] == pytest.approx(1.1)
    assert out["ratio_of_means_ci95"] == pytest.approx([1.1, 1.1])
    mixed = ratio_bootstrap(np.array([[1.0, 2.0, 4.0], [1.2, 2.4, 4.8]]), ref, reps=500)
    lo, hi = mixed["ratio_of_means_ci95"]
    assert mixed["ratio_of_means"] == pytest.approx(1.1)
    assert 1.0 <= lo < 1.1 < hi <= 1.2


def _crop_F(u) -> float:  # type: ignore[no-untyped-def]
    st, q = u.state.copy(), tuple(u.pending)
    apply(st, make_policy("crop", max_candidates=u.max_candidates).place(st, q))
    return float(st.F)


def test_lookahead_teacher_is_valid_and_not_below_crop_on_severe() -> None:
    env = gym.make(SEVERE)
    expert = CropRolloutExpert(env, top=6)
    u = env.unwrapped
    better = 0
    for seed in (10**9, 10**9 + 1, 10**9 + 2):
        _, info = env.reset(seed=seed)
        crop = _crop_F(u)
        done = False
        while not done:
            a = expert.action()
            assert info["action_mask"][a]
            _, _, term, trunc, info = env.step(a)
            done = term or trunc
        assert crop - 1e-9 <= u.state.F
        better += crop + 1e-6 < u.state.F
    assert better >= 1  # it improves on CROP somewhere, or it teaches nothing


def test_lookahead_teacher_stops_when_nothing_gains() -> None:
    env = gym.make("crop_gym/Placement-Testbed8-v0")
    env.reset(seed=3)
    u = env.unwrapped
    expert = CropRolloutExpert(env, min_gain=1e12)  # no row gains that much
    assert expert.action() == u.table.stop_action
    with pytest.raises(Exception, match="top"):
        CropRolloutExpert(env, top=0)


def test_crop_rollout_is_a_static_teacher_only() -> None:
    from crop_gym.agents.teachers import teacher_of

    env = gym.make("crop_gym/Placement-Testbed8-v0")
    env.reset(seed=0)
    assert isinstance(teacher_of(env, "crop-rollout")(), int)
    with pytest.raises(ValueError, match="crop or crop-rollout"):
        teacher_of(env, "sjf-crop")


def test_eval_plays_the_agent_under_safe_stop(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib")
    from crop_gym.cli import main

    out = tmp_path / "eval.json"
    argv = ["eval", "--model", "default", "--env", "crop_gym/Placement-Testbed8-v0"]
    argv += ["--episodes", "2", "--seed", str(10**9), "--baselines", "crop", "--no-progress"]
    assert main([*argv, "--safe-stop", "exhausted", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["safe_stop"] == "exhausted" and rep["policy_invalid_actions"] == 0
    # exhausted: the agent never stops while a placement is valid, so it places every job that
    # CROP places on these instances or more.
    placed = [r["policy"]["jobs_placed"] for r in rep["per_episode"]]
    assert all(p >= 1 for p in placed)


class _StopWhenAllowed:
    """Picks stop whenever the mask it is handed allows it, else the first valid placement."""

    name = "stop-when-allowed"

    def bind(self, env: gym.Env) -> None:  # type: ignore[type-arg]
        """Nothing to prepare."""

    def act(self, obs: object, mask: np.ndarray) -> int:
        return len(mask) - 1 if mask[-1] else int(np.flatnonzero(mask)[0])


@pytest.mark.parametrize("mode", ["positive_gain", "exhausted"])
def test_eval_under_safe_stop_hands_the_agent_the_wrappers_mask(mode: str) -> None:
    from crop_gym.agents.evaluation import evaluate_static

    rep = evaluate_static(
        _StopWhenAllowed(),
        "crop_gym/Placement-Testbed8-v0",
        episodes=2,
        first_seed=10**9,
        baselines=(),
        random_reference=False,
        safe_stop=mode,
    )
    # With the base env's mask stop is always allowed: the agent stops at once, SafeStop refuses
    # it, and the episode burns its step cap on invalid actions with nothing placed.
    assert rep["policy_invalid_actions"] == 0
    assert all(r["policy"]["jobs_placed"] >= 1 for r in rep["per_episode"])


def test_eval_baselines_crop_rollout_is_in_ratio_to(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib")
    from crop_gym.cli import main

    out = tmp_path / "eval.json"
    argv = ["eval", "--model", "default", "--env", "crop_gym/Placement-Testbed8-v0"]
    argv += ["--episodes", "2", "--baselines", "crop,crop-rollout", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert set(rep["ratio_to"]) >= {"crop", "crop-rollout"}
    for r in rep["per_episode"]:
        # the lookahead is never below CROP on these instances (it tries CROP's own first row)
        assert r["baselines"]["crop-rollout"]["F"] >= r["baselines"]["crop"]["F"] - 1e-9
    rollout_F = np.mean([r["baselines"]["crop-rollout"]["F"] for r in rep["per_episode"]])
    assert rep["ratio_to"]["crop-rollout"] == pytest.approx(rep["policy_mean_F"] / rollout_F)


def test_eval_refuses_crop_rollout_on_a_gpu_mode_env(capsys: pytest.CaptureFixture[str]) -> None:
    from crop_gym.agents.evaluation import evaluate_static
    from crop_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="candidate-mode Placement-\\* environments only"):
        evaluate_static(
            _StopWhenAllowed(), "crop_gym/PlacementGPU-Testbed8-v0", baselines=("crop-rollout",)
        )


def test_eval_refuses_safe_stop_on_an_online_env(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sb3_contrib")
    from crop_gym.cli import main

    argv = ["eval", "--model", "default-online", "--episodes", "1", "--baselines", "none"]
    assert main([*argv, "--safe-stop", "positive_gain", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "static placement environments only" in err[0]


def test_shipped_severe_policy_reproduces_its_published_evaluation() -> None:
    pytest.importorskip("sb3_contrib")
    from crop_gym.agents.checkpoint import default_checkpoint, load_checkpoint, read_metadata
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_static

    path = default_checkpoint("default-severe")
    assert path.exists() and path.stat().st_size < 1_000_000
    assert read_metadata(path)["env_id"] == SEVERE
    published = json.loads(RESULTS.read_text())
    assert published["training_seeds"][0] == published["per_seed"][0]["seed"]
    # The published figure: every training seed above CROP, the interval above 1.02's side.
    assert published["vs_crop"]["ratio_of_means"] >= 1.02
    assert all(s["ratio_to_crop"] > 1.0 for s in published["per_seed"])
    model, _ = load_checkpoint("default-severe")
    rep = evaluate_static(
        PolicyAgent(model),
        SEVERE,
        episodes=4,
        first_seed=published["held_out_seeds"][0],
        baselines=("crop",),
        random_reference=False,
    )
    got = [r["policy"]["F"] for r in rep["per_episode"]]
    crop = [r["baselines"]["crop"]["F"] for r in rep["per_episode"]]
    assert got == pytest.approx(published["per_episode"]["policy"][0][:4], rel=1e-9)
    assert crop == pytest.approx(published["per_episode"]["crop"][:4], rel=1e-9)


STATIC_POLICY = Path(__file__).resolve().parents[1] / "docs" / "results" / "static_policy.json"


@pytest.mark.parametrize("env_id", ["crop_gym/Placement-Testbed8-v0", "crop_gym/Placement-RTX-v0"])
def test_shipped_default_reproduces_its_published_per_id_figures(env_id: str) -> None:
    """docs/results/static_policy.json (scripts/evaluate_static_ids.py) is what the shipped default
    does: its mean F on the published held-out seeds, under the published SafeStop, to 1e-9, and
    the 0.99 x CROP bar holds on every static ID."""
    pytest.importorskip("sb3_contrib")
    from crop_gym.agents.checkpoint import load_checkpoint
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_static

    published = json.loads(STATIC_POLICY.read_text())
    assert published["model"] == "default"
    assert all(r["ratio_to_crop"] >= published["target"] == 0.99 for r in published["rows"])
    row = next(r for r in published["rows"] if r["env_id"] == env_id)
    model, _ = load_checkpoint("default")
    rep = evaluate_static(
        PolicyAgent(model),
        env_id,
        episodes=row["episodes"],
        first_seed=published["first_seed"],
        baselines=("crop",),
        random_reference=False,
        safe_stop=published["safe_stop"],
    )
    assert rep["policy_mean_F"] == pytest.approx(row["policy_mean_F"], rel=1e-9)
    assert rep["crop_mean_F"] == pytest.approx(row["crop_mean_F"], rel=1e-9)
