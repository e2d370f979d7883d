"""``OnlinePlacement-v1`` specifics (the generic checks are in tests/test_env_battery.py) and the
``SafeStop`` wrapper."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs.online import action_mask
from crop_gym.errors import ConfigError
from crop_gym.wrappers import SafeStop

V1 = "crop_gym/OnlinePlacement-v1"


def _first_valid(env: gym.Env) -> int:
    return int(np.flatnonzero(env.unwrapped.action_masks())[0])  # type: ignore[attr-defined]


def test_several_jobs_are_placeable_and_each_has_its_own_slot() -> None:
    env = gym.make(V1)
    multi = decisions = 0
    for seed in (10**9, 10**9 + 1):
        env.reset(seed=seed)
        done = False
        while not done:
            t = env.unwrapped.table  # type: ignore[attr-defined]
            decisions += int(t.has_placement)
            multi += int(len(t.jobs) > 1)
            assert len({j.job_id for j in t.jobs}) == len(t.jobs)
            assert all(c <= 1 for c in t.copies.tolist())  # no grouping of identical jobs
            _, _, term, trunc, _ = env.step(_first_valid(env))
            done = term or trunc
    assert multi >= decisions // 5 > 0


def test_wait_keeps_jobs_queued_and_advances_time() -> None:
    env = gym.make(V1, arrival_scale=0.01)
    _, info = env.reset(seed=3)
    u = env.unwrapped
    while len(u.table.jobs) < 2:  # type: ignore[attr-defined]
        _, _, term, trunc, info = env.step(_first_valid(env))
        assert not (term or trunc)
    queued, t0 = info["queued"], info["time_s"]
    wait = int(env.action_space.n) - 1  # type: ignore[attr-defined]
    _, r, _, _, info = env.step(wait)
    assert info["time_s"] > t0 and info["placed"] is None
    assert info["queued"] >= queued - info["completed"]  # nobody was started by waiting
    terms = info["reward_terms"]
    assert set(terms) == {"effective", "waiting", "in_system"}
    assert terms["effective"] >= 0 >= terms["waiting"] >= terms["in_system"]
    # v1 weighs effective and waiting (ONLINE_WEIGHTS); in_system is reported, not rewarded.
    assert float(r) == pytest.approx(terms["effective"] + terms["waiting"])
    assert terms["waiting"] < 0  # jobs were queued over the interval


def test_mask_predicates_and_health_changes() -> None:
    env = gym.make(V1)
    env.reset(seed=10**9 + 1)
    u = env.unwrapped
    onsets = 0
    done = False
    while not done:
        mask = u.action_masks()  # type: ignore[attr-defined]
        t = u.table  # type: ignore[attr-defined]
        assert mask[-1] and mask.sum() == len(t.row_slot) + 1
        np.testing.assert_array_equal(mask, action_mask(t))
        _, _, term, trunc, info = env.step(_first_valid(env))
        done = term or trunc
    onsets = info["sim_metrics"]["abnormal_onsets"]
    assert onsets > 0
    assert info["mean_jct_h"] > 0


def test_bursts_and_arguments() -> None:
    env = gym.make("crop_gym/OnlinePlacement-Bursty-v1")
    env.reset(seed=0)
    arrivals = {j.arrival for j in env.unwrapped.sim.jobs}  # type: ignore[attr-defined]
    assert all(a % 1800.0 == 0 for a in arrivals) and len(arrivals) < 48
    for bad in ({"burst_s": 0.0}, {"reward_weights": {"bogus": 1.0}}, {"waiting_view": 0}):
        with pytest.raises(ConfigError):
            gym.make(V1, **bad)


# ------------------------------------------------------------------------------ SafeStop
@pytest.mark.parametrize("mode", ["positive_gain", "exhausted"])
def test_safe_stop_never_gives_up_a_gain(mode: str) -> None:
    env = SafeStop(gym.make("crop_gym/Placement-Severe-v0"), mode=mode)
    rng = np.random.default_rng(0)
    for seed in range(4):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            mask = env.action_masks()
            np.testing.assert_array_equal(mask, info["action_mask"])
            assert mask.any()
            t = env.base.table
            # Each row's ΔF: own value plus the interference on placed jobs (evaluated here
            # when the table skipped it).
            gains = t.gains.own + env.base.state.interference(t.facts)
            if t.has_placement and (mode == "exhausted" or (gains > 1e-9).any()):
                assert not mask[-1]
                _, r, term, trunc, info = env.step(len(mask) - 1)  # a masked stop: a no-op
                assert info["invalid_action"] and float(r) == 0.0 and not term
            a = (
                len(mask) - 1
                if mask[-1] and rng.random() < 0.5
                else int(rng.choice(np.flatnonzero(mask)))
            )
            _, _, term, trunc, info = env.step(a)
            done = term or trunc
        if mode == "exhausted":
            assert not env.base.table.has_placement or trunc


def test_safe_stop_refuses_other_envs() -> None:
    with pytest.raises(ConfigError):
        SafeStop(gym.make("crop_gym/PlacementGPU-Testbed8-v0"))
    with pytest.raises(ConfigError):
        SafeStop(gym.make("crop_gym/Placement-Testbed8-v0"), mode="sometimes")
