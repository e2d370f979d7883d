"""Fuzzing of the simulator's configuration (issue 13).

Every example draws :class:`SimConfig` values and abnormality-profile rates, each either inside its
documented range or an extreme (NaN, ±inf, 0, negative, tiny, huge, a bool, a string, ``None``), on
a tiny cluster with a few jobs and a small event budget. The verdict must be one of:

* a :class:`ConfigError` naming a field that was given a value outside its documented range (and
  only when one was), in one line;
* a run that ends — completed, truncated at ``max_time_s``, stopped at ``max_events`` or reported as
  a stall (:class:`SimulationError`, one line) — within ``max_events`` events, with every job
  accounted for (completed, running, queued or not yet arrived), consistent invariants and, for the
  completed jobs, exactly their work executed net of the lost work.

The oracle below re-states the documented ranges independently of the implementation.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crop_gym.errors import ConfigError
from crop_gym.model.health import get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.sim import SimConfig, SimulationError, Simulator

EXAMPLES = 200
MAX_EVENTS = 1500
VERDICTS: Counter[str] = Counter()

_EXTREMES: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    -1.0,
    0.0,
    1e-6,
    0.5,
    59.0,
    1e300,
    True,
    False,
    "1",
    None,
    10**13,
]


def _is_real(v: Any) -> bool:
    return isinstance(v, int | float | np.floating | np.integer) and not isinstance(v, bool)


def _in(v: Any, lo: float, hi: float, *, low_open: bool = False) -> bool:
    return _is_real(v) and (lo < v if low_open else lo <= v) and v <= hi


def _is_int(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool) and lo <= v <= hi


#: The documented ranges (docs/SIMULATOR.md, "Configuration" and "Bounded work").
SIM_VALID = {
    "checkpoint_interval_s": lambda v: _in(v, 1.0, math.inf),
    "failure_horizon_s": lambda v: _in(v, 60.0, 1e12),
    "mean_repair_s": lambda v: _in(v, 1.0, 1e12),
    "transient_abnormalities": lambda v: isinstance(v, bool),
    "chronic_abnormalities": lambda v: isinstance(v, bool),
    "gpu_failures": lambda v: isinstance(v, bool),
    "link_failures": lambda v: isinstance(v, bool),
    "skip_oversized": lambda v: isinstance(v, bool),
    "record_timeline": lambda v: isinstance(v, bool),
    "queue_view": lambda v: v in ("fitting", "all"),
    "max_queue_view": lambda v: v is None or _is_int(v, 1, 10**10),
    "max_time_s": lambda v: v is None or _in(v, 0.0, 1e12, low_open=True),
    "stall_events": lambda v: _is_int(v, 1, 10**10),
    "max_events": lambda v: _is_int(v, 1, 10**10),
}
PROFILE_VALID = {
    "onset_rate_per_gpu_hour": lambda v: _in(v, 0.0, 60.0),
    "mean_abnormal_duration_s": lambda v: _in(v, 1.0, math.inf),
}


def _valid_num(lo: float, hi: float, *edges: float) -> st.SearchStrategy[Any]:
    return st.one_of(st.floats(lo, hi), st.sampled_from(edges or (lo,)))


#: Values inside the documented ranges, edges included (kept small enough for short runs, except
#: the edges, which the event budget bounds).
SIM_OK: dict[str, st.SearchStrategy[Any]] = {
    "checkpoint_interval_s": _valid_num(1.0, 1e5, 1.0, math.inf),
    "failure_horizon_s": _valid_num(60.0, 1e6, 60.0, 1e12),
    "mean_repair_s": _valid_num(1.0, 1e5, 1.0, 1e12),
    "transient_abnormalities": st.booleans(),
    "chronic_abnormalities": st.booleans(),
    "gpu_failures": st.booleans(),
    "link_failures": st.booleans(),
    "skip_oversized": st.booleans(),
    "record_timeline": st.booleans(),
    "queue_view": st.sampled_from(["fitting", "all"]),
    "max_queue_view": st.one_of(st.none(), st.integers(1, 4), st.just(10**10)),
    "max_time_s": st.one_of(st.none(), _valid_num(1.0, 1e5, 1e12)),
    "stall_events": st.one_of(st.integers(1, 50), st.just(10**10)),
    "max_events": st.one_of(st.integers(1, MAX_EVENTS), st.just(MAX_EVENTS)),
}
PROFILE_OK: dict[str, st.SearchStrategy[Any]] = {
    "onset_rate_per_gpu_hour": _valid_num(0.0, 60.0, 0.0, 60.0),
    "mean_abnormal_duration_s": _valid_num(1.0, 1e5, 1.0, math.inf),
    "failprone_gpu_frac": st.sampled_from([0.0, 0.5, 1.0]),
    "failed_gpu_frac": st.sampled_from([0.0, 0.2, 1.0]),
    "gpu_fail_prob": st.sampled_from([(0.01, 0.1), (0.999, 0.999)]),
    "failprone_link_frac": st.sampled_from([0.0, 1.0]),
    "link_fail_prob": st.sampled_from([(0.01, 0.05), (0.999, 0.999)]),
}
_BAD_ANY = st.sampled_from([*_EXTREMES, 0, -3, 2.0, 2.5, "fitting", [1]])
#: Fields that may be given an extreme value (the profile's fractions are not fuzzed here).
FUZZED = [*SIM_VALID, *PROFILE_VALID]


def _ok(**changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Valid keyword sets for SimConfig and the profile, with some fields changed."""
    sim_kw: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SimConfig)}
    del sim_kw["perf"]
    sim_kw["max_events"] = MAX_EVENTS
    prof_kw: dict[str, Any] = {
        "onset_rate_per_gpu_hour": 0.0,
        "mean_abnormal_duration_s": 3600.0,
        "failprone_gpu_frac": 0.0,
        "failed_gpu_frac": 0.0,
        "gpu_fail_prob": (0.01, 0.1),
        "failprone_link_frac": 0.0,
        "link_fail_prob": (0.01, 0.05),
    }
    for k, v in changes.items():
        (sim_kw if k in sim_kw else prof_kw)[k] = v
    return sim_kw, prof_kw


@st.composite
def settings_strategy(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """Valid values everywhere, then up to two fields (none in half the examples) set to an
    extreme: most examples run, the others probe the validation."""
    sim_kw = {f: draw(s) for f, s in SIM_OK.items()}
    prof_kw = {f: draw(s) for f, s in PROFILE_OK.items()}
    n_bad = draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
    for f in draw(st.lists(st.sampled_from(FUZZED), min_size=n_bad, max_size=n_bad, unique=True)):
        (sim_kw if f in SIM_VALID else prof_kw)[f] = draw(_BAD_ANY)
    return sim_kw, prof_kw


jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.floats(1.0, 5000.0),
        st.sampled_from([0.0, 0.0, 10.0, 100.0, 1000.0]),
    ),
    min_size=1,
    max_size=5,
)
scripted_strategy = st.lists(
    st.tuples(st.sampled_from([0.0, 10.0, 100.0, 500.0]), st.integers(0, 7), st.floats(1.0, 1e4)),
    max_size=3,
)


@dataclass(frozen=True)
class _P:
    job: Job
    gpus: np.ndarray


class _Never:
    """Declines every job (the stall detection must report it)."""

    name = "never"

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[_P]:
        return []


class _LowestFree:
    """Places each job, in queue order, on the lowest free GPUs."""

    name = "lowest-free"

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[_P]:
        free = state.free_mask.copy()
        out = []
        for j in queue:
            idx = np.flatnonzero(free)
            if len(idx) >= j.num_gpus:
                free[idx[: j.num_gpus]] = False
                out.append(_P(j, idx[: j.num_gpus]))
        return out


def _check_config_error(exc: ConfigError, prefix: str, invalid: set[str]) -> str:
    msg = str(exc)
    assert "\n" not in msg
    named = [f for f in invalid if msg.startswith(f"{prefix}{f}")]
    assert named, (msg, invalid)
    return named[0]


def _check_end(sim: Simulator, max_events: int) -> None:
    assert sim.events <= max_events
    assert not sim.invariant_errors(), sim.invariant_errors()
    n = len(sim.jobs)
    future = n - sum(1 for j in sim.jobs if j.arrival <= sim.now)
    assert sim.completed + sim.running + sim.queue_length + future == n
    res = sim.result()
    done = np.isfinite(res.records["finish_s"])
    assert int(done.sum()) == sim.completed == res.metrics["jobs_completed"]
    work = np.array([j.iterations for j in sim.jobs])
    net = np.array([sim.remaining_work(j.job_id) for j in sim.jobs])
    # Work left is never more than asked, and none is left for a completed job.
    assert (net <= work * (1 + 1e-9)).all()
    assert (net[done] == 0).all()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    settings_strategy(),
    jobs_strategy,
    scripted_strategy,
    st.integers(0, 3),
    st.sampled_from(["lowest-free"] * 5 + ["never"]),
)
# One explicit example per verdict class (always run, whatever the generated ones reach).
@example(_ok(onset_rate_per_gpu_hour=1e6), [(1, 10.0, 0.0)], [], 0, "lowest-free")
@example(_ok(failure_horizon_s=1e-6), [(1, 10.0, 0.0)], [], 0, "lowest-free")
@example(_ok(), [(2, 100.0, 0.0), (4, 50.0, 10.0)], [(0.0, 0, 5.0)], 0, "lowest-free")
@example(_ok(max_time_s=10.0), [(8, 1e6, 0.0)], [], 0, "lowest-free")
@example(_ok(max_events=5), [(1, 10.0, float(i)) for i in range(5)], [], 0, "lowest-free")
@example(_ok(), [(1, 10.0, 0.0)], [], 0, "never")
def _fuzz_one(
    kw: tuple[dict[str, Any], dict[str, Any]],
    job_specs: list[tuple[int, float, float]],
    scripted: list[tuple[float, int, float]],
    seed: int,
    policy: str,
) -> None:
    sim_kw, prof_kw = kw
    invalid_sim = {f for f, ok in SIM_VALID.items() if not ok(sim_kw[f])}
    invalid_prof = {f for f, ok in PROFILE_VALID.items() if not ok(prof_kw[f])}
    try:
        prof = get_profile(dataclasses.replace(get_profile("severe"), name="fuzz"), **prof_kw)
    except ConfigError as exc:
        field = _check_config_error(exc, "fuzz.", invalid_prof)
        VERDICTS[f"profile error: {field}"] += 1
        return
    assert not invalid_prof, invalid_prof
    try:
        cfg = SimConfig(**sim_kw)
    except ConfigError as exc:
        field = _check_config_error(exc, "SimConfig.", invalid_sim)
        VERDICTS[f"config error: {field}"] += 1
        return
    assert not invalid_sim, invalid_sim
    jobs = [
        Job(f"j{i}", "resnet50", k, 128, iterations=work, arrival=arrival)
        for i, (k, work, arrival) in enumerate(job_specs)
    ]
    sim = Simulator(
        jobs, "testbed-8", profile=prof, config=cfg, seed=seed, scripted_failures=scripted
    )
    try:
        sim.run(_Never() if policy == "never" else _LowestFree())
    except SimulationError as exc:
        msg = str(exc)
        assert "\n" not in msg
        if "max_events" in msg:
            assert sim.events == cfg.max_events
            VERDICTS["stopped at max_events"] += 1
        else:
            assert "stay queued" in msg, msg
            VERDICTS["stall reported"] += 1
        _check_end(sim, cfg.max_events)
        return
    _check_end(sim, cfg.max_events)
    if sim.truncated:
        assert sim.now == cfg.max_time_s
        VERDICTS["truncated at max_time_s"] += 1
    else:
        assert sim.completed == len(jobs)
        VERDICTS["completed"] += 1


def test_fuzz_config_error_or_bounded_conserving_run() -> None:
    VERDICTS.clear()
    _fuzz_one()
    print(f"\nfuzz verdicts ({sum(VERDICTS.values())} examples): {dict(sorted(VERDICTS.items()))}")
    kinds = {k.split(":")[0] for k in VERDICTS}
    assert {"config error", "profile error", "completed", "truncated at max_time_s"} <= kinds, kinds
    assert {"stopped at max_events", "stall reported"} <= kinds, kinds
