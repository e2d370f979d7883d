"""The online JCT heuristics of baselines/online.py (issue 32, item 3) on hand-built queues: which
job each picks, and that it places it on its row of the largest ΔF (CROP's placement)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.baselines.online import JCT_HEURISTICS, jct_priority, make_online_policy
from crop_gym.model.jobs import Job
from crop_gym.model.timing import ideal_time
from crop_gym.sim import SimConfig, Simulator

HOUR = 3600.0


def _env() -> Any:
    env = gym.make(
        "crop_gym/OnlinePlacement-v1", profile="none", onset_rate_per_gpu_hour=None
    ).unwrapped
    return env


def _job(env: Any, job_id: str, k: int, hours: float, arrival: float = 0.0) -> Job:
    """A resnet50 job of ``k`` GPUs whose ideal run time on the env's cluster is ``hours``."""
    probe = Job(job_id, "resnet50", k, 64 * k, 1.0, arrival)
    t = ideal_time(env.topology, probe, env.sim_config.perf)
    return Job(job_id, "resnet50", k, 64 * k, hours * HOUR / t, arrival)


def _pick(env: Any, name: str) -> str:
    """The job ``name`` starts now, checking it goes on that job's row of the largest ΔF."""
    table = env.table
    action = make_online_policy(name)(env)
    q, _ = table.decode(action)
    rows = np.flatnonzero(table.row_slot == q)
    total = table.gains.own + env.sim.state.interference(table.facts)
    assert table.row_action[rows[int(np.argmax(total[rows]))]] == action
    return str(table.jobs[q].job_id)


def test_each_heuristic_picks_its_job_from_one_queue() -> None:
    """All fit at time 0. Remaining work (h): A 10, B 20, C 6; × GPUs: A 80, B 20, C 24."""
    env = _env()
    jobs = [_job(env, "A", 8, 10.0), _job(env, "B", 1, 20.0), _job(env, "C", 4, 6.0)]
    env.reset(seed=0, options={"jobs": jobs})
    assert [j.job_id for j in env.table.jobs] == ["A", "B", "C"]
    assert _pick(env, "sjf-crop") == "C"  # least remaining work
    assert _pick(env, "srsf-crop") == "B"  # least remaining work × GPUs
    assert _pick(env, "fifo-backfill-crop") == "A"  # oldest
    assert _pick(env, "las-crop") == "A"  # nothing has run: all 0, the oldest first
    assert jct_priority("las-crop", env.sim, env.table.jobs) == [0.0, 0.0, 0.0]
    srsf = jct_priority("srsf-crop", env.sim, env.table.jobs)
    assert srsf == pytest.approx([80 * HOUR, 20 * HOUR, 24 * HOUR], rel=1e-6)


def test_fifo_backfills_when_the_oldest_does_not_fit() -> None:
    """X holds 56 of 64 GPUs; A (16 GPUs, the oldest queued) cannot start, so FIFO backfills B
    (the next that fits), not the shorter C."""
    env = _env()
    jobs = [
        _job(env, "X", 56, 50.0),
        _job(env, "A", 16, 1.0, arrival=10.0),
        _job(env, "B", 4, 8.0, arrival=11.0),
        _job(env, "C", 1, 1.0, arrival=12.0),
    ]
    env.reset(seed=0, options={"jobs": jobs})
    env.step(make_online_policy("fifo-backfill-crop")(env))  # X starts
    wait = env.table.stop_action
    while [j.job_id for j in env.sim.queue] != ["A", "B", "C"]:
        env.step(wait)
    assert [j.job_id for j in env.table.jobs] == ["B", "C"]  # A does not fit
    assert _pick(env, "fifo-backfill-crop") == "B"
    assert _pick(env, "sjf-crop") == "C" and _pick(env, "srsf-crop") == "C"


def test_las_ranks_by_attained_gpu_time() -> None:
    """A ran 1 h on 8 GPUs before a failure sent it back to the queue: 8 GPU-hours attained, so
    least-attained-service starts the never-run B (longer, newer) first."""
    env = _env()
    a, b = _job(env, "A", 8, 10.0), _job(env, "B", 4, 30.0, arrival=60.0)
    sim = Simulator(
        [a, b],
        env.topology,
        profile="none",
        config=SimConfig(checkpoint_interval_s=float("inf")),
        seed=0,
        scripted_failures=[(HOUR, 0, 10.0)],
    )
    sim.place("A", np.arange(8))
    while sim.now < HOUR:
        sim.advance()
    assert [j.job_id for j in sim.queue] == ["A", "B"]
    assert sim.attained_service_s("A") == pytest.approx(8 * HOUR)
    assert sim.attained_service_s("B") == 0.0
    queue = sim.queue
    assert jct_priority("las-crop", sim, queue) == pytest.approx([8 * HOUR, 0.0])
    assert jct_priority("fifo-backfill-crop", sim, queue) == [0.0, 1.0]
    assert int(np.argmin(jct_priority("sjf-crop", sim, queue))) == 0  # A: 10 h left, B: 30 h


def test_the_four_heuristics_are_registered() -> None:
    assert JCT_HEURISTICS == ("sjf-crop", "srsf-crop", "las-crop", "fifo-backfill-crop")
    with pytest.raises(KeyError, match="heuristics: sjf-crop"):
        jct_priority("lifo", None, [])
