"""The observation builder's fast paths against a plain vectorised reference.

:class:`~crop_gym.envs.features.ObservationBuilder` computes its tables incrementally (per-candidate
rows computed once per health in plain Python, per-job rows, padded whole-table numpy passes,
caches keyed by link loads and health). These tests rebuild every table from scratch with the
straightforward vectorised formulas (per candidate set: gather the per-GPU health columns, reduce
them, walk the inter-server links; per row: the time model of :mod:`crop_gym.perf`) and require
bit-identical observations.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from numpy.typing import NDArray

import crop_gym  # noqa: F401  (registers the environments)
from crop_gym.candidates import CandidateSet
from crop_gym.envs.features import ObservationBuilder, _compute_feature, _grad_feature
from crop_gym.objective import ClusterState
from crop_gym.perf import comm_time, iteration_time
from crop_gym.scenario import Scenario


def _gpu_static(b: ObservationBuilder) -> NDArray[np.float64]:
    """Per GPU: slow?, failure-prone?, σ/speed, log(1-π_g), log(1-π) and ρ·B and latency of its
    GPU link (under the builder's health)."""
    topo, h = b.topology, b.health
    gl = topo.gpu_node
    return np.stack(
        [
            (h.gpu_slowdown > 1.0).astype(np.float64),
            (h.gpu_fail_prob > 0).astype(np.float64),
            h.gpu_slowdown / topo.gpu_speed,
            np.log1p(-h.gpu_fail_prob),
            np.log1p(-h.link_fail_prob)[gl],
            (topo.link_bw * h.link_degradation)[gl],
            topo.link_lat[gl],
        ],
        axis=1,
    )


def _group_stats(b: ObservationBuilder, cs: CandidateSet, load: NDArray[np.int32]) -> Any:
    """Per candidate of ``cs``, float64 columns: s, g, switches, slow_frac, failprone_frac,
    slowdown, survival, b_intra, b_inter (its own rings added), a_intra, a_inter, max_load, k."""
    topo, h = b.topology, b.health
    P = cs.gpus.astype(np.int64)
    n, k = P.shape
    out = np.empty((n, 13))
    out[:, 12] = k
    out[:, 0:3] = (1.0, float(k), 1.0)
    out[:, 8] = np.inf
    out[:, 10:12] = 0.0
    X = _gpu_static(b)[P]  # (n, k, 7)
    out[:, 3:5] = X[:, :, 0:2].mean(axis=1)
    out[:, 5] = X[:, :, 2].max(axis=1)
    if k == 1:
        out[:, 6] = np.exp(X[:, 0, 3])
        out[:, 7] = np.inf
        out[:, 9] = 0.0
        return out
    logs = X[:, :, 3:5].sum(axis=(1, 2))
    out[:, 7] = X[:, :, 5].min(axis=1)
    out[:, 9] = X[:, :, 6].max(axis=1)
    multi = np.flatnonzero(cs.num_servers > 1)
    if len(multi):
        Pm = P[multi]
        anc = topo.gpu_links[Pm][:, :, 1:]  # links above the GPU links: (m, k, D-1)
        lo = topo.node_gpu_lo[anc]
        span = (anc > 0) & ((lo > Pm[:, :1, None]) | (topo.node_gpu_hi[anc] <= Pm[:, -1:, None]))
        prev = np.empty_like(Pm)
        prev[:, 0] = -1
        prev[:, 1:] = Pm[:, :-1]
        first = span & (prev[:, :, None] < lo)  # the first GPU of the placement under that link
        ld = load[anc]
        eff = topo.link_bw * h.link_degradation
        out[multi, 8] = np.where(span, eff[anc] / (ld + 1.0), np.inf).min(axis=(1, 2))
        out[multi, 10] = np.where(span, topo.link_lat[anc], 0.0).max(axis=(1, 2))
        out[multi, 11] = np.where(span, ld, 0).max(axis=(1, 2))
        srv = topo.gpu_server[Pm]
        new_run = np.ones(Pm.shape, dtype=bool)
        new_run[:, 1:] = srv[:, 1:] != srv[:, :-1]
        out[multi, 0] = new_run.sum(axis=1)
        idx = np.arange(k)
        run_start = np.maximum.accumulate(np.where(new_run, idx, 0), axis=1)
        out[multi, 1] = (idx - run_start + 1).max(axis=1)
        par = topo.parent[topo.server_node][srv]
        out[multi, 2] = 1 + (par[:, 1:] != par[:, :-1]).sum(axis=1)
        logok = np.log1p(-h.link_fail_prob)
        logs[multi] += np.where(first, logok[anc], 0.0).sum(axis=(1, 2))
    out[:, 6] = np.exp(logs)
    return out


def _reference_candidates(b: ObservationBuilder, state: ClusterState) -> Any:
    """The candidate table ``(Q*C, 17)`` and each slot's best η, from scratch."""
    acts = b.actions
    Q, C = acts.num_jobs, acts.max_candidates
    table = np.zeros((Q * C, 17))
    best = np.zeros(Q)
    bw_ref = float(b.topology.link_bw[b.topology.gpu_node].max())
    qpos = (np.arange(Q, dtype=np.float64) / max(Q - 1, 1)).astype(np.float32)
    for q, job in enumerate(acts.view):
        cs = acts.sets[q]
        assert cs is not None
        st = _group_stats(b, cs, state.link_load)
        s, g, sw = st[:, 0], st[:, 1], st[:, 2]
        k, surv = st[:, 12], st[:, 6]
        b_intra, b_inter = st[:, 7], st[:, 8]
        _, grad, tc, w, tstar = b.job_facts(job)
        comm = comm_time(b.perf.allreduce, grad, k, g, s, b_intra, b_inter, st[:, 9], st[:, 10])
        T = iteration_time(tc * st[:, 5], comm, b.perf.overlap)
        eta = np.minimum(1.0, tstar / T)
        ml = st[:, 11]
        X = np.empty((len(st), 17))
        X[:, 0] = 1.0
        X[:, 1] = k / b.max_job_gpus
        X[:, 2] = _grad_feature(grad)
        X[:, 3] = _compute_feature(tc)
        X[:, 4] = s / 32.0
        X[:, 5] = (s - 1.0) / np.maximum(k - 1.0, 1.0)
        X[:, 6] = sw / 8.0
        X[:, 7:9] = st[:, 3:5]
        X[:, 9] = 1.0 - 1.0 / st[:, 5]
        X[:, 10] = surv
        X[:, 11] = eta
        X[:, 12] = eta * surv
        X[:, 13] = ml / (ml + 1.0)
        X[:, 14] = np.minimum(np.minimum(b_intra, b_inter), bw_ref) / bw_ref
        X[:, 15] = qpos[q]
        X[:, 16] = w / (1.0 + w)
        table[q * C : q * C + len(st)] = np.clip(X, 0.0, 1.0)
        best[q] = eta.max()
    return table.astype(np.float32), best


def _reference_gpus(b: ObservationBuilder, state: ClusterState) -> NDArray[np.float32]:
    h, topo = b.health, b.topology
    owner = state.gpu_owner
    out = np.zeros((topo.num_gpus, 10), dtype=np.float32)
    out[:, 0] = (owner < 0) & state.health.usable
    out[:, 1] = owner >= 0
    out[:, 2] = h.gpu_failed
    out[:, 3] = 1.0 - 1.0 / h.gpu_slowdown
    out[:, 4] = np.clip(h.gpu_fail_prob, 0.0, 1.0)
    out[:, 5] = topo.gpu_speed / float(topo.gpu_speed.max())
    uplink = topo.server_node[topo.gpu_server]
    n = state.link_load[uplink]
    out[:, 6] = n / (n + 1.0)
    out[:, 7] = 1.0 - h.link_degradation[uplink]
    per_slot = np.zeros((len(state.slot_eta) + 1, 2))
    per_slot[:-1, 0] = state.slot_eta
    per_slot[:-1, 1] = np.minimum(state.slot_num_gpus / b.max_job_gpus, 1.0)
    out[:, 8:10] = per_slot[owner]
    return out


def _reference_queue(b: ObservationBuilder, best: NDArray[np.float64]) -> NDArray[np.float32]:
    acts = b.actions
    out = np.zeros((acts.num_jobs, 8), dtype=np.float32)
    for q, job in enumerate(acts.view):
        k, grad, tc, w, _ = b.job_facts(job)
        cs = acts.sets[q]
        assert cs is not None
        out[q] = (
            1.0,
            min(k / b.max_job_gpus, 1.0),
            float(_grad_feature(grad)),
            _compute_feature(tc),
            w / (1.0 + w),
            len(cs) / acts.max_candidates,
            np.clip(best[q], 0.0, 1.0),
            min(acts.copies[q] / 16.0, 1.0),
        )
    return out


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("crop_gym/Placement-v0", {}),
        ("crop_gym/Placement-Severe-v0", {"max_candidates": 12}),
        ("crop_gym/Placement-v0", {"scenario": Scenario(observation_noise=0.3, allreduce="ring")}),
        ("crop_gym/Placement-v0", {"scenario": Scenario(cluster="hetero-64", overlap=0.5)}),
        ("crop_gym/Placement-v0", {"group_identical_jobs": False, "table_layout": True}),
        ("crop_gym/Placement-Pollux64-v0", {}),
    ],
)
def test_observation_matches_the_vectorised_reference(
    env_id: str, kwargs: dict[str, object]
) -> None:
    """Every table of every observation equals the from-scratch vectorised computation."""
    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    b = u.features
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=3)
    for step in range(120):
        cand, best = _reference_candidates(b, u.state)
        got = obs["candidates"].reshape(cand.shape)
        assert np.array_equal(got, cand), (step, np.argwhere(got != cand)[:5])
        gpus = obs["gpus"].reshape(b.topology.num_gpus, -1)[:, :10]
        assert np.array_equal(gpus, _reference_gpus(b, u.state)), step
        queue = obs["queue"].reshape(b.actions.num_jobs, -1)
        assert np.array_equal(queue, _reference_queue(b, best)), step
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            obs, info = env.reset()


def test_candidate_row_shortcuts_match_the_full_reductions() -> None:
    """The per-candidate shortcuts (common per-GPU values, cached topology facts of multi-server
    candidates) give the same rows as the full reductions."""
    env = gym.make("crop_gym/Placement-v0", scenario=Scenario(cluster="hetero-64"))
    u = env.unwrapped
    b = u.features
    rng = np.random.default_rng(5)
    env.reset(seed=5)
    keys: list[list[int]] = []
    for _ in range(150):
        for cs in u.actions.groups:
            keys += cs.gpus.tolist()
        valid = np.flatnonzero(u.action_masks())
        _, _, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            env.reset()
    fast: tuple[list[float], list[float], list[float]] = ([], [], [])
    for key in keys:
        b._new_row(key, fast)
    # No shortcut: every per-GPU value is "odd", and the topology facts are recomputed.
    b._h_common = [(np.nan, set(range(b.topology.num_gpus)))] * 3
    slow: tuple[list[float], list[float], list[float]] = ([], [], [])
    for key in keys:
        b._spans.clear()
        b._new_row(key, slow)
    assert fast == slow
