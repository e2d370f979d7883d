"""Honest online splits (issue 32, item 2): train windows before each trace's cut, eval windows at
or after it and from held-out traces, never across; the v2 IDs; v1 unchanged."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs.online_common import TraceMix, TraceWindows, split_index
from crop_gym.envs.registration import ENV_IDS
from crop_gym.errors import ConfigError
from crop_gym.model.topology import make_topology

V2 = "crop_gym/OnlinePlacement-v2"
BURSTY_V2 = "crop_gym/OnlinePlacement-Bursty-v2"
TOPO = make_topology("leafspine-64")


def test_split_index_cuts_by_submission_time_without_splitting_a_second() -> None:
    arrivals = [0.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    # floor(0.4 * 10) = 4 is job 4, submitted at 3.0 like jobs 3 and 5: the cut moves before them.
    assert split_index(arrivals, 0.4) == 3
    assert split_index(arrivals, 0.7) == 7
    assert split_index(list(range(10)), 0.7) == 7


def _ids(jobs: list) -> list[str]:  # type: ignore[type-arg]
    return [j.job_id for j in jobs]


@pytest.mark.parametrize("part", ["train", "eval"])
def test_windows_stay_inside_their_part(part: str) -> None:
    whole = TraceWindows.load("elasticflow:cluster03", TOPO, 48, 0.1)
    w = TraceWindows.load("elasticflow:cluster03", TOPO, 48, 0.1, part=part)
    assert w.cut_s is not None and w.max_job_gpus == whole.max_job_gpus
    inside = set(_ids(list(w.pool)))
    arrival = {j.job_id: j.arrival for j in whole.pool}
    rng = np.random.default_rng(0)
    for _ in range(200):
        window = w.draw(rng)
        assert set(_ids(window)) <= inside
        times = [arrival[i] for i in _ids(window)]
        assert (
            all(t < w.cut_s for t in times) if part == "train" else all(t >= w.cut_s for t in times)
        )
    train = TraceWindows.load("elasticflow:cluster03", TOPO, 48, 0.1, part="train")
    evals = TraceWindows.load("elasticflow:cluster03", TOPO, 48, 0.1, part="eval")
    assert len(train.pool) + len(evals.pool) == len(whole.pool)
    assert not set(_ids(list(train.pool))) & set(_ids(list(evals.pool)))
    assert len(train.pool) == pytest.approx(0.7 * len(whole.pool), abs=2)


def test_v2_train_never_draws_the_held_out_trace_or_the_eval_part() -> None:
    train = gym.make(V2).unwrapped
    evals = gym.make(V2, split="eval").unwrapped
    assert train.split.part == "train" and evals.split.part == "eval"
    assert train.split.held_out_traces == ("elasticflow:cluster06",)
    assert "elasticflow:cluster06" not in train.split.traces
    assert "elasticflow:cluster06" in evals.split.traces
    cut = train.split.cut_s
    assert cut == evals.split.cut_s and set(cut) == {
        "elasticflow:cluster04",
        "elasticflow:cluster03",
    }
    eval_ids = {j.job_id for w in evals.windows.sources for j in w.pool}
    train_ids = {j.job_id for w in train.windows.sources for j in w.pool}
    assert not eval_ids & train_ids
    seen = set()
    for seed in range(30):
        train.reset(seed=seed)
        seen.add(train.window_trace)
        assert {j.job_id for j in train.sim.jobs} <= train_ids
    assert seen == {"elasticflow:cluster04", "elasticflow:cluster03"}
    seen = set()
    for seed in range(10**9, 10**9 + 30):
        evals.reset(seed=seed)
        seen.add(evals.window_trace)
        assert {j.job_id for j in evals.sim.jobs} <= eval_ids
    assert "elasticflow:cluster06" in seen


@pytest.mark.parametrize("env_id", [V2, BURSTY_V2])
def test_v2_parts_observe_alike(env_id: str) -> None:
    train = gym.make(env_id)
    evals = gym.make(env_id, split="eval")
    assert train.observation_space == evals.observation_space
    assert train.action_space == evals.action_space
    assert train.unwrapped.max_job_gpus == evals.unwrapped.max_job_gpus == 64
    obs, _ = evals.reset(seed=10**9)
    assert evals.observation_space.contains(obs)


def test_v2_ids_are_v1_with_a_split() -> None:
    entry1, kw1, _ = ENV_IDS["crop_gym/OnlinePlacement-v1"]
    entry2, kw2, _ = ENV_IDS[V2]
    assert entry1 == entry2 and kw1 == {} and kw2["split"] == "train"
    _, kwb, _ = ENV_IDS[BURSTY_V2]
    assert kwb["arrival_scale"] == 0.25 and kwb["burst_s"] == 1800.0
    v1 = gym.make("crop_gym/OnlinePlacement-v1").unwrapped
    assert v1.split.part == "all" and v1.split.traces == ("elasticflow:cluster04",)
    assert v1.split.cut_s == {}


def test_one_source_draws_as_v1_did() -> None:
    """A single whole trace draws exactly TraceWindows' stream (no extra random number)."""
    mix = TraceMix.load("elasticflow:cluster04", TOPO, 48, 0.1)
    one = TraceWindows.load("elasticflow:cluster04", TOPO, 48, 0.1)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(5):
        name, jobs = mix.draw(a)
        assert name == "elasticflow:cluster04" and _ids(jobs) == _ids(one.draw(b))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"split": "test"}, r"^split='test' must be one of 'train', 'eval', 'all'$"),
        ({"split": "train", "train_fraction": 1.0}, "train_fraction"),
        ({"split": "train", "train_fraction": 0.0}, "train_fraction"),
        (
            {"held_out_traces": ["elasticflow:cluster04"]},
            "trace and held_out_traces must name distinct traces",
        ),
        ({"held_out_traces": "elasticflow:cluster06"}, "held_out_traces must be a sequence"),
        ({"trace": [], "split": "train"}, "trace must be"),
        (
            {"trace": "elasticflow:cluster10", "split": "train", "window_jobs": 200},
            r"window_jobs=200 is larger than the \d+ jobs of 'elasticflow:cluster10' in its train part",
        ),
    ],
)
def test_bad_split_arguments_get_one_line(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=match) as e:
        gym.make("crop_gym/OnlinePlacement-v1", **kwargs)
    assert "\n" not in str(e.value)
