"""Batched computations equal the same computations one state at a time.

The batched environment (:class:`crop_gym.envs.vector.PlacementVectorEnv`) holds ``N`` episodes
as one state over ``N`` regions (copies of the cluster, :meth:`Topology.replicated`) and builds
the action tables of all of them with one candidate generation. The generator, the facts and the
action tables over regions are checked against the same calls on each cluster alone, bit for bit,
on instances of several scenarios (their own health and background jobs) and on regions with
nothing free; the vector environment against Gymnasium's ``SyncVectorEnv`` of single environments,
for every candidate-mode ID.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from crop_gym.envs.actions import PendingQueue, build_action_tables
from crop_gym.envs.episodes import joined_health
from crop_gym.errors import ConfigError
from crop_gym.model.candidates import CandidateSet, candidate_sets, generate
from crop_gym.model.facts import placement_facts
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.scenario import PlacementInstance, ScenarioSampler

SCENARIOS = ("default", "default-severe", "pollux-16x4", "fragmented", "testbed-8")


def _instances(scenario: str, n: int, seed: int) -> list[PlacementInstance]:
    sampler = ScenarioSampler(scenario)
    rng = np.random.default_rng(seed)
    return [sampler.sample(rng) for _ in range(n)]


def _states(scenario: str, n: int, seed: int) -> list[ClusterState]:
    return [inst.state for inst in _instances(scenario, n, seed)]


def _joined(states: list[ClusterState]) -> ClusterState:
    """The states as the regions of one state (their jobs renamed ``r:id``)."""
    topo = states[0].topology
    union = ClusterState(
        topo.replicated(len(states)), joined_health([s.health for s in states]), states[0].perf
    )
    G = topo.num_gpus
    jobs: list[Job] = []
    gpus = []
    for r, st in enumerate(states):
        for job in st.placed_jobs():
            jobs.append(
                Job(f"{r}:{job.job_id}", job.model, job.num_gpus, job.batch_size, weight=job.weight)
            )
            gpus.append(st.placement(job.job_id) + r * G)
    union.place(jobs, gpus)
    return union


def _same_set(a: CandidateSet, b: CandidateSet, offset: int = 0) -> None:
    assert len(a) == len(b)
    np.testing.assert_array_equal(a.gpus + offset, b.gpus)
    np.testing.assert_array_equal(a.num_servers, b.num_servers)
    assert a.quality.tobytes() == b.quality.tobytes()


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("robust", [True, False])
def test_generator_over_regions_equals_one_cluster_at_a_time(scenario: str, robust: bool) -> None:
    states = _states(scenario, 7, seed=3)
    G = states[0].topology.num_gpus
    rng = np.random.default_rng(11)
    sizes = [sorted(set(rng.integers(1, G + 1, size=5).tolist()) | {1, 2}) for _ in states]
    sizes[2] = []  # a region that asks for nothing
    union = _joined(states)
    many = generate(union.conditions, union.free_mask, sizes, 6, robust=robust)
    assert len(many) == len(states)
    for r, (st, ks, got) in enumerate(zip(states, sizes, many, strict=True)):
        alone = candidate_sets(st, ks, robust=robust, max_candidates=6)
        assert len(got) == len(alone) == len(ks)
        for a, b in zip(alone, got, strict=True):
            _same_set(a, b, r * G)


def test_generator_over_regions_with_full_and_given_free_masks() -> None:
    states = _states("default-severe", 4, seed=5)
    G = states[0].topology.num_gpus
    frees = [st.free_mask.copy() for st in states]
    frees[1][:] = False  # nothing free
    frees[3][: G // 2] = False
    union = _joined(states)
    many = generate(union.conditions, np.concatenate(frees), [[1, 4, 8]] * 4, 8)
    assert all(len(cs) == 0 for cs in many[1])
    for r, (st, f, got) in enumerate(zip(states, frees, many, strict=True)):
        for a, b in zip(candidate_sets(st, [1, 4, 8], free=f), got, strict=True):
            _same_set(a, b, r * G)


def test_generator_checks_its_arguments() -> None:
    union = _joined(_states("testbed-8", 2, 0))
    with pytest.raises(ConfigError, match="regions"):
        generate(union.conditions, union.free_mask, [[1]])
    with pytest.raises(ConfigError, match="several regions"):
        candidate_sets(union, [1])
    with pytest.raises(ConfigError, match="k="):
        generate(union.conditions, union.free_mask, [[9], []])


@pytest.mark.parametrize("scenario", ["default-severe", "pollux-16x4", "fragmented"])
def test_action_tables_over_regions_equal_each_alone(scenario: str) -> None:
    insts = _instances(scenario, 4, seed=6)
    states = [inst.state for inst in insts]
    union = _joined(states)
    G = states[0].topology.num_gpus
    opts = {"num_slots": 8, "max_candidates": 8, "interference": True}
    queues = [PendingQueue.of(union, inst.queue) for inst in insts]
    queues[2] = None  # a region whose table is not wanted
    got = build_action_tables(union, queues, **opts)
    assert got[2] is None
    for r, (inst, table) in enumerate(zip(insts, got, strict=True)):
        if table is None:
            continue
        (alone,) = build_action_tables(
            inst.state, [PendingQueue.of(inst.state, inst.queue)], **opts
        )
        assert alone is not None
        assert table.region == r and alone.region == 0
        assert [j.job_id for j in table.jobs] == [j.job_id for j in alone.jobs]
        np.testing.assert_array_equal(table.mask, alone.mask)
        np.testing.assert_array_equal(table.row_index, alone.row_index)
        for a, b in zip(alone.sets, table.sets, strict=True):
            _same_set(a, b, r * G)
        assert table.facts.values.tobytes() == alone.facts.values.tobytes()
        for name in ("own", "interference", "eta", "comm", "b_inter"):
            x, y = getattr(alone.gains, name), getattr(table.gains, name)
            assert x.tobytes() == y.tobytes(), name
        assert union.region_F[r] == inst.state.F


# ------------------------------------------------------------------------ the vector environment
def _static_ids() -> list[str]:
    from crop_gym.envs.registration import _STATIC, ENV_IDS

    return [env_id for env_id, (entry, _, _) in ENV_IDS.items() if entry == _STATIC]


def _assert_same_step(a: tuple, b: tuple) -> None:  # type: ignore[type-arg]
    obs_a, obs_b = a[0], b[0]
    assert obs_a.keys() == obs_b.keys()
    for key in obs_a:
        assert obs_a[key].dtype == obs_b[key].dtype
        assert obs_a[key].tobytes() == obs_b[key].tobytes(), key
    for x, y in zip(a[1:-1], b[1:-1], strict=True):
        np.testing.assert_array_equal(x, y)
    _assert_same_info(a[-1], b[-1])


def _assert_same_info(info_a: dict, b: dict) -> None:  # type: ignore[type-arg]
    """Equal vector infos: the same keys in the same order, arrays of the same dtype and shape
    with equal values (``final_obs``: the same observations), nested dicts alike."""
    assert list(info_a) == list(b)
    for key, x in info_a.items():
        y = b[key]
        if isinstance(y, dict):
            _assert_same_info(x, y)
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, key
        if key == "final_obs":
            for u, v in zip(x, y, strict=True):
                assert (u is None) == (v is None)
                if v is not None:
                    assert all(u[k].tobytes() == v[k].tobytes() for k in v)
        elif y.dtype == object:
            assert x.tolist() == y.tolist(), key
        else:
            assert x.tobytes() == y.tobytes(), key


def _play(
    env_id: str, n: int, steps: int, seed: int, mode: str = "NextStep", **kwargs: object
) -> None:
    import gymnasium as gym

    vec = gym.make_vec(env_id, num_envs=n, autoreset_mode=mode, **kwargs)
    ref = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode(mode)},
        **kwargs,
    )
    assert vec.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"]
    assert type(vec.unwrapped).__name__ == "PlacementVectorEnv"
    assert vec.single_observation_space == ref.single_observation_space
    assert vec.single_action_space == ref.single_action_space
    _assert_same_step(vec.reset(seed=seed), ref.reset(seed=seed))
    rng = np.random.default_rng(seed)
    A = int(vec.single_action_space.n)
    ends = 0
    for t in range(steps):
        masks = vec.unwrapped.action_masks()
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        if t % 7 == 3:
            acts[0] = rng.integers(0, A)  # often masked: an invalid action
        got, want = vec.step(acts), ref.step(acts)
        _assert_same_step(got, want)
        ends += int(got[2].sum() + got[3].sum())
    assert ends > 0  # autoresets happened
    vec.close()
    ref.close()


@pytest.mark.parametrize("env_id", _static_ids())
def test_vector_env_equals_sync_vector_env(env_id: str) -> None:
    """Every candidate-mode ID: the batched env is the sync vector env of single envs, bit for bit."""
    if "512" in env_id or "1024" in env_id:  # long episodes: truncate them to see autoresets
        _play(env_id, n=2, steps=9, seed=7, max_steps=4)
    else:
        _play(env_id, n=4, steps=40, seed=7)


@pytest.mark.parametrize("env_id", ["crop_gym/Placement-v0", "crop_gym/Placement-Testbed8-v0"])
def test_vector_env_same_step_autoreset_equals_sync(env_id: str) -> None:
    _play(env_id, n=3, steps=40, seed=4, mode="SameStep")


def test_vector_env_disabled_autoreset() -> None:
    import gymnasium as gym

    vec = gym.make_vec("crop_gym/Placement-Testbed8-v0", num_envs=2, autoreset_mode="Disabled")
    vec.reset(seed=0)
    stop = np.full(2, vec.single_action_space.n - 1)
    _, _, term, _, _ = vec.step(stop)
    assert term.all()
    with pytest.raises(gym.error.ResetNeeded):
        vec.step(stop)
    vec.reset(options={"reset_mask": np.array([True, True])})
    vec.step(stop)
    with pytest.raises(ConfigError, match="autoreset_mode"):
        gym.make_vec("crop_gym/Placement-v0", num_envs=2, autoreset_mode="sometimes")


def test_vector_env_options_equal_sync() -> None:
    _play(
        "crop_gym/Placement-Severe-v0",
        n=3,
        steps=30,
        seed=2,
        privileged=True,
        invalid_action="stop",
        group_identical_jobs=False,
        table_layout=True,
    )


def test_vector_env_reset_mask_and_bad_input() -> None:
    import gymnasium as gym

    vec = gym.make_vec("crop_gym/Placement-v0", num_envs=3)
    obs, _ = vec.reset(seed=0)
    again, info = vec.reset(seed=[5, 6, 7], options={"reset_mask": np.array([False, True, False])})
    assert again["gpus"][0].tobytes() == obs["gpus"][0].tobytes()
    assert info["_F"].tolist() == [False, True, False]
    masks = vec.unwrapped.call("action_masks")  # as SyncVectorEnv.call
    np.testing.assert_array_equal(np.stack(masks), vec.unwrapped.action_masks())
    assert vec.unwrapped.get_attr("max_steps") == (32, 32, 32)
    with pytest.raises(ConfigError, match="reset_mask"):
        vec.reset(options={"reset_mask": np.zeros(3, dtype=bool)})
    with pytest.raises(ConfigError, match="4 seeds for 3"):
        vec.reset(seed=[1, 2, 3, 4])
    with pytest.raises(ConfigError, match="actions of shape"):
        vec.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="num_envs"):
        gym.make_vec("crop_gym/Placement-v0", num_envs=0)
    with pytest.raises(ConfigError, match="does not render"):
        gym.make_vec("crop_gym/Placement-v0", num_envs=2, render_mode="ansi")
    vec.close()


@pytest.mark.parametrize("scenario", ["default-severe", "pollux-16x4", "testbed-8"])
def test_facts_over_regions_equal_each_alone(scenario: str) -> None:
    states = _states(scenario, 5, seed=8)
    topo = states[0].topology
    G = topo.num_gpus
    union = _joined(states)
    sets = generate(union.conditions, union.free_mask, [[1, 2, 3, 4, 6]] * len(states), 8)
    keys = [[key for cs in per for key in cs.keys] for per in sets]
    keys[1] = keys[1] + keys[1][:2]  # repeats
    # Some sets are in the memo already: the rest are evaluated with the others.
    union.conditions.facts(keys[0][::2])
    got = union.conditions.facts([k for ks in keys for k in ks])
    start = 0
    for r, (st, ks) in enumerate(zip(states, keys, strict=True)):
        want = placement_facts(topo, st.health, [np.array(k) - r * G for k in ks])
        part = got.take(slice(start, start + len(ks)))
        start += len(ks)
        assert part.values.tobytes() == want.values.tobytes()
        node_lo = union.topology.region_node_lo(r)
        local = np.where(part.inter_links > 0, part.inter_links - node_lo, 0)
        W = want.inter_links.shape[1]
        np.testing.assert_array_equal(local[:, :W], want.inter_links)
        assert not local[:, W:].any()  # (root padding of the widest row of all regions)


@pytest.mark.parametrize("scenario", ["default-severe", "fragmented", "n64g8"])
def test_lockstep_draws_are_what_each_generator_draws_alone(scenario: str) -> None:
    sampler = ScenarioSampler(scenario)
    layout = sampler.topology.replicated(5)
    rngs = [np.random.default_rng(s) for s in range(4)]
    together = sampler.draw(rngs, layout=layout, regions=[3, 0, 4, 1])
    for s, draw in enumerate(together):
        rng = np.random.default_rng(s)
        alone = sampler.sample(rng)
        inst = sampler.instance(draw)
        assert inst.queue == alone.queue
        assert inst.state.jobs.keys() == alone.state.jobs.keys()
        for job_id in alone.state.jobs:
            np.testing.assert_array_equal(
                inst.state.placement(job_id), alone.state.placement(job_id)
            )
        for field in ("gpu_slowdown", "gpu_failed", "gpu_fail_prob", "link_fail_prob"):
            np.testing.assert_array_equal(
                getattr(inst.state.health, field), getattr(alone.state.health, field)
            )
        assert inst.state.F == alone.state.F
        # Both generators are left at the same point of their streams.
        assert rngs[s].random() == rng.random()


@settings(max_examples=40, deadline=None)
@given(
    seed=hs.integers(0, 2**31 - 1),
    n=hs.integers(1, 6),
    busy=hs.floats(0.0, 0.95),
    robust=hs.booleans(),
    cap=hs.integers(1, 10),
)
def test_generator_over_regions_property(
    seed: int, n: int, busy: float, robust: bool, cap: int
) -> None:
    """Random health (severe profile) and random busy GPUs on pollux-16x4 and default: the
    regions give each cluster exactly its own candidate sets."""
    rng = np.random.default_rng(seed)
    scenario = ("pollux-16x4", "default-severe")[seed % 2]
    states = _states(scenario, n, seed)
    G = states[0].topology.num_gpus
    frees = [state.free_mask & (rng.random(G) >= busy) for state in states]
    sizes = [rng.integers(1, G + 1, size=rng.integers(0, 5)).tolist() for _ in states]
    union = _joined(states)
    many = generate(union.conditions, np.concatenate(frees), sizes, cap, robust=robust)
    for r, (state, f, ks, got) in enumerate(zip(states, frees, sizes, many, strict=True)):
        alone = candidate_sets(state, ks, robust=robust, max_candidates=cap, free=f)
        for a, b in zip(alone, got, strict=True):
            _same_set(a, b, r * G)


def test_vector_env_first_reset_with_a_mask() -> None:
    import gymnasium as gym

    vec = gym.make_vec("crop_gym/Placement-Testbed8-v0", num_envs=2)
    obs, _ = vec.reset(seed=1, options={"reset_mask": np.array([False, True])})
    assert not obs["gpus"][0].any() and obs["gpus"][1].any()  # the other is still empty
    assert obs["gpus"].shape[0] == 2
