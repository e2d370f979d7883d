"""The state's incrementally kept quantities against their from-scratch formulas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import crop_gym.perf as perf
from crop_gym.devices import PROFILES
from crop_gym.jobs import Job
from crop_gym.objective import ClusterMetrics, ClusterState
from crop_gym.topology import make_topology


def _comm_overhead(st: ClusterState) -> float:
    """``Σ k·C/T / Σ k`` over the placed jobs in slot order, numpy-summed (DESIGN §2.5)."""
    if not st.jobs:
        return 0.0
    slots = sorted(st.jobs.values())
    jobs = {s: jid for jid, s in st.jobs.items()}
    k = np.array([len(st.placement(jobs[s])) for s in slots], dtype=np.float64)
    C = np.array([st.job_record(jobs[s])["C"] for s in slots])
    T = np.array([st.job_record(jobs[s])["T"] for s in slots])
    return float((k * C / T).sum() / k.sum())


def _change(st: ClusterState, rng: np.random.Generator, t: int, *, validate: bool = True) -> None:
    """Remove a random placed job (30 %), or add job ``j{t}`` of 1-16 GPUs on random free GPUs
    (sorted, as a trusted add needs them)."""
    if st.jobs and rng.random() < 0.3:
        st.remove(sorted(st.jobs)[int(rng.integers(len(st.jobs)))])
        return
    free = np.flatnonzero(st.free_mask)
    if len(free) == 0:
        return
    k = int(min(len(free), rng.choice([1, 2, 4, 8, 16])))
    gpus = np.sort(rng.choice(free, size=k, replace=False))
    job = Job(f"j{t}", str(rng.choice(["resnet50", "vgg16", "bert"])), k, 32 * k)
    st.add(job, gpus, validate=validate)


@pytest.mark.parametrize("py_rows", [16, -1])
@pytest.mark.parametrize("allreduce", ["ring", "hierarchical"])
def test_comm_overhead_is_kept_exactly(allreduce: str, py_rows: int) -> None:
    """``metrics().comm_overhead`` (kept per slot as T and C change) equals the formula over the
    current times, through adds, removals, health changes, re-evaluation and copies, on both the
    plain-Python and the vectorised row updates."""
    perf_cfg = perf.PerfConfig(allreduce, 0.3 if allreduce == "ring" else 0.0)
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(11)
    st = ClusterState(topo, PROFILES["mild"].sample(topo, rng), perf_cfg)
    st._PY_ROWS = py_rows  # type: ignore[misc]
    for t in range(80):
        _change(st, rng, t)
        if t % 20 == 19:
            st = st.copy()
            st.evaluate()
        assert st.metrics().comm_overhead == _comm_overhead(st)
    assert len(st.jobs) > 3


def test_free_bits_track_the_free_mask() -> None:
    """``free_bits`` (kept by every change) has exactly the bits of ``free_mask``, through
    adds, removals, health changes that fail GPUs, and copies."""
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(12)
    st = ClusterState(topo, PROFILES["severe"].sample(topo, rng))

    def bits(mask: np.ndarray) -> int:
        return sum(1 << int(g) for g in np.flatnonzero(mask))

    for t in range(120):
        if rng.random() < 0.05:
            # Fail some free GPUs (a placed job never holds a failed GPU).
            health = PROFILES["severe"].sample(topo, rng)
            failed = health.gpu_failed & (st.gpu_owner < 0)
            st.set_health(dataclasses.replace(health, gpu_failed=failed))
        else:
            _change(st, rng, t, validate=bool(t % 2))
        if t % 30 == 29:
            st = st.copy()
        assert st.free_bits == bits(st.free_mask)
        assert st.free_bits.bit_count() == st.num_free


def test_metrics_are_a_regular_frozen_value() -> None:
    """The fast-built ClusterMetrics equals, hashes and prints like the constructed one, and
    stays frozen."""
    topo = make_topology("leafspine-64")
    st = ClusterState(topo)
    st.add(Job("a", "resnet50", 4, 128), np.arange(4))
    st.add(Job("b", "vgg16", 16, 512), np.arange(8, 24))
    m = st.metrics()
    ref = ClusterMetrics(
        F=st.F,
        jobs_placed=2,
        gpus_busy=20,
        utilization=20 / 64,
        comm_overhead=_comm_overhead(st),
    )
    assert m == ref and hash(m) == hash(ref) and repr(m) == repr(ref)
    assert dataclasses.asdict(m) == dataclasses.asdict(ref)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.F = 0.0  # type: ignore[misc]
