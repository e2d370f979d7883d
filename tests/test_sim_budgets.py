"""Issue 30, class 6: budgets a user can see.

The simulator's event budget scales with the run (``20,000 + events_per_job × jobs``, capped by
``max_events``), so that any allowed input ends, or stops with one line, within minutes. At the
largest allowed rates the fixed budget of 10^7 events of before took hours.
"""

from __future__ import annotations

import random
import time

import pytest
from helpers import no_hang

import crop_gym.baselines  # noqa: F401  (registers the baseline policies)
from crop_gym.cli import main
from crop_gym.model.health import MAX_ONSET_RATE_PER_GPU_HOUR, get_profile
from crop_gym.policy import make_policy
from crop_gym.sim import SimConfig, SimulationError, Simulator
from crop_gym.sim.config import (
    EVENT_BUDGET_BASE,
    MIN_FAILURE_HORIZON_S,
    MIN_REPAIR_S,
)
from crop_gym.workloads.loader import load_workload

#: The largest allowed rates: an onset per device-minute, the shortest episodes, failure horizon
#: and repairs.
EXTREME = {
    "onset_rate_per_gpu_hour": MAX_ONSET_RATE_PER_GPU_HOUR,
    "mean_abnormal_duration_s": 1.0,
}


def test_the_budget_is_the_base_plus_a_per_job_allowance_capped() -> None:
    assert EVENT_BUDGET_BASE == 20_000
    assert SimConfig().event_budget(100) == 20_000 + 50 * 100
    assert SimConfig(events_per_job=7).event_budget(1_000) == 27_000
    assert SimConfig(max_events=25_000).event_budget(1_000) == 25_000
    assert SimConfig().event_budget(10**9) == 10**7  # the cap


def _extreme_run(jobs: int, cluster: str, config: SimConfig, seed: int = 0) -> Simulator:
    workload = load_workload("elasticflow:195job", max_jobs=jobs)
    profile = get_profile("severe", **EXTREME)
    return Simulator(list(workload.jobs), cluster, profile=profile, config=config, seed=seed)


@pytest.mark.slow
def test_the_largest_allowed_rates_stop_within_minutes_by_default() -> None:
    config = SimConfig(failure_horizon_s=MIN_FAILURE_HORIZON_S, mean_repair_s=MIN_REPAIR_S)
    sim = _extreme_run(5, "testbed-8", config)
    start = time.perf_counter()
    with no_hang(240), pytest.raises(SimulationError) as exc:
        sim.run(make_policy("first-fit"))
    assert time.perf_counter() - start < 180
    message = str(exc.value)
    assert "\n" not in message and f"event budget of {sim.event_budget}" in message
    assert sim.events == sim.event_budget == 20_000 + 50 * 5


@pytest.mark.parametrize("case", range(12))
def test_every_extreme_run_ends_within_its_budget(case: int) -> None:
    """Random extreme settings with a small budget: each run completes, is truncated, or stops at
    its budget with one line, and never takes more events than the budget."""
    rng = random.Random(case)
    config = SimConfig(
        failure_horizon_s=rng.choice([MIN_FAILURE_HORIZON_S, 3600.0, 86400.0]),
        mean_repair_s=rng.choice([MIN_REPAIR_S, 60.0, 3600.0]),
        checkpoint_interval_s=rng.choice([1.0, 60.0, 1800.0]),
        events_per_job=rng.choice([1, 5, 20]),
        max_events=rng.choice([500, 2_000, 5_000]),
        max_time_s=rng.choice([None, 3600.0]),
        skip_oversized=True,
    )
    sim = _extreme_run(
        rng.choice([1, 3, 8]), rng.choice(["testbed-8", "leafspine-64"]), config, case
    )
    with no_hang(60):
        try:
            sim.run(make_policy(rng.choice(["first-fit", "crop", "random"])))
        except SimulationError as exc:
            assert "\n" not in str(exc)
            assert "event budget" in str(exc) or "stay queued" in str(exc)
    assert sim.events <= sim.event_budget == config.event_budget(len(sim.jobs))


def test_simulate_shows_the_budget_and_takes_events_per_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--trace", "elasticflow:195job", "--jobs", "4", "--cluster", "testbed-8"]
    assert main([*argv, "--no-progress", "--events-per-job", "10"]) == 0
    out = capsys.readouterr().out
    assert "event budget    20,040 (used" in out
