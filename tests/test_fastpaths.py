"""The plain-Python fast paths give bit-identical results to numpy.

The step of the small environments is dominated by numpy's per-call overhead, so several hot paths
(the numeric helpers, placement facts, the state's row updates) have a plain-Python twin used on
small inputs (see :mod:`crop_gym._numeric`). Each twin must produce exactly what the vectorised
path produces: these tests run both on random inputs and compare with ``np.array_equal`` (no
tolerance).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import crop_gym.candidates as cand
import crop_gym.perf as perf
from crop_gym._numeric import np_sum, np_sum_sparse
from crop_gym.devices import PROFILES
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState
from crop_gym.scenario import Scenario
from crop_gym.topology import make_topology


# ----------------------------------------------------------------------------------- numerics
def test_np_sum_matches_numpy_pairwise_summation() -> None:
    rng = np.random.default_rng(0)
    for n in [*range(40), 127, 128, 129, 255, 256, 257, 300, 1000, 1031]:
        for _ in range(5):
            v = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, size=n)
            assert np_sum(v.tolist()) == float(v.sum()), n


def test_np_sum_sparse_matches_the_dense_sum() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        n = int(rng.integers(1, 600))
        a = np.zeros(n)
        nz = rng.random(n) < rng.random() * 0.5
        a[nz] = -rng.random(int(nz.sum())) * 10.0 ** rng.integers(-6, 1, size=int(nz.sum()))
        items = [(int(i), float(a[i])) for i in np.flatnonzero(nz)]
        assert np_sum_sparse(n, items) == float(a.sum())


def test_placement_stats_python_and_numpy_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    for preset in ("leafspine-64", "hetero-64", "n64g8"):
        topo = make_topology(preset)
        for _ in range(30):
            health = PROFILES["severe"].sample(topo, rng).observe(rng, 0.3)
            k = int(rng.integers(2, 65))
            gpus = rng.choice(topo.num_gpus, size=k, replace=False)
            monkeypatch.setattr(perf, "SMALL_PLACEMENT", 64)
            a = perf.placement_stats(topo, health, gpus)
            monkeypatch.setattr(perf, "SMALL_PLACEMENT", 1)
            b = perf.placement_stats(topo, health, gpus)
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(b, f.name)
                if isinstance(x, np.ndarray):
                    assert x.dtype == y.dtype and np.array_equal(x, y), f.name
                else:
                    assert type(x) is type(y) and x == y, f.name


@pytest.mark.parametrize("allreduce", ["ring", "hierarchical"])
def test_incremental_python_rows_match_numpy_rows(allreduce: str) -> None:
    """Adding, removing and evaluating gains: the plain-Python row updates (few affected jobs)
    and the vectorised ones give the same F, values and gains."""
    perf_cfg = perf.PerfConfig(allreduce, 0.3 if allreduce == "ring" else 0.0)
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(4)
    health = PROFILES["severe"].sample(topo, rng)
    states = [ClusterState(topo, health, perf_cfg) for _ in range(2)]
    states[1]._PY_ROWS = -1  # type: ignore[misc]  # always vectorised
    for t in range(60):
        st0 = states[0]
        if st0.jobs and rng.random() < 0.3:
            jid = sorted(st0.jobs)[int(rng.integers(len(st0.jobs)))]
            d = [st.remove(jid) for st in states]
        else:
            free = np.flatnonzero(st0.free_mask)
            if len(free) == 0:
                continue
            k = int(min(len(free), rng.choice([1, 2, 4, 8, 16])))
            gpus = rng.choice(free, size=k, replace=False)
            job = Job(f"j{t}", str(rng.choice(["resnet50", "vgg16", "bert"])), k, 32 * k)
            g = [st.gain(job, gpus) for st in states]
            assert g[0] == g[1]
            d = [st.add(job, gpus) for st in states]
        assert d[0] == d[1]
        assert states[0].F == states[1].F
        assert np.array_equal(states[0].slot_iteration_times, states[1].slot_iteration_times)
        assert states[0].metrics() == states[1].metrics()


def test_trusted_add_matches_checked_add() -> None:
    sc = Scenario(cluster="leafspine-64", abnormal=PROFILES["severe"])
    st = ClusterState(sc.topology, PROFILES["severe"].sample(sc.topology, np.random.default_rng(5)))
    other = st.copy()
    for t, k in enumerate([4, 8, 1, 16, 2]):
        cs = cand.candidate_placements(st, k)
        job = Job(f"j{t}", "resnet50", k, 64)
        assert st.add(job, cs.gpus[0], validate=False) == other.add(job, cs.gpus[0])
        assert st.F == other.F and np.array_equal(st.gpu_owner, other.gpu_owner)


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("crop_gym/Placement-v0", {}),
        ("crop_gym/Placement-Severe-v0", {"privileged": True, "max_candidates": 12}),
        ("crop_gym/Placement-v0", {"scenario": Scenario(observation_noise=0.3, allreduce="ring")}),
        ("crop_gym/Placement-v0", {"scenario": Scenario(cluster="hetero-64", overlap=0.5)}),
    ],
)
def test_feature_caches_match_a_fresh_builder(env_id: str, kwargs: dict[str, object]) -> None:
    """Per-candidate, per-class and per-layout caches never go stale: every observation equals
    the one a fresh builder computes from scratch."""
    import gymnasium as gym

    from crop_gym.envs.features import ObservationBuilder

    env = gym.make(env_id, **kwargs)
    u = env.unwrapped
    rng = np.random.default_rng(6)
    obs, info = env.reset(seed=6)
    for step in range(60):
        fresh = ObservationBuilder(
            u.topology,
            u.actions,
            u.scenario.perf,
            queue_size=u.scenario.queue_size,
            max_job_gpus=u.scenario.job_size_limit,
            privileged=u.privileged,
        )
        fresh.set_health(u.features.health)
        ref = fresh.build(u.state, u.pending, step=u._steps, max_steps=u.max_steps)
        assert ref.keys() == obs.keys()
        for key in ref:
            assert np.array_equal(ref[key], obs[key]), (step, key)
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            obs, info = env.reset()


def _select_reference(
    infos: list[tuple[int, int]], Q: int, grouping: bool, fits: set[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The original job-by-job view selection (sizes, slot groups, copies, positions)."""
    group_of_size: dict[int, int] = {}
    sizes: list[int] = []
    slot_of: dict[int, int] = {}
    copies: list[int] = []
    slot_group: list[int] = []
    pos: list[int] = []
    n = 0
    for i, (k, cls) in enumerate(infos):
        if grouping:
            q = slot_of.get(cls)
            if q is not None:
                copies[q] += 1
                continue
            if n == Q:
                continue
        elif n == Q:
            break
        gi = group_of_size.get(k)
        if gi is None:
            gi = -1
            if k in fits:
                gi = len(sizes)
                sizes.append(k)
            group_of_size[k] = gi
        if gi < 0:
            continue
        slot_of[cls] = n
        copies.append(1)
        slot_group.append(gi)
        pos.append(i)
        n += 1
    return sizes, slot_group, copies, pos


@pytest.mark.parametrize("grouping", [True, False])
def test_view_selection_matches_the_job_by_job_rule(grouping: bool) -> None:
    from crop_gym.envs.actions import CandidateActions

    rng = np.random.default_rng(8)
    for _ in range(500):
        Q = int(rng.integers(1, 12))
        acts = CandidateActions(Q, 4, group_identical=grouping)
        n_cls = int(rng.integers(1, 15))
        cls_k = {c: int(rng.choice([1, 2, 4, 8, 16])) for c in range(n_cls)}
        acts._cls_k.update(cls_k)
        classes = [int(c) for c in rng.integers(0, n_cls, size=int(rng.integers(0, 40)))]
        ks = [cls_k[c] for c in classes]
        fits = {k for k in (1, 2, 4, 8, 16) if rng.random() < 0.7}
        got = acts._select((classes, ks), lambda k, fits=fits: k in fits)
        want = _select_reference(list(zip(ks, classes, strict=True)), Q, grouping, fits)
        assert got[:4] == want
        assert got[4] == [classes[i] for i in want[3]]


def _table(acts: object) -> tuple[object, ...]:
    """Everything a built :class:`CandidateActions` exposes."""
    a: Any = acts
    key_of = {c: key for key, c in a._class_ids.items()}  # class ids are per object
    return (
        a.view,
        a.positions,
        [key_of[c] for c in a.view_classes],
        a.slot_groups,
        a.copies.tolist(),
        a.slot_group.tolist(),
        a.mask.tolist(),
        [None if cs is None else cs.gpus.tolist() for cs in a.sets],
        [cs.gpus.tolist() for cs in a.groups],
        a.in_view,
        a.pending_gpus,
    )


@pytest.mark.parametrize("grouping", [True, False])
def test_incremental_queue_index_matches_a_fresh_build(grouping: bool) -> None:
    """The queue index kept between builds (updated when one job leaves the queue) gives the
    same table as a fresh object, for any queue change and any number of free GPUs."""
    import copy
    import pickle

    from crop_gym.envs.actions import CandidateActions

    rng = np.random.default_rng(9)
    topo = make_topology("leafspine-64")
    models = ["resnet50", "vgg16", "bert"]
    for trial in range(40):
        st = ClusterState(topo, PROFILES["mild"].sample(topo, rng))
        Q = int(rng.integers(1, 10))
        acts = CandidateActions(Q, 4, group_identical=grouping)
        # Few distinct jobs, so that identical jobs (shared slots) are common.
        pool = [
            Job(f"t{trial}j{i}", str(rng.choice(models)), int(rng.choice([1, 2, 4, 8, 16])), 64)
            for i in range(int(rng.integers(1, 30)))
        ]
        pending = [pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(0, 40)))]
        for step in range(30):
            acts.build(st, pending)
            fresh = CandidateActions(Q, 4, group_identical=grouping)
            fresh.build(st, pending)
            assert _table(acts) == _table(fresh), (trial, step)
            r = rng.random()
            if r < 0.6 and pending:  # one job leaves (the static environment's step)
                del pending[int(rng.integers(len(pending)))]
            elif r < 0.7:  # arrivals
                pending = [*pending, pool[int(rng.integers(len(pool)))]]
            elif r < 0.8:  # any other change, as a new list
                pending = [pending[i] for i in rng.permutation(len(pending))][1:]
            elif r < 0.85:  # a copy mid-episode
                acts = pickle.loads(pickle.dumps(acts)) if r < 0.825 else copy.deepcopy(acts)
            # Free GPUs change, so that sizes stop fitting.
            free = np.flatnonzero(st.free_mask)
            if len(free) > 1 and rng.random() < 0.5:
                k = int(rng.integers(1, len(free)))
                st.add(Job(f"t{trial}b{step}", "resnet50", k, 64), rng.choice(free, k, False))


def test_selection_from_the_index_matches_the_general_rule() -> None:
    """:meth:`CandidateActions._select_fitting` (lists of the queue index) equals
    :meth:`CandidateActions._select` with ``has_candidates(k) = k <= free``."""
    from crop_gym.envs.actions import CandidateActions, _QueueIndex

    rng = np.random.default_rng(10)
    for _ in range(500):
        grouping = bool(rng.integers(2))
        acts = CandidateActions(int(rng.integers(1, 12)), 4, group_identical=grouping)
        n_cls = int(rng.integers(1, 15))
        cls_k = {c: int(rng.choice([1, 2, 4, 8, 16])) for c in range(n_cls)}
        acts._cls_k.update(cls_k)
        n = int(rng.integers(0, 80))  # long queues take the dictionary path of the index
        classes = [int(c) for c in rng.integers(0, n_cls, size=n)]
        index = _QueueIndex(list(range(n)), list(classes), cls_k, grouping)
        for _ in range(min(n, 10)):
            free = int(rng.integers(0, 20))
            got = acts._select_fitting(index, free)
            want = acts._select((classes, index.ks), lambda k, free=free: k <= free)
            assert got == want
            i = int(rng.integers(len(classes)))
            del classes[i]
            index.remove(i, list(range(len(classes))), 0)


def test_trusted_add_keeps_every_record_and_free_link_rows_zero() -> None:
    """The add fast path (per-health lists, single-GPU facts from lists, memoised job constants,
    untouched padding rows) stores what the checked path with numpy placement facts stores."""
    rng = np.random.default_rng(11)
    topo = make_topology("leafspine-64")
    health = PROFILES["severe"].sample(topo, rng)
    fast, slow = ClusterState(topo, health), ClusterState(topo, health)
    for t in range(200):
        if fast.jobs and rng.random() < 0.35:
            jid = sorted(fast.jobs)[int(rng.integers(len(fast.jobs)))]
            assert fast.remove(jid) == slow.remove(jid)
        else:
            free = np.flatnonzero(fast.free_mask)
            if len(free) == 0:
                continue
            k = int(min(len(free), rng.choice([1, 1, 2, 4, 8, 16])))
            gpus = np.sort(rng.choice(free, size=k, replace=False)).astype(np.int32)
            job = Job(f"j{t}", str(rng.choice(["resnet50", "vgg16", "bert"])), k, 32 * k)
            stats = dataclasses.replace(perf.placement_stats(topo, health, gpus), gpus=gpus.copy())
            if k == 1:  # the numpy formulas of the single-GPU facts
                g = int(gpus[0])
                assert stats.slowdown == float(health.gpu_slowdown[g] / topo.gpu_speed[g])
                assert stats.survival == float(1.0 - health.gpu_fail_prob[g])
            assert fast.add(job, gpus, validate=False) == slow.add(job, gpus, stats)
        assert fast.F == slow.F
        for a, b in zip(fast._slot_py, slow._slot_py, strict=True):
            assert a == b
        for name in ("_links", "gpu_owner", "link_load", *(f"_{f}" for f in fast._FLOAT_FIELDS)):
            assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
        assert not fast._links[~fast._active].any()


def test_job_constants_follow_a_re_registered_model() -> None:
    """The memo of (M, t_c, T*) is dropped when a model name is mapped to a new spec."""
    from crop_gym.jobs import MODEL_ZOO, register_model

    topo = make_topology("testbed-8")
    old = MODEL_ZOO["resnet50"]
    job = Job("a", "resnet50", 2, 64)
    st = ClusterState(topo)
    st.add(job, np.array([0, 1]))
    try:
        new = dataclasses.replace(old, params=old.params * 2, per_sample=old.per_sample * 3)
        register_model(new, overwrite=True)
        st2 = ClusterState(topo)
        st2.add(job, np.array([0, 1]))
        s = st2.jobs["a"]
        assert st2._M[s] == job.grad_bytes == 2 * old.grad_bytes
        assert st2._t[s] == job.compute_time * st2._slot_stats[s].slowdown  # type: ignore[union-attr]
    finally:
        register_model(old, overwrite=True)


def test_fast_placement_stats_constructor_matches_the_dataclass() -> None:
    """``perf._make_stats`` (slot setters) builds what the frozen dataclass's ``__init__``
    builds: same fields, still frozen, picklable."""
    import pickle

    vals = (np.arange(3, dtype=np.int32), perf._NO_LINKS, 3, 3, 1, 2.5, 1e-6, 0.0, 1.25, 0.99)
    fast, ref = perf._make_stats(*vals), perf.PlacementStats(*vals)
    assert type(fast) is perf.PlacementStats
    for f in dataclasses.fields(ref):
        assert getattr(fast, f.name) is getattr(ref, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.k = 4  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(fast))
    assert back.survival == fast.survival and np.array_equal(back.gpus, fast.gpus)
