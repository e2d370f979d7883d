"""Hardening of the simulator (issue 13): bounded work, event order, validated configuration."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from crop_gym.errors import ConfigError
from crop_gym.model.health import get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.sim import SimConfig, SimulationError, Simulator


@dataclass(frozen=True)
class _P:
    job: Job
    gpus: np.ndarray


class _Fixed:
    """Places each job on fixed GPUs when they are all free and usable; otherwise on the lowest
    free GPUs."""

    name = "fixed"

    def __init__(self, where: dict[str, list[int]]) -> None:
        self.where = where

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[_P]:
        free = state.free_mask.copy()
        out = []
        for j in queue:
            g = self.where.get(j.job_id)
            if g is not None and free[g].all():
                gpus = np.array(g)
            elif free.sum() >= j.num_gpus:
                gpus = np.flatnonzero(free)[: j.num_gpus]
            else:
                continue
            free[gpus] = False
            out.append(_P(j, gpus))
        return out


class _Never:
    name = "never"

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[_P]:
        return []


def _jobs(n: int, k: int = 2, iterations: float = 2000.0, gap: float = 60.0) -> list[Job]:
    return [
        Job(f"j{i}", "resnet50", k, 128, iterations=iterations, arrival=i * gap) for i in range(n)
    ]


# ---------------------------------------------------------------- 1. bounded work


def test_failure_horizon_below_the_minimum_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"failure_horizon_s=1e-06 .*\[60, "):
        SimConfig(failure_horizon_s=1e-6)
    SimConfig(failure_horizon_s=60.0)  # the documented minimum is allowed


@pytest.mark.parametrize("rate", [1e6, 60.5, math.inf, math.nan, -1.0, True])
def test_onset_rate_outside_its_range_is_refused(rate: float) -> None:
    with pytest.raises(ConfigError, match="onset_rate_per_gpu_hour"):
        get_profile("severe", onset_rate_per_gpu_hour=rate)


def test_onset_rate_at_the_maximum_is_allowed() -> None:
    assert get_profile("severe", onset_rate_per_gpu_hour=60.0).onset_rate_per_gpu_hour == 60.0


@pytest.mark.parametrize("duration", [0.5, math.nan, -1.0, True])
def test_abnormal_duration_outside_its_range_is_refused(duration: float) -> None:
    with pytest.raises(ConfigError, match="mean_abnormal_duration_s"):
        get_profile("severe", mean_abnormal_duration_s=duration)


def test_event_limit_stops_the_run_with_one_line() -> None:
    prof = get_profile("severe", onset_rate_per_gpu_hour=60.0, mean_abnormal_duration_s=60.0)
    cfg = SimConfig(failure_horizon_s=60.0, mean_repair_s=60.0, max_events=200)
    sim = Simulator(_jobs(20, iterations=50000.0), "testbed-8", profile=prof, config=cfg, seed=0)
    with pytest.raises(SimulationError, match="max_events=200") as info:
        sim.run(_Fixed({}))
    assert "\n" not in str(info.value)
    assert sim.events == 200


def test_worst_allowed_rates_finish_within_the_event_bound() -> None:
    """The most event-heavy allowed configuration stays within the documented events/hour bound."""
    prof = get_profile(
        "severe",
        failprone_gpu_frac=1.0,
        gpu_fail_prob=(0.999, 0.999),
        failprone_link_frac=1.0,
        link_fail_prob=(0.999, 0.999),
        onset_rate_per_gpu_hour=60.0,
        mean_abnormal_duration_s=1.0,
    )
    cfg = SimConfig(failure_horizon_s=60.0, mean_repair_s=1.0, max_time_s=600.0)
    sim = Simulator(_jobs(4), "testbed-8", profile=prof, config=cfg, seed=0)
    res = sim.run(_Fixed({}))
    hours = sim.now / 3600.0
    devices = sim.topology.num_gpus + sim.topology.num_nodes
    bound = sim.health_process.max_events_per_hour
    assert bound <= 2000.0 * devices
    assert res.metrics["events"] <= 2 * len(sim.jobs) * (1 + res.metrics["restarts"]) + 3 * (
        bound * hours + devices
    )


def test_scripted_repair_never_lands_on_the_failure_instant() -> None:
    """Every event a health event schedules lies strictly later, so one instant is finite work."""
    sim = Simulator(_jobs(1, iterations=1e6), "testbed-8", scripted_failures=[(1000.0, 5, 1e-300)])
    hp = sim.health_process
    change = hp.pop(1000.0)
    assert change.failed_gpus == [5]
    assert hp.failed[5]  # not repaired at the same instant
    assert hp.next_time() > 1000.0


def test_policy_declining_while_failures_keep_coming_is_reported() -> None:
    """A never-placing policy is reported even while transient failures keep some GPU failed."""
    prof = get_profile(
        "none", failed_gpu_frac=0.5, onset_rate_per_gpu_hour=60.0, mean_abnormal_duration_s=60.0
    )
    cfg = SimConfig(mean_repair_s=600.0, stall_events=50, max_time_s=2e4)
    sim = Simulator(_jobs(1, k=1), "testbed-8", profile=prof, config=cfg, seed=0)
    with pytest.raises(SimulationError, match="stay queued"):
        sim.run(_Never())


def test_cli_refuses_a_livelocking_failure_horizon(capsys: pytest.CaptureFixture[str]) -> None:
    from crop_gym.cli import main

    rc = main(
        [
            "simulate",
            "--trace",
            "elasticflow:cluster10",
            "--jobs",
            "5",
            "--failure-horizon",
            "1e-6",
            "--abnormal",
            "severe",
            "--max-hours",
            "1",
            "--no-progress",
            "--policy",
            "first-fit",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1
    assert "failure_horizon_s" in err


# ------------------------------------------------------- 2. health before arrivals


@pytest.mark.parametrize("t", [0.0, 50.0])
def test_health_event_applies_before_arrivals_at_the_same_instant(t: float) -> None:
    job = Job("a", "resnet50", 4, 128, iterations=1000.0, arrival=t)
    sim = Simulator([job], "testbed-8", seed=0, scripted_failures=[(t, 0, 100.0)])
    placed: list[np.ndarray] = []

    def hook(s: Simulator) -> None:
        if "a" in s.state.jobs and not placed:
            placed.append(s.state.placement("a").copy())

    res = sim.run(_Fixed({"a": [0, 1, 2, 3]}), hook=hook)
    assert res.metrics["gpu_failures"] == 1
    assert res.metrics["job_failures"] == 0
    assert res.records["restarts"][0] == 0
    assert res.records["start_s"][0] == t
    assert 0 not in placed[0].tolist()


# ---------------------------------------------------------- 3. SimConfig fields

_BAD: list[tuple[str, Any]] = [
    ("perf", None),
    ("checkpoint_interval_s", 0.0),
    ("checkpoint_interval_s", 0.5),
    ("checkpoint_interval_s", -1.0),
    ("checkpoint_interval_s", math.nan),
    ("checkpoint_interval_s", True),
    ("checkpoint_interval_s", "1800"),
    ("failure_horizon_s", 1e-6),
    ("failure_horizon_s", math.inf),
    ("failure_horizon_s", math.nan),
    ("failure_horizon_s", 1e300),
    ("failure_horizon_s", True),
    ("mean_repair_s", 0.0),
    ("mean_repair_s", 1e-9),
    ("mean_repair_s", math.inf),
    ("mean_repair_s", math.nan),
    ("mean_repair_s", False),
    ("transient_abnormalities", 1),
    ("transient_abnormalities", "yes"),
    ("chronic_abnormalities", 0),
    ("gpu_failures", None),
    ("link_failures", 1.0),
    ("skip_oversized", 1),
    ("record_timeline", "false"),
    ("queue_view", "some"),
    ("queue_view", 1),
    ("queue_view", ["all"]),
    ("max_queue_view", 0),
    ("max_queue_view", 2.5),
    ("max_queue_view", 3.0),
    ("max_queue_view", True),
    ("max_queue_view", math.inf),
    ("max_queue_view", math.nan),
    ("max_time_s", 0.0),
    ("max_time_s", -5.0),
    ("max_time_s", math.nan),
    ("max_time_s", math.inf),
    ("max_time_s", 1e300),
    ("max_time_s", True),
    ("stall_events", 0),
    ("stall_events", 1.5),
    ("stall_events", True),
    ("stall_events", 10**12),
    ("max_events", 0),
    ("max_events", 2.5),
    ("max_events", None),
    ("max_events", True),
    ("max_events", 10**12),
]


@pytest.mark.parametrize(("name", "value"), _BAD, ids=[f"{n}={v!r}" for n, v in _BAD])
def test_every_simconfig_field_is_validated(name: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"SimConfig.{name}") as info:
        SimConfig(**{name: value})
    assert "\n" not in str(info.value)
    assert "allowed" in str(info.value) or "must be" in str(info.value)


def test_valid_simconfig_values_are_kept_and_normalised() -> None:
    cfg = SimConfig(
        checkpoint_interval_s=math.inf,
        failure_horizon_s=np.float64(60.0),
        mean_repair_s=1,
        max_queue_view=np.int64(3),
        max_time_s=10,
        stall_events=np.int32(5),
        max_events=1,
        transient_abnormalities=np.bool_(False),
    )
    assert cfg.checkpoint_interval_s == math.inf
    assert type(cfg.failure_horizon_s) is float
    assert type(cfg.mean_repair_s) is float and cfg.mean_repair_s == 1.0
    assert type(cfg.max_queue_view) is int and cfg.max_queue_view == 3
    assert type(cfg.max_time_s) is float
    assert type(cfg.stall_events) is int and type(cfg.max_events) is int
    assert cfg.transient_abnormalities is False
    assert dataclasses.replace(cfg, max_time_s=None).max_time_s is None


# ------------------------------------------------- Simulator arguments

_BAD_SCRIPTED: list[Any] = [
    (1.0,),
    (1.0, 0, 5.0, 1),
    (math.nan, 0),
    (-1.0, 0),
    (math.inf, 0),
    (1.0, 1.5),
    (1.0, True),
    (1.0, "0"),
    (1.0, 99),
    (1.0, 0, 0.0),
    (1.0, 0, math.nan),
    (1.0, 0, -3.0),
    ("soon", 0),
    (True, 0),
    5,
]


@pytest.mark.parametrize("item", _BAD_SCRIPTED, ids=repr)
def test_bad_scripted_failures_are_refused(item: Any) -> None:
    with pytest.raises(ConfigError, match="scripted failure") as info:
        Simulator(_jobs(1), "testbed-8", scripted_failures=[item])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0", 2.0])
def test_bad_seeds_are_refused(seed: Any) -> None:
    with pytest.raises(ConfigError, match="seed"):
        Simulator(_jobs(1), "testbed-8", seed=seed)


def test_bad_config_type_is_refused() -> None:
    with pytest.raises(ConfigError, match="config"):
        Simulator(_jobs(1), "testbed-8", config={"max_time_s": 1.0})  # type: ignore[arg-type]
