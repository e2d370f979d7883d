"""The observation builder's cached candidate and queue tables under every cache path.

:class:`~crop_gym.envs.features.ObservationBuilder` assembles the candidate table from cached
float32 bytes per (candidate row, job class) pair, computes the η of new pairs in plain Python,
gives multi-server candidates new rows when the link loads change and forgets every row past a
cap; the queue table comes from cached rows too. These tests hold the tables to the from-scratch
vectorised reference of ``tests/test_features_fastpath.py`` on the paths that test does not reach
(the row cap, the online environment's health changes), and check that copies of an environment
and several environments in one process do not share caches.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from test_features_fastpath import _reference_candidates, _reference_gpus, _reference_queue

import crop_gym  # noqa: F401  (registers the environments)
import crop_gym.envs.features as features_mod
from crop_gym.jobs import Job
from crop_gym.perf import comm_time, iteration_time
from crop_gym.scenario import Scenario


def _state(env: Any) -> Any:
    u = env.unwrapped
    return u._sim.state if hasattr(u, "_sim") else u.state


def _check_against_reference(env: Any, obs: dict[str, Any]) -> None:
    b = env.unwrapped.features
    cand, best = _reference_candidates(b, _state(env))
    assert np.array_equal(obs["candidates"].reshape(cand.shape), cand)
    queue = obs["queue"].reshape(b.actions.num_jobs, -1)
    assert np.array_equal(queue, _reference_queue(b, best))


def _rollout(env: Any, seed: int, steps: int, check: bool = False) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        if check:
            _check_against_reference(env, obs)
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        out.append(obs)
        if term or trunc:
            obs, info = env.reset()
            out.append(obs)
    return out


def _assert_same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"scenario": Scenario(observation_noise=0.3, allreduce="ring")}],
)
def test_row_cap_forgets_rows_and_keeps_the_tables(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    """With a tiny row cap the builder forgets its rows (and pairs) every few steps, mid-episode
    too; the tables still equal the reference."""
    monkeypatch.setattr(features_mod, "_MAX_ROWS", 20)
    env = gym.make("crop_gym/Placement-v0", **kwargs)
    _rollout(env, seed=11, steps=80, check=True)


def test_online_env_matches_the_reference() -> None:
    """The online environment (health changes, removals, link loads going down) gives the
    reference tables."""
    env = gym.make("crop_gym/OnlinePlacement-v0")
    _rollout(env, seed=4, steps=150, check=True)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_copied_env_continues_like_the_original(how: str) -> None:
    """A copy taken mid-episode (caches full) continues exactly like the original."""
    env = gym.make("crop_gym/Placement-v0").unwrapped
    rng = np.random.default_rng(2)
    _, info = env.reset(seed=2)
    for _ in range(7):
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    twin = pickle.loads(pickle.dumps(env)) if how == "pickle" else copy.deepcopy(env)
    actions = rng.integers(1 << 30, size=40)
    traces = []
    for e in (env, twin):
        out, inf = [], info
        for a in actions:
            valid = np.flatnonzero(inf["action_mask"])
            obs, _, term, trunc, inf = e.step(int(valid[a % len(valid)]))
            out.append(obs)
            if term or trunc:
                obs, inf = e.reset(seed=int(a))
                out.append(obs)
        traces.append(out)
    _assert_same(*traces)


def test_envs_in_one_process_do_not_share_caches() -> None:
    """Two environments stepped alternately give what each gives alone."""
    alone = [_rollout(gym.make("crop_gym/Placement-v0"), seed=s, steps=60) for s in (0, 1)]
    envs = [gym.make("crop_gym/Placement-v0") for _ in range(2)]
    rngs = [np.random.default_rng(s) for s in (0, 1)]
    infos, traces = [], []
    for e, s in zip(envs, (0, 1), strict=True):
        obs, info = e.reset(seed=s)
        infos.append(info)
        traces.append([obs])
    for _ in range(60):
        for i, e in enumerate(envs):
            valid = np.flatnonzero(infos[i]["action_mask"])
            obs, _, term, trunc, infos[i] = e.step(int(valid[rngs[i].integers(len(valid))]))
            traces[i].append(obs)
            if term or trunc:
                obs, infos[i] = e.reset()
                traces[i].append(obs)
    for a, b in zip(alone, traces, strict=True):
        _assert_same(a, b)


@pytest.mark.parametrize(("allreduce", "overlap"), [("ring", 0.0), ("hierarchical", 0.4)])
def test_pair_eta_matches_the_vectorised_time_model(allreduce: str, overlap: float) -> None:
    """The plain-Python η of a (candidate, job) pair equals the numpy time model on random
    candidates and jobs, including single-GPU (infinite bandwidth) terms."""
    env = gym.make("crop_gym/Placement-v0", scenario=Scenario(allreduce=allreduce, overlap=overlap))
    b = env.unwrapped.features
    rng = np.random.default_rng(7)
    n = 400
    k = rng.integers(1, 9, n).astype(np.float64)
    s = np.minimum(rng.integers(1, 5, n), k)
    g = np.maximum(np.ceil(k / s), 1.0)
    b_intra = np.where(k > s, rng.uniform(1e9, 1e11, n), np.inf)
    b_inter = np.where(s > 1, rng.uniform(1e8, 1e10, n), np.inf)
    a_intra = np.where(k > s, rng.uniform(0, 1e-5, n), 0.0)
    a_inter = np.where(s > 1, rng.uniform(0, 1e-4, n), 0.0)
    sd = rng.uniform(0.5, 3.0, n)
    surv = rng.uniform(0.5, 1.0, n)
    grad, tc, tstar = rng.uniform(1e6, 1e9, n), rng.uniform(1e-3, 1.0, n), rng.uniform(1e-3, 1.0, n)
    T = iteration_time(
        tc * sd, comm_time(allreduce, grad, k, g, s, b_intra, b_inter, a_intra, a_inter), overlap
    )
    eta = np.minimum(1.0, tstar / T)
    want = np.stack([eta, eta * surv], axis=1).astype(np.float32)
    got = np.empty_like(want)
    for i in range(n):
        if allreduce == "ring":
            steps = 2.0 * (k[i] - 1.0)
            h: tuple[float, ...] = (
                steps / k[i],
                min(b_intra[i], b_inter[i]),
                steps * max(a_intra[i], a_inter[i]),
                sd[i],
            )
        else:
            h = (
                2.0 * (g[i] - 1.0) / g[i],
                2.0 * (s[i] - 1.0) / s[i],
                b_intra[i],
                b_inter[i],
                2.0 * (g[i] - 1.0) * a_intra[i],
                2.0 * (s[i] - 1.0) * a_inter[i],
                sd[i],
            )
        row = 1 << 40  # (an id no real row takes)
        b._rowdata[row] = (b"\0" * 8, b"\0" * 28, b"\0" * 8, tuple(map(float, h)), float(surv[i]))
        job = (b"\0" * 8, [], float(grad[i]), float(tc[i]), float(tstar[i]))
        heads: list[bytes | None] = [None]
        b._pair_rows([row], job, {}, heads, -1)
        assert heads[0] is not None
        got[i] = np.frombuffer(heads[0], dtype=np.float32)[11:13]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("allreduce", ["ring", "hierarchical"])
def test_multi_server_rows_follow_the_link_loads(allreduce: str) -> None:
    """A multi-server candidate seen again after the link loads changed gets its contention,
    bandwidth and η under the new loads (its cached pairs are not reused)."""
    env = gym.make("crop_gym/Placement-v0", scenario=Scenario(allreduce=allreduce))
    u = env.unwrapped
    b = u.features
    rng = np.random.default_rng(1)
    _, info = env.reset(seed=1)
    hits = 0
    for _ in range(200):
        acts = u.actions
        multi = [
            (q, c)
            for q, cs in enumerate(acts.sets[: len(acts.view)])
            if cs is not None
            for c in np.flatnonzero(cs.num_servers > 1)
        ]
        if multi:
            # Place the job on one of its multi-server candidates in a copy of the state: the
            # links that candidate spans carry one more ring. The table (built for the old
            # state) keeps the candidate; its row must follow the new loads.
            q, c = multi[rng.integers(len(multi))]
            state = u.state.copy()
            state.add(acts.view[q], acts.gpus(q, c))
            before = b.build(u.state, u.pending)
            after = b.build(state, u.pending)
            cand, best = _reference_candidates(b, state)
            assert np.array_equal(after["candidates"].reshape(cand.shape), cand)
            queue = after["queue"].reshape(acts.num_jobs, -1)
            assert np.array_equal(queue, _reference_queue(b, best))
            row = cand[q * acts.max_candidates + c]
            hits += bool(
                before["candidates"].reshape(cand.shape)[q * acts.max_candidates + c, 13] != row[13]
            )
            b.build(u.state, u.pending)  # (back to the environment's state)
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    assert hits > 10


@pytest.mark.parametrize("env_id", ["crop_gym/OnlinePlacement-v0", "crop_gym/PlacementGPU-v0"])
def test_gpu_table_matches_the_reference(env_id: str) -> None:
    """The per-GPU table equals the reference (removals, health changes and slot reuse in the
    online environment), and the extra columns are the caller's."""
    env = gym.make(env_id)
    b = env.unwrapped.features
    rng = np.random.default_rng(5)
    obs, info = env.reset(seed=5)
    for _ in range(150):
        gpus = obs["gpus"].reshape(b.topology.num_gpus, -1)
        assert np.array_equal(gpus[:, :10], _reference_gpus(b, _state(env)))
        assert np.array_equal(gpus[:, 10:], b.gpu_buffer[:, 10:])
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            obs, info = env.reset()


def test_gpu_size_column_follows_a_reused_slot() -> None:
    """A slot freed and taken by a job of another size gets that job's size column."""
    env = gym.make("crop_gym/Placement-v0")
    env.reset(seed=0)
    u = env.unwrapped
    state, b = u.state, u.features
    b.build(state, u.pending)
    slots = []
    for k in (2, 5):
        free = np.flatnonzero(state.free_mask)[:k]
        state.add(Job(f"x{k}", "resnet50", k, 32 * k), free.tolist())
        slots.append(state.jobs[f"x{k}"])
        obs = b.build(state, u.pending)
        gpus = obs["gpus"].reshape(b.topology.num_gpus, -1)
        assert np.array_equal(gpus, _reference_gpus(b, state))
        state.remove(f"x{k}")
    assert slots[0] == slots[1]


@pytest.mark.parametrize(
    ("env_id", "allreduce"),
    [("crop_gym/Placement-v0", "ring"), ("crop_gym/Placement-Severe-v0", "hierarchical")],
)
def test_clean_candidates_share_the_row_they_would_get(env_id: str, allreduce: str) -> None:
    """Every candidate mapped to a shared clean row gets from :meth:`_new_row` exactly the values
    of that row's first candidate; the tables equal the reference."""
    env = gym.make(env_id, scenario=Scenario(allreduce=allreduce))
    out = _rollout(env, seed=6, steps=12, check=True)
    assert out
    b = env.unwrapped.features
    firsts: dict[int, tuple[int, ...]] = {}
    shared = 0
    for key, i in b._rows.items():
        if i not in b._clean:
            continue
        if i not in firsts:
            firsts[i] = key
            continue
        shared += 1
        scratch = copy.deepcopy(b)
        one: Any = ([], [], [])
        two: Any = ([], [], [])
        scratch._new_row(firsts[i], one)
        scratch._new_row(key, two)
        assert one == two, (firsts[i], key)
    assert shared > 0


def test_clean_rows_follow_the_common_values_across_health_changes() -> None:
    """The clean rows and their pairs are kept across health changes while the common per-GPU
    values stay; when those change (every GPU link degraded; every GPU slower, which leaves no
    clean GPU), the tables still equal the reference."""
    env = gym.make("crop_gym/Placement-v0")
    env.reset(seed=8)
    u = env.unwrapped
    b = u.features
    base = u.state.health
    healths = [
        base,
        dataclasses.replace(base, link_degradation=base.link_degradation * 0.5),
        dataclasses.replace(base, gpu_slowdown=base.gpu_slowdown * 2.0),
        base,
    ]
    commons = []
    for h in healths:
        u.state.set_health(h)
        b.set_health(h)
        u.actions.build(u.state, u.pending)
        obs = b.build(u.state, u.pending)
        _check_against_reference(env, obs)
        commons.append(b._clean_common)
        assert bool(b._clean) == (h is not healths[2])
    assert len(set(commons)) == 3
