"""The iteration-time model's terms against hand-computed numbers (docs/MODEL.md §1)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from crop_gym.errors import ConfigError
from crop_gym.model.facts import PlacementFacts
from crop_gym.model.timing import (
    PerfConfig,
    comm_time,
    compute_curve,
    iteration_time,
    job_times,
    ring_hop_latency,
)

GB = 1e9


def test_defaults_are_todays_hierarchical_formula() -> None:
    # k=8 on 2 nodes x 4: intra 2*3/4*M/b_i + 2*3*a_i, inter 2*1/2*M/b_e + 2*1*a_e.
    M, bi, be, ai, ae = 4e8, 100 * GB, 10 * GB, 1e-5, 5e-5
    got = comm_time("hierarchical", M, 8, 4, 2, bi, be, ai, ae)
    assert got == pytest.approx(1.5 * M / bi + 6 * ai + 1.0 * M / be + 2 * ae, rel=1e-15)


def test_node_fabric_binds_below_the_gpu_link() -> None:
    # F = 20 GB/s shared by g = 4 GPUs: each gets 5 GB/s < the 100 GB/s link.
    M = 4e8
    got = comm_time(
        "hierarchical", M, 4, 4, 1, 100 * GB, np.inf, 0.0, 0.0, fabric_bandwidth=20 * GB
    )
    assert got == pytest.approx(2 * 3 / 4 * M / (5 * GB), rel=1e-15)
    # g = 2: 10 GB/s each.
    got2 = comm_time(
        "hierarchical", M, 2, 2, 1, 100 * GB, np.inf, 0.0, 0.0, fabric_bandwidth=20 * GB
    )
    assert got2 == pytest.approx(M / (10 * GB), rel=1e-15)


def test_nic_shared_by_co_located_gpus() -> None:
    # '44' vs '17' vs '11' with nu = 1: the NIC share is b_inter / g.
    M, be = 1e8, 10 * GB
    kw = {"nic_sharing": 1.0}
    c44 = comm_time("hierarchical", M, 8, 4, 2, np.inf, be, 0.0, 0.0, **kw)
    c17 = comm_time("hierarchical", M, 8, 7, 2, np.inf, be, 0.0, 0.0, **kw)
    c11 = comm_time("hierarchical", M, 2, 1, 2, np.inf, be, 0.0, 0.0, **kw)
    assert c11 == pytest.approx(M / be)
    assert c44 == pytest.approx(4 * M / be)
    assert c17 == pytest.approx(7 * M / be)
    # nu = 0.5: sqrt(g).
    half = comm_time("hierarchical", M, 8, 4, 2, np.inf, be, 0.0, 0.0, nic_sharing=0.5)
    assert half == pytest.approx(2 * M / be)


def test_step_latency_only_for_multi_gpu_jobs() -> None:
    got = comm_time(
        "ring",
        1e8,
        np.array([1, 2]),
        np.array([1, 2]),
        np.array([1, 1]),
        np.array([np.inf, 10 * GB]),
        np.inf,
        np.array([0.0, 0.0]),
        0.0,
        step_latency=0.003,
    )
    assert got[0] == 0.0
    assert got[1] == pytest.approx(2 * 1 / 2 * 1e8 / (10 * GB) + 0.003)


def test_overlap_two_sided_and_single_phi_agree() -> None:
    t, C = np.array([0.2, 0.5, 1.0]), np.array([0.4, 0.1, 1.0])
    phi = 0.3
    single = iteration_time(t, C, phi)
    two = iteration_time(t, C, phi, phi)
    assert np.allclose(single, two, rtol=1e-14)
    # Hand numbers: t=0.2, C=0.4, phi_t=0.5, phi_c=1: hides min(0.1, 0.4) = 0.1 -> 0.5.
    assert iteration_time(0.2, 0.4, 0.5, 1.0) == pytest.approx(0.5)
    # Floor: phi_c = 0.25 leaves at least 0.75 C exposed: hides min(0.5, 0.1) -> 0.2 + 0.3.
    assert iteration_time(0.2, 0.4, 1.0, 0.25) == pytest.approx(0.5)
    assert iteration_time(0.3, 0.2, 0.0) == 0.5


def test_compute_curve_affine_and_knots() -> None:
    assert compute_curve([0.0, 1.0], [0.05, 0.06], [0.0, 10.0]) == pytest.approx([0.05, 0.15])
    knots_b, knots_t = [4.0, 8.0, 16.0], [0.1, 0.2, 0.6]
    got = compute_curve(knots_b, knots_t, [2.0, 4.0, 6.0, 12.0, 20.0])
    # Below the first knot the first segment extends (slope 0.025), above the last the last (0.05).
    assert got == pytest.approx([0.05, 0.1, 0.15, 0.4, 0.8])
    assert compute_curve([1.0, 2.0], [1.0, 0.5], 10.0) == 0.0  # floored


def test_perf_config_ranges() -> None:
    PerfConfig(fabric_bandwidth=1e9, nic_sharing=1.0, compute_sharing=0.1, overlap_cap=0.5)
    for bad in (
        {"nic_sharing": 1.5},
        {"fabric_bandwidth": 0.0},
        {"overlap_cap": -0.1},
        {"compute_sharing": -1.0},
        {"step_latency": math.nan},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            PerfConfig(**bad)


def _one_node_facts(g: np.ndarray) -> PlacementFacts:
    """Rows of ``g`` GPUs each on one node (no inter-node links; NVLink-class 100 GB/s within)."""
    n = len(g)
    return PlacementFacts.of(
        np.zeros((n, 0), dtype=np.int32),
        k=g,
        g=g,
        s=np.ones(n),
        b_intra=np.where(g > 1, 100 * GB, np.inf),
        a_intra=np.zeros(n),
        a_inter=np.zeros(n),
        slowdown=np.ones(n),
        survival=np.ones(n),
        sum_g2=g**2,
    )


def test_per_row_compute_sharing_is_the_shared_formula_per_row() -> None:
    # Rows with g = 1, 4, 8 and two values of κ: the array column gives each row its own κ, and a
    # constant column equals perf.compute_sharing.
    g = np.array([1.0, 4.0, 8.0])
    facts = _one_node_facts(g)
    t = np.array([0.1, 0.2, 0.3])
    perf = PerfConfig(allreduce="hierarchical", compute_sharing=0.05)
    shared = job_times(perf, 1e8, t, np.inf, facts, np.inf)
    column = job_times(
        PerfConfig(allreduce="hierarchical"),
        1e8,
        t,
        np.inf,
        facts,
        np.inf,
        compute_sharing=np.full(3, 0.05),
    )
    assert np.array_equal(shared.T, column.T)
    kappa = np.array([0.5, 0.1, 0.0])
    own = job_times(perf, 1e8, t, np.inf, facts, np.inf, compute_sharing=kappa)
    want = t * (1 + kappa * (g - 1)) + shared.C
    assert np.allclose(own.T, want, rtol=1e-15, atol=0)


# ----------------------------------------------------------------- issue 31: whole-placement terms
def _facts_of(placements: list[tuple[int, ...]], a_intra: float, a_inter: float) -> PlacementFacts:
    p = [np.array(x) for x in placements]
    k = np.array([x.sum() for x in p], dtype=float)
    s = np.array([len(x) for x in p], dtype=float)
    return PlacementFacts.of(
        np.zeros((len(p), 0), dtype=np.int32),
        k=k,
        g=np.array([x.max() for x in p], dtype=float),
        s=s,
        b_intra=np.where(k > 1, np.inf, np.inf),
        a_intra=np.where(k > 1, a_intra, 0.0),
        a_inter=np.where(s > 1, a_inter, 0.0),
        slowdown=np.ones(len(p)),
        survival=np.ones(len(p)),
        sum_g2=np.array([(x**2).sum() for x in p], dtype=float),
    )


def test_ring_latency_over_its_hops_by_hand() -> None:
    ai, ae, chi = 1e-5, 1e-4, 0.5
    f = _facts_of([(3, 1), (4,), (1,), (3, 3, 1, 1), (3, 2, 2, 1)], ai, ae)
    got = comm_time(
        "ring",
        0.0,
        f.k,
        f.g,
        f.s,
        f.b_intra,
        np.inf,
        f.a_intra,
        f.a_inter,
        hops=ring_hop_latency(f.k, f.s, f.a_intra, f.a_inter, f.sum_g2, chi),
    )
    # 31: node of 3 has 2 intra hops x (1 + 0.5 * 2) = 4 and an inter hop x 2; node of 1 one
    # inter hop x 1; the critical path is 2(k-1)/k = 1.5 of the ring.
    assert got[0] == pytest.approx(1.5 * (4 * ai + 3 * ae), rel=1e-14)
    # 4 on one node: 4 intra hops x (1 + 0.5 * 3).
    assert got[1] == pytest.approx(1.5 * 10 * ai, rel=1e-14)
    assert got[2] == 0.0
    # 3311: 2+2 intra hops x 2, inter 2+2+1+1; 3221: 2 x 2 + 1 x 1.5 + 1 x 1.5, inter 2+1.5+1.5+1.
    assert got[3] == pytest.approx(2 * 7 / 8 * (8 * ai + 6 * ae), rel=1e-14)
    assert got[4] == pytest.approx(2 * 7 / 8 * (7 * ai + 6 * ae), rel=1e-14)
    assert got[3] != got[4]  # same k, s and g; different placements


def test_hops_without_inflation_is_the_max_formula_on_equal_hops() -> None:
    f = _facts_of([(3, 1), (2, 2, 2), (5,)], 2e-5, 2e-5)
    args = ("ring", 3e8, f.k, f.g, f.s, 50 * GB, 10 * GB, f.a_intra, f.a_inter)
    hops = comm_time(*args, hops=ring_hop_latency(f.k, f.s, f.a_intra, f.a_inter, f.sum_g2, 0.0))
    assert hops == pytest.approx(comm_time(*args), rel=1e-14)
    with pytest.raises(ConfigError, match="ring"):
        perf = PerfConfig(allreduce="hierarchical", latency="hops")
        job_times(perf, 3e8, 0.1, 0.1, f, np.full(len(f), 10 * GB))


def test_last_bucket_never_overlaps_and_replica_overhead_by_hand() -> None:
    f = _facts_of([(1,), (2,)], 0.0, 0.0)
    # C = 0 here; compute 1.0 s: the 2-GPU job does not pay the single-replica 0.1 s.
    perf = PerfConfig(allreduce="ring", replica_overhead=0.1)
    t = job_times(perf, 1e8, 1.0, np.inf, f, np.inf).T
    assert t.tolist() == [1.0, pytest.approx(0.9, rel=1e-15)]
    per_row = job_times(
        PerfConfig(allreduce="ring"),
        1e8,
        1.0,
        np.inf,
        f,
        np.inf,
        replica_overhead=np.array([0.0, 0.2]),
    ).T
    assert per_row.tolist() == [1.0, pytest.approx(0.8, rel=1e-15)]
    # t = 1, C = 1, full overlap: a 100 MB gradient with a 25 MB last bucket hides at most 75 %.
    hidden = iteration_time(1.0, 1.0, 1.0, 0.75)
    assert hidden == pytest.approx(1.25, rel=1e-15)
    g = _facts_of([(2,)], 0.0, 0.0)
    perf = PerfConfig(allreduce="ring", overlap=1.0, overlap_cap=1.0, bucket_bytes=25e6)
    # 2(k-1)/k M / b = M / b = 1 s with b = 100 MB/s.
    got = job_times(perf, 1e8, 1.0, np.inf, with_link_bandwidth(g, 1e8), np.inf).T[0]
    assert got == pytest.approx(1.25, rel=1e-12)
    small = job_times(perf, 1e7, 1.0, np.inf, with_link_bandwidth(g, 1e7), np.inf).T[0]
    assert small == pytest.approx(2.0, rel=1e-12)  # one bucket: nothing hides


def with_link_bandwidth(f: PlacementFacts, b: float) -> PlacementFacts:
    """``f`` with its GPU-link bottleneck set to ``b`` bytes/s."""
    values = f.values.copy()
    values[:, 3] = b
    return PlacementFacts(values, f.inter_links)


def test_new_terms_are_checked_and_off_by_default() -> None:
    perf = PerfConfig()
    assert (perf.latency, perf.latency_inflation, perf.bucket_bytes, perf.replica_overhead) == (
        "max",
        0.0,
        0.0,
        0.0,
    )
    for bad, match in (
        ({"latency": "sum"}, "latency"),
        ({"latency": "hops", "allreduce": "hierarchical"}, "needs allreduce='ring'"),
        ({"latency_inflation": -1.0}, "latency_inflation"),
        ({"bucket_bytes": -1.0}, "bucket_bytes"),
        ({"replica_overhead": math.inf}, "replica_overhead"),
    ):
        with pytest.raises(ConfigError, match=match):
            PerfConfig(**bad)  # type: ignore[arg-type]


def test_compute_saturation_caps_the_compute_sharing() -> None:
    # κ = 0.5, κ_max = 1.3 on g = 1, 2, 3, 4, 8 co-located GPUs of the job (no communication,
    # M = 0): factors 1 + min(0.5 (g - 1), 1.3) = 1, 1.5, 2.0, 2.3, 2.3 of t_c = 0.1 s.
    g = np.array([1.0, 2.0, 3.0, 4.0, 8.0])
    facts = _one_node_facts(g)
    perf = PerfConfig(allreduce="ring", compute_sharing=0.5, compute_saturation=1.3)
    got = job_times(perf, 0.0, 0.1, np.inf, facts, np.inf)
    assert pytest.approx([0.1, 0.15, 0.2, 0.23, 0.23], rel=1e-14) == got.T
    # Per row, replacing the options' values: row 2 saturates at 0.2 (factor 1.2), row 3 never.
    per_row = job_times(
        perf,
        0.0,
        0.1,
        np.inf,
        facts,
        np.inf,
        compute_sharing=np.full(5, 0.5),
        compute_saturation=np.array([0.0, 0.2, 0.2, np.inf, 1.3]),
    )
    assert pytest.approx([0.1, 0.12, 0.12, 0.25, 0.23], rel=1e-14) == per_row.T


def test_no_compute_saturation_is_the_linear_sharing_bit_for_bit() -> None:
    # The default κ_max = inf leaves 1 + κ (g - 1) exactly as it was (min(x, inf) is x).
    g = np.arange(1.0, 9.0)
    facts = PlacementFacts.of(
        np.zeros((8, 0), dtype=np.int32),
        k=g,
        g=g,
        s=np.ones(8),
        b_intra=np.where(g > 1, 50 * GB, np.inf),
        a_intra=np.where(g > 1, 1e-5, 0.0),
        a_inter=np.zeros(8),
        slowdown=np.ones(8),
        survival=np.ones(8),
        sum_g2=g**2,
    )
    t = np.linspace(0.05, 0.4, 8)
    kappa = np.array([0.0, 0.01, 0.07, 0.3, 0.0, 0.2, 1.0, 0.13])
    perf = PerfConfig(allreduce="hierarchical")
    got = job_times(perf, 2e8, t, np.inf, facts, np.inf, compute_sharing=kappa)
    C = comm_time("hierarchical", 2e8, g, g, np.ones(8), facts.b_intra, np.inf, facts.a_intra, 0.0)
    assert np.array_equal(got.T, t * (1.0 + kappa * (g - 1.0)) + C)


def test_compute_saturation_range() -> None:
    PerfConfig(compute_saturation=0.0)
    with pytest.raises(ConfigError, match="compute_saturation"):
        PerfConfig(compute_saturation=-0.1)


def test_latency_behind_compute_by_hand() -> None:
    # One node of 2 GPUs: the ring's two hops of 10 ms each, L = 2(k-1)/k * 20 ms = 20 ms; the
    # bandwidth term M / b = 1e8 / 1e9 = 100 ms; no overlap of the bandwidth term (φ = 0).
    f = with_link_bandwidth(_facts_of([(2,)], 0.01, 0.0), 1e9)

    def step(compute: float, psi: float) -> float:
        perf = PerfConfig(allreduce="ring", latency="hops", latency_overlap=psi)
        return float(job_times(perf, 1e8, compute, np.inf, f, np.inf).T[0])

    assert step(1.0, 0.0) == pytest.approx(1.12, rel=1e-14)  # t + C_b + L
    # ψ = 0.5 of the 1 s compute left could hide all 20 ms of L: 0.999 of it hides.
    assert step(1.0, 0.5) == pytest.approx(1.10002, rel=1e-14)
    # With 20 ms of compute, ψ = 0.5 hides 10 ms of it: 0.02 + 0.1 + 0.02 - 0.01.
    assert step(0.02, 0.5) == pytest.approx(0.13, rel=1e-14)
    assert step(0.02, 1.0) == pytest.approx(0.12002, rel=1e-14)
    # The bandwidth overlap comes first: φ = 1 hides 100 ms of C_b behind the 120 ms compute, and
    # leaves 20 ms of compute, of which ψ = 1 hides 0.999 of L.
    perf = PerfConfig(allreduce="ring", latency="hops", overlap=1.0, overlap_cap=1.0)
    both = dataclasses.replace(perf, latency_overlap=1.0)
    got = float(job_times(both, 1e8, 0.12, np.inf, f, np.inf).T[0])
    assert got == pytest.approx(0.12002, rel=1e-12)
    # Two placements that differ beyond node order never tie, even with all of L hidable.
    g = with_link_bandwidth(_facts_of([(3, 3, 1, 1), (3, 2, 2, 1)], 0.01, 0.01), 1e9)
    chi = np.array([0.5, 0.5])
    tied = job_times(both, 1e8, 10.0, np.inf, g, np.inf, latency_inflation=chi).T
    assert tied[0] != tied[1]
    # ψ = 0 is the model without the term, bit for bit (L counts in C and overlaps with it).
    assert float(job_times(perf, 1e8, 0.12, np.inf, f, np.inf).T[0]) == float(
        iteration_time(0.12, 0.12, 1.0, 1.0)
    )
    for bad, match in (
        ({"latency_overlap": 0.5}, "needs latency='hops'"),
        ({"latency": "hops", "allreduce": "ring", "latency_overlap": 1.5}, "latency_overlap"),
    ):
        with pytest.raises(ConfigError, match=match):
            PerfConfig(**bad)  # type: ignore[arg-type]
