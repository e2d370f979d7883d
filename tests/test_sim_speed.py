"""The simulator's speed-ups change no result: incremental health updates and CROP's memos.

* ``ClusterState.set_health`` recomputes only the jobs whose devices changed; every placed job's
  facts, times and value, and F, must be bit-identical to a state built afresh under the new health.
* CROP's candidate pool (per health, across calls) and prefix memo (across the two passes of one
  call) must give bit-identical placements and gains to a cold run, and ``rule="best"`` must be the
  better of the two single passes.
"""

from __future__ import annotations

import numpy as np
import pytest

from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.instances import small_instance
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology
from crop_gym.sim import Simulator


def _changed_health(h0, topo, rng, what: str):
    """``h0`` with a few devices changed (``what``: gpu, own-link, inter-link or all)."""
    sig, pi_g = h0.gpu_slowdown.copy(), h0.gpu_fail_prob.copy()
    rho, pi_l = h0.link_degradation.copy(), h0.link_fail_prob.copy()
    G = topo.num_gpus
    if what in ("gpu", "all"):
        g = rng.choice(G, 6, replace=False)
        sig[g[:3]] = rng.uniform(1, 3, 3)
        pi_g[g[3:]] = rng.uniform(0, 0.5, 3)
    if what in ("own-link", "all"):
        own = topo.gpu_node[rng.choice(G, 4, replace=False)]
        rho[own[:2]] = rng.uniform(0.2, 1, 2)
        pi_l[own[2:]] = rng.uniform(0, 0.5, 2)
    if what in ("inter-link", "all"):
        inter = np.flatnonzero(~topo.is_intra)[1:]
        e = rng.choice(inter, 4, replace=False)
        rho[e[:2]] = rng.uniform(0.2, 1, 2)
        pi_l[e[2:]] = rng.uniform(0, 0.5, 2)
    return h0.replace(
        gpu_slowdown=sig, gpu_fail_prob=pi_g, link_degradation=rho, link_fail_prob=pi_l
    )


@pytest.mark.parametrize("what", ["gpu", "own-link", "inter-link", "all", "none"])
def test_incremental_set_health_is_bit_identical_to_a_fresh_state(what: str) -> None:
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(len(what))
    prof = get_profile("severe")
    for trial in range(4):
        h0 = prof.sample(topo, rng).replace(gpu_failed=np.zeros(topo.num_gpus, bool))
        st = ClusterState(topo, h0)
        placed: list[tuple[Job, np.ndarray]] = []
        for i in range(12):
            k = int(rng.choice([1, 2, 4, 8, 12]))
            c = candidate_placements(st, k)
            if len(c):
                job = Job(f"j{trial}-{i}", str(rng.choice(["vgg16", "resnet50", "bert"])), k, 64)
                gpus = c.gpus[rng.integers(len(c))]
                st.add(job, gpus)
                placed.append((job, gpus))
        h1 = _changed_health(h0, topo, rng, what) if what != "none" else h0.replace()
        st.set_health(h1)
        ref = ClusterState(topo, h1)
        for job, gpus in placed:  # same order: same slots
            ref.add(job, gpus)
        ref.evaluate()  # F as the sum over the slots, as set_health leaves it
        act = np.flatnonzero(st.placed.active)
        assert np.array_equal(act, np.flatnonzero(ref.placed.active))
        assert np.array_equal(st.placed.data[act], ref.placed.data[act])
        assert np.array_equal(
            st.placed.links[act], ref.placed.links[act][:, : st.placed.links.shape[1]]
        )
        assert st.F == ref.F


def test_set_health_refuses_a_held_failed_gpu() -> None:
    topo = make_topology("leafspine-64")
    st = ClusterState(topo)
    st.add(Job("a", "resnet50", 2, 64), [4, 5])
    failed = np.zeros(topo.num_gpus, bool)
    failed[5] = True
    with pytest.raises(Exception, match="job a holds a failed GPU"):
        st.set_health(st.health.replace(gpu_failed=failed))


@pytest.mark.parametrize("profile", ["none", "severe"])
@pytest.mark.parametrize("robust", [True, False])
def test_crop_memos_change_nothing(profile: str, robust: bool) -> None:
    rng = np.random.default_rng(7)
    for _ in range(12):
        state, queue = small_instance(
            rng, cluster="flat-16", profile=profile, n_jobs=(3, 10), background=2
        )
        warm = crop_greedy(state, queue, robust=robust)
        again = crop_greedy(state, queue, robust=robust)  # warm pool: lists and facts memoised
        cold_state = state.copy()
        cold_state.set_health(state.health.replace())  # a new health object: a fresh pool
        # A generator that is not the default one is called every time (no list memo).
        cold = crop_greedy(
            cold_state,
            queue,
            robust=robust,
            candidate_fn=lambda s, k, **kw: candidate_placements(s, k, **kw),
        )
        for res in (again, cold):
            assert [p.key() for p in res.placements] == [p.key() for p in warm.placements]
            assert res.gains == warm.gains
            assert res.F == warm.F
        # "best" is the better single pass (each pass alone, without the other's memo).
        a = crop_greedy(state, queue, robust=robust, rule="gain")
        b = crop_greedy(state, queue, robust=robust, rule="density")
        best = b if b.F > a.F + 1e-9 else a
        assert [p.key() for p in best.placements] == [p.key() for p in warm.placements]
        assert best.gains == warm.gains


def test_simulation_with_crop_is_deterministic_across_warm_pools() -> None:
    from crop_gym.policy import make_policy
    from crop_gym.workloads import load_workload

    jobs = load_workload("elasticflow:cluster10").jobs[:80]
    runs = [
        Simulator(jobs, "n32g8", profile="severe", seed=3).run(make_policy("crop")).metrics
        for _ in range(2)
    ]
    drop = ("wall_s", "policy_wall_s", "events_per_s")
    assert {k: v for k, v in runs[0].items() if k not in drop} == {
        k: v for k, v in runs[1].items() if k not in drop
    }
