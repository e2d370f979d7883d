"""``bc.ties``: the expert's equal-gain actions (mirror-image rows) as its choice in cloning."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import crop_gym  # noqa: E402, F401
from crop_gym.agents.config import train_seed  # noqa: E402
from crop_gym.agents.demonstrations import Demonstrations  # noqa: E402
from crop_gym.agents.imitation import BCConfig, behaviour_cloning, record_demonstrations  # noqa: E402
from crop_gym.agents.networks import ObsSpec  # noqa: E402
from crop_gym.agents.policies import MaskableScorerPolicy  # noqa: E402
from crop_gym.agents.teachers import teacher_of  # noqa: E402

pytestmark = pytest.mark.rl

HEALTHY = "crop_gym/Placement-Healthy-v0"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    th.set_num_threads(1)


def test_equal_gain_actions_are_the_same_jobs_rows_of_equal_gain() -> None:
    # The privileged observation holds every row's exact ΔF (scaled): the equal-gain actions are
    # the expert's job's rows whose ΔF equals the expert's, and only those.
    env = gym.make(HEALTHY, privileged=True)
    u = env.unwrapped
    C = u.table.max_candidates
    seen_tie = False
    for seed in range(10**9, 10**9 + 5):
        obs, info = env.reset(seed=seed)
        a = int(teacher_of(env, "crop")())
        ties = u.equal_gain_actions(a)
        gain = obs["gain"].astype(np.float64)
        mask = np.asarray(info["action_mask"], bool)
        assert ties[a] and not (ties & ~mask).any()
        slot = np.arange(len(gain)) // C == a // C
        same = slot & mask[:-1] & np.isclose(gain, gain[a], rtol=0, atol=1e-6)
        assert np.array_equal(ties[:-1], same) and not ties[-1]
        seen_tie |= int(ties.sum()) > 1
        stop = u.table.stop_action
        assert np.flatnonzero(u.equal_gain_actions(stop)).tolist() == [stop]
    assert seen_tie  # the healthy 64-GPU cluster has mirror-image rows


def test_ties_are_recorded_saved_extended_and_subset(tmp_path: Path) -> None:
    env = gym.make(HEALTHY)
    d = record_demonstrations(env, [train_seed(0, 0, i) for i in range(3)])
    assert d.ties is not None and d.ties.shape == d.masks.shape
    assert d.ties[np.arange(len(d)), d.actions].all() and not (d.ties & ~d.masks).any()
    back = Demonstrations.load(d.save(tmp_path / "d.npz"))
    assert np.array_equal(back.ties, d.ties)
    # A set without ties (online, or saved before) stands for the expert's action alone.
    old = Demonstrations(d.obs, d.actions, d.masks, d.returns, d.value_weight, d.episode, d.seeds)
    assert np.array_equal(old.targets.sum(axis=1), np.ones(len(d)))
    both = d.extend(old)
    assert both.ties is not None and np.array_equal(both.ties[len(d) :], old.targets)
    assert np.array_equal(d.subset([2]).ties, d.ties[d.episode == 2])
    with pytest.raises(ValueError, match="ties of shape"):
        Demonstrations(
            d.obs, d.actions, d.masks, d.returns, d.value_weight, d.episode, d.seeds, d.ties[:, :-1]
        )


def _ce(demos: Demonstrations, ties: str, per_id: dict | None = None) -> float:
    env = gym.make(HEALTHY)
    from sb3_contrib import MaskablePPO

    spec = {"scorer": {"hidden": 16, "embed": 8, "spec": ObsSpec.from_env(env).to_dict()}}
    model = MaskablePPO(MaskableScorerPolicy, env, seed=0, policy_kwargs=spec)
    cfg = BCConfig(
        epochs=1, batch_size=4096, learning_rate=0.0, vf_coef=0.0, ties=ties, per_id=per_id or {}
    )
    hist = behaviour_cloning(model.policy, [demos], cfg, seed=0, env_ids=[HEALTHY])
    return float(hist["ce"][0])


def test_the_tie_loss_is_minus_log_the_ties_probability() -> None:
    env = gym.make(HEALTHY)
    d = record_demonstrations(env, [train_seed(0, 0, i) for i in range(3)])
    one_hot = np.eye(d.masks.shape[1], dtype=bool)[d.actions]
    alone = Demonstrations(
        d.obs, d.actions, d.masks, d.returns, d.value_weight, d.episode, d.seeds, one_hot
    )
    # Ties of the expert's action alone: the plain cross-entropy.
    assert _ce(alone, "equal_gain") == pytest.approx(_ce(d, "expert"), rel=1e-6)
    # Every valid action a tie: probability 1, loss 0.
    every = Demonstrations(
        d.obs, d.actions, d.masks, d.returns, d.value_weight, d.episode, d.seeds, d.masks.copy()
    )
    assert _ce(every, "equal_gain") == pytest.approx(0.0, abs=1e-6)
    # Real ties: more probability than the expert's action alone, so a lower loss.
    assert (d.ties.sum(axis=1) > 1).any()
    assert _ce(d, "equal_gain") < _ce(d, "expert")
    # bc.per_id sets the loss of one ID's set, either way round.
    tie_here = {HEALTHY: {"ties": "equal_gain"}}
    assert _ce(d, "expert", tie_here) == pytest.approx(_ce(d, "equal_gain"), rel=1e-6)
    plain_here = {HEALTHY: {"ties": "expert"}}
    assert _ce(d, "equal_gain", plain_here) == pytest.approx(_ce(d, "expert"), rel=1e-6)


def test_unknown_ties_mode_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"bc.ties='all' must be one of 'expert', 'equal_gain'"):
        BCConfig.from_dict({"ties": "all"})
