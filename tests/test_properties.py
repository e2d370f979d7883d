"""Property tests (hypothesis) of the objective's invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.model.health import PROFILES
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import make_topology

MODELS = ("resnet50", "vgg16", "bert", "gpt2", "inception3", "deepspeech2")


def random_state(
    seed: int, preset: str, profile: str, algo: str, n_jobs: int
) -> tuple[ClusterState, list[Job]]:
    rng = np.random.default_rng(seed)
    t = make_topology(preset)
    state = ClusterState(t, PROFILES[profile].sample(t, rng), PerfConfig(algo))
    jobs = []
    for i in range(n_jobs):
        k = int(rng.choice([1, 2, 3, 4, 8, 12]))
        free = np.flatnonzero(state.free_mask)
        if len(free) < k:
            break
        gpus = rng.choice(free, k, replace=False)
        j = Job(
            f"j{i}", MODELS[int(rng.integers(len(MODELS)))], k, int(rng.choice([32, 64, 128, 256]))
        )
        state.add(j, gpus)
        jobs.append(j)
    return state, jobs


CASES = dict(
    seed=st.integers(0, 10**6),
    preset=st.sampled_from(["testbed-8", "leafspine-64", "pollux-16x4"]),
    profile=st.sampled_from(["none", "mild", "severe"]),
    algo=st.sampled_from(["ring", "hierarchical"]),
    n_jobs=st.integers(0, 30),
)


@settings(max_examples=60, deadline=None)
@given(**CASES)
def test_F_is_bounded_by_gpus(seed: int, preset: str, profile: str, algo: str, n_jobs: int) -> None:
    state, _ = random_state(seed, preset, profile, algo, n_jobs)
    assert 0.0 <= state.F <= state.topology.num_gpus + 1e-9
    assert 0.0 <= state.F <= state.metrics().gpus_busy + 1e-9


@settings(max_examples=60, deadline=None)
@given(**CASES)
def test_adding_a_job_never_raises_another_jobs_eta(
    seed: int, preset: str, profile: str, algo: str, n_jobs: int
) -> None:
    state, jobs = random_state(seed, preset, profile, algo, n_jobs)
    before = {j.job_id: state.job_record(j.job_id).eta for j in jobs}
    rng = np.random.default_rng(seed + 1)
    free = np.flatnonzero(state.free_mask)
    if len(free) < 2:
        return
    k = int(rng.integers(2, min(len(free), 16) + 1))
    state.add(Job("new", "vgg16", k, 64), rng.choice(free, k, replace=False))
    for jid, eta in before.items():
        assert state.job_record(jid).eta <= eta + 1e-12


@settings(max_examples=60, deadline=None)
@given(**CASES)
def test_incremental_equals_full_recomputation(
    seed: int, preset: str, profile: str, algo: str, n_jobs: int
) -> None:
    state, jobs = random_state(seed, preset, profile, algo, n_jobs)
    rng = np.random.default_rng(seed)
    for j in jobs:
        if rng.random() < 0.5:
            gain = float(state.gains(j, state.facts_for(state.placement(j.job_id))).total[0])
            state.remove(j.job_id)
            assert abs(state.F - state.copy().evaluate()) < 1e-9
            del gain
    incremental = {jid: state.job_record(jid) for jid in state.jobs}
    F_inc = state.F
    load_inc = state.link_load.copy()
    F_full = state.evaluate()
    assert abs(F_inc - F_full) < 1e-9 * max(1.0, F_full)
    assert (load_inc == state.link_load).all()
    for jid, rec in incremental.items():
        full = state.job_record(jid)
        for key, value in dataclasses.asdict(rec).items():
            assert abs(value - getattr(full, key)) <= 1e-12 * max(1.0, abs(getattr(full, key)))


@settings(max_examples=40, deadline=None)
@given(**CASES)
def test_gain_equals_add_delta(
    seed: int, preset: str, profile: str, algo: str, n_jobs: int
) -> None:
    state, _ = random_state(seed, preset, profile, algo, n_jobs)
    rng = np.random.default_rng(seed + 7)
    free = np.flatnonzero(state.free_mask)
    if len(free) == 0:
        return
    k = int(rng.integers(1, min(len(free), 12) + 1))
    gpus = rng.choice(free, k, replace=False)
    j = Job("probe", "gpt2", k, 128)
    g = float(state.gains(j, state.facts_for(gpus)).total[0])
    assert abs(g - state.add(j, gpus)) < 1e-9 * max(1.0, abs(g))
