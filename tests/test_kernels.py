"""The compiled kernels equal their numpy references, bit for bit.

Every computation that :mod:`crop_gym.model.kernels` dispatches to a compiled kernel is run twice
from the same inputs, once on the compiled path and once under ``kernels.backend("numpy")`` (the
reference), and the outputs are compared with ``np.array_equal`` (NaN positions included, dtypes
equal): the candidate generator, the placement-facts kernel, the action tables (every field of
:class:`~crop_gym.envs.actions.ActionTable`), the observation (every key), the cluster state
(:meth:`ClusterState.place`, gains, region metrics, F) and whole episodes of every registered
environment ID (observations, rewards, infos and masks of random masked play).

Inputs: random trees (one to three switch levels, 1–8 GPUs per server, heterogeneous server
speeds), replicated into up to three regions with their own health (none, mild or severe profile
plus random failed GPUs), random free masks, sizes, caps and ``robust`` on and off.

Each side builds its own state from the same recipe, so no memo filled on one path is read on the
other. The module is skipped without numba. The first run on a machine compiles the kernels
(30–60 s, cached in ``__pycache__`` afterwards).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

pytest.importorskip("numba")

import gymnasium as gym

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs.actions import ActionTable, PendingQueue, build_action_tables
from crop_gym.envs.episodes import joined_health
from crop_gym.envs.observation import ObservationBuilder, ObservedHealth
from crop_gym.envs.registration import ENV_IDS
from crop_gym.model import kernels
from crop_gym.model.candidates import generate
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import padded_rows
from crop_gym.model.hardware import get_hardware, resolve_hardware
from crop_gym.model.health import Health, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import JOB_COLUMNS, job_constants
from crop_gym.model.topology import Topology, build_tree, default_link_params, make_topology

MODELS = ("bert", "deepspeech2", "inception3", "resnet50", "vgg16")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Fewer examples where one builds two whole states (the runtime stays under a minute).
HEAVY = settings(SETTINGS, max_examples=12)


# ---------------------------------------------------------------------------- the two paths
@contextmanager
def _path(name: str) -> Iterator[None]:
    """The compiled path (``"numba"``) or the reference (``"numpy"``), forced."""
    with kernels.backend(name):
        assert kernels.enabled() is (name == "numba")
        yield


def _both(make: Callable[[], Any]) -> tuple[Any, Any]:
    """``make()`` on the compiled path, then on the reference."""
    with _path("numba"):
        fast = make()
    with _path("numpy"):
        ref = make()
    return fast, ref


def same(a: Any, b: Any, where: str = "") -> None:
    """Bit-for-bit equality of nested results: arrays (dtype, shape, values, NaN positions),
    dataclasses field by field, dicts, sequences, floats (NaN equals NaN) and other scalars."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        nan = a.dtype.kind in "fc"
        assert np.array_equal(a, b, equal_nan=nan), f"{where}: values differ\n{a}\n{b}"
        if nan:  # the same bits, signed zeros included
            assert a.tobytes() == b.tobytes(), f"{where}: bits differ"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, Job):
        assert a == b, f"{where}: {a} != {b}"
    elif hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b), where
        for f in fields(a):
            if not f.name.startswith("_"):  # (private fields are lazy caches of public ones)
                same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        ), f"{where}: {a!r} != {b!r}"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def test_backend_forces_a_path_and_restores_it() -> None:
    before = kernels.enabled()
    with kernels.backend("numpy"):
        assert not kernels.enabled()
        with kernels.backend("numba"):
            assert kernels.enabled()
        assert not kernels.enabled()
    assert kernels.enabled() is before
    with pytest.raises(ValueError, match="must be one of numpy, numba"), kernels.backend("cuda"):
        pass
    assert kernels.enabled() is before


# ---------------------------------------------------------------------------- random inputs
def _topology(rng: np.random.Generator) -> Topology:
    """A random tree: 0–2 switch levels above the servers' switch, 1–8 GPUs per server, and
    (sometimes) servers at two speeds."""
    lp = default_link_params()
    switches = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
    servers, gpus = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    fanouts = [*switches, servers, gpus]
    n_srv = int(np.prod(fanouts[:-1]))
    up = [lp["inter_bandwidth"] * float(rng.uniform(0.5, 4.0)) for _ in switches]
    speeds = rng.choice([0.5, 1.0], size=n_srv).tolist() if rng.random() < 0.3 else None
    return build_tree(
        fanouts,
        [*up, lp["inter_bandwidth"], lp["intra_bandwidth"]],
        server_speeds=speeds,
        name="random",
    )


def _health(topo: Topology, rng: np.random.Generator) -> Health:
    """One region's health: a profile's draw and a few more failed GPUs."""
    h = get_profile(str(rng.choice(["none", "mild", "severe"]))).sample(topo, rng)
    if rng.random() < 0.3:
        failed = h.gpu_failed | (rng.random(topo.num_gpus) < 0.1)
        h = h.replace(gpu_failed=failed)
    return h


def _cluster(seed: int) -> tuple[Topology, Health, int]:
    """A random cluster of 1–3 regions (each with its own health) and its regions."""
    rng = np.random.default_rng(seed)
    base = _topology(rng)
    n = int(rng.integers(1, 4))
    topo = base if n == 1 else base.replicated(n)
    parts = [_health(base, rng) for _ in range(n)]
    health = parts[0] if n == 1 else joined_health(parts)
    return topo, health, n


def _jobs(rng: np.random.Generator, n: int, kmax: int, prefix: str) -> list[Job]:
    out = []
    for i in range(n):
        k = int(rng.integers(1, kmax + 1))
        model = str(rng.choice(MODELS))
        w = float(rng.choice([1.0, 1.0, 2.0, 0.5]))
        out.append(Job(f"{prefix}{i}", model, k, 32 * k, weight=w))
    return out


def _populated(seed: int, log: list[Any] | None = None) -> ClusterState:
    """A state of :func:`_cluster` with random jobs placed (in single and batched calls, on
    random candidates) and some removed; ``log`` gets each call's ΔF."""
    topo, health, R = _cluster(seed)
    rng = np.random.default_rng(seed + 1)
    state = ClusterState(topo, health)
    Gr = topo.region_gpus
    n = 0
    for _ in range(int(rng.integers(1, 6))):
        free = state.free_mask
        jobs, gpus = [], []
        taken = np.zeros(topo.num_gpus, dtype=bool)
        for r in rng.permutation(R).tolist()[: int(rng.integers(1, R + 1))]:
            (job,) = _jobs(rng, 1, max(1, min(Gr // 2, 16)), f"j{n}-")
            n += 1
            sizes = [[job.num_gpus] if q == r else [] for q in range(R)]
            cs = generate(state.conditions, free & ~taken, sizes, 4)[r][0]
            if not len(cs):
                continue
            g = cs.gpus[int(rng.integers(len(cs)))]
            jobs.append(job)
            gpus.append(g)
            taken[g] = True
        if jobs:
            dF = state.place(jobs, gpus)
            if log is not None:
                log.append(dF)
        placed = state.placed_jobs()
        if placed and rng.random() < 0.3:
            gone = placed[int(rng.integers(len(placed)))]
            dF = state.remove(gone.job_id)
            if log is not None:
                log.append(dF)
    return state


def _snapshot(state: ClusterState) -> dict[str, Any]:
    """Everything the state computes: its slot table, loads, owners, F and region metrics."""
    p = state.placed
    return {
        "active": p.active,
        "data": p.data,
        "links": p.links,
        "first_gpu": p.first_gpu,
        "load": state.link_load,
        "owner": state.gpu_owner,
        "F": state.F,
        "region_F": state.region_F,
        "metrics": state.region_metrics(),
        "records": {j: state.job_record(j) for j in state.jobs},
    }


# ---------------------------------------------------------------------------- the generator
@SETTINGS
@given(
    seed=hs.integers(0, 2**31 - 1),
    busy=hs.floats(0.0, 0.95),
    cap=hs.integers(1, 12),
    robust=hs.booleans(),
)
def test_generator_compiled_equals_reference(
    seed: int, busy: float, cap: int, robust: bool
) -> None:
    topo, health, R = _cluster(seed)
    cond = Conditions(topo, health)
    rng = np.random.default_rng(seed + 7)
    free = cond.usable & (rng.random(topo.num_gpus) >= busy)
    Gr = topo.region_gpus
    sizes = [rng.integers(1, Gr + 1, size=rng.integers(0, 6)).tolist() for _ in range(R)]
    fast = generate(cond, free, sizes, cap, robust=robust, backend="numba")
    ref = generate(cond, free, sizes, cap, robust=robust, backend="numpy")
    same(fast, ref, "generate")


@pytest.mark.parametrize("preset", ["n64g8", "n128g8", "fattree-4096"])
def test_generator_on_large_clusters(preset: str) -> None:
    """Clusters of 512 to 4,096 GPUs under severe health (compact rows of more than 128 GPUs take
    the pairwise sum's branch of halves)."""
    topo = make_topology(preset)
    rng = np.random.default_rng(3)
    cond = Conditions(topo, get_profile("severe").sample(topo, rng))
    G = topo.num_gpus
    sizes = [[k for k in (1, 2, 3, 8, 9, 64, 130, 200, 257, 1000) if k <= G]]
    for busy in (0.0, 0.3, 0.8):
        free = cond.usable & (rng.random(G) >= busy)
        for robust in (True, False):
            same(
                generate(cond, free, sizes, 8, robust=robust, backend="numba"),
                generate(cond, free, sizes, 8, robust=robust, backend="numpy"),
                f"{preset} busy={busy} robust={robust}",
            )


# ---------------------------------------------------------------------------- the facts kernel
@SETTINGS
@given(seed=hs.integers(0, 2**31 - 1), rows=hs.integers(1, 40))
def test_facts_compiled_equals_reference(seed: int, rows: int) -> None:
    topo, health, R = _cluster(seed)
    cond = Conditions(topo, health)
    rng = np.random.default_rng(seed + 3)
    Gr = topo.region_gpus
    keys = []
    for _ in range(rows):
        r = int(rng.integers(R))
        k = int(rng.integers(1, Gr + 1))
        g = np.sort(rng.choice(Gr, size=k, replace=False)) + r * Gr
        keys.append(tuple(g.tolist()))
    P, k = padded_rows(keys)
    fast = cond.facts_of_rows(P, k, backend="numba")
    ref = cond.facts_of_rows(P, k, backend="numpy")
    same(fast, ref, "facts")


# ---------------------------------------------------------------------------- the cluster state
@HEAVY
@given(seed=hs.integers(0, 2**31 - 1))
def test_state_place_gains_metrics_compiled_equal_reference(seed: int) -> None:
    def run() -> dict[str, Any]:
        log: list[Any] = []
        state = _populated(seed, log)
        out = _snapshot(state)
        out["dF"] = log
        # Gains of random placements on free GPUs, with and without the interference.
        rng = np.random.default_rng(seed + 5)
        topo = state.topology
        Gr, R = topo.region_gpus, topo.regions
        keys, jobs = [], []
        for i in range(8):
            r = int(rng.integers(R))
            free = np.flatnonzero(state.free_mask[r * Gr : (r + 1) * Gr])
            if not len(free):
                continue
            k = int(rng.integers(1, len(free) + 1))
            keys.append(tuple((np.sort(rng.choice(free, k, replace=False)) + r * Gr).tolist()))
            jobs.append(_jobs(rng, 1, 1, f"g{i}-")[0].unchecked(num_gpus=k, batch_size=32 * k))
        if keys:
            facts = state.conditions.facts(keys)
            const = job_constants(topo, state.perf, jobs)
            out["gains"] = state.gains(const, facts)
            out["gains_own"] = state.gains(const, facts, interference=False)
            out["facts_for"] = state.facts_for(list(keys[0]))
            out["gain_job"] = state.gains(jobs[0], state.facts_for(list(keys[0])))
        out["evaluate"] = state.evaluate()
        out["after_evaluate"] = _snapshot(state)
        if R > 1:
            state.clear([0])
            out["after_clear"] = _snapshot(state)
        return out

    fast, ref = _both(run)
    same(fast, ref, "state")


def _sharing_hardware() -> Any:
    """The azure-v100 profile (whose terms the compiled kernels run) with compute sharing κ and
    its saturation κ_max per model, some saturating, some not, one model left to the cluster-wide
    values; resolved from a file as a user's profile is."""
    data = get_hardware("azure-v100").to_mapping()
    data["compute_sharing"], data["compute_saturation"] = 0.05, 0.2
    data["model_compute_sharing"] = {"bert": 0.3, "vgg16": 0.01, "resnet50": 0.5}
    data["model_compute_saturation"] = {"bert": 0.9, "vgg16": 5.0, "resnet50": 0.0}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "sharing.json"
        path.write_text(json.dumps(data))
        return resolve_hardware(str(path))


@SETTINGS
@given(seed=hs.integers(0, 2**31 - 1))
def test_state_with_compute_saturation_compiled_equals_reference(seed: int) -> None:
    # The κ_max column (JOB_COLUMNS) reaches the compiled times as it does the numpy ones.
    hw = _sharing_hardware()
    topo, perf = hw.topology("leafspine-64"), hw.perf()

    def run() -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        state = ClusterState(topo, Health.healthy(topo), perf=perf)
        free = np.ones(topo.num_gpus, dtype=bool)
        jobs, gpus = [], []
        for i in range(int(rng.integers(1, 6))):
            (job,) = _jobs(rng, 1, 8, f"s{i}-")
            if free.sum() < job.num_gpus:
                break
            g = np.sort(rng.choice(np.flatnonzero(free), job.num_gpus, replace=False))
            free[g] = False
            jobs.append(job)
            gpus.append(g)
        const = job_constants(topo, state.perf, jobs)
        facts = state.conditions.facts([tuple(g.tolist()) for g in gpus])
        out = {"const": const, "models": [j.model for j in jobs]}
        out["gains"] = state.gains(const, facts)
        out["dF"] = state.place(jobs, gpus)
        out.update(_snapshot(state))
        return out

    fast, ref = _both(run)
    same(fast, ref, "state with compute saturation")
    col = JOB_COLUMNS.index("compute_saturation")
    want = [{"bert": 0.9, "vgg16": 5.0, "resnet50": 0.0}.get(m, 0.2) for m in ref["models"]]
    assert ref["const"][:, col].tolist() == want


# ---------------------------------------------------------------------------- action tables
def _queues(state: ClusterState, seed: int) -> list[PendingQueue | None]:
    rng = np.random.default_rng(seed + 11)
    R, Gr = state.topology.regions, state.topology.region_gpus
    out: list[PendingQueue | None] = []
    for r in range(R):
        if R > 1 and rng.random() < 0.2:
            out.append(None)
            continue
        jobs = _jobs(rng, int(rng.integers(0, 12)), max(1, min(Gr, 24)), f"q{r}-")
        if jobs and rng.random() < 0.5:  # identical jobs (they share a view slot)
            jobs += [jobs[0].unchecked(job_id=f"q{r}-dup{i}") for i in range(3)]
        queue = PendingQueue.of(state, jobs)
        if len(queue) > 1 and rng.random() < 0.5:
            queue = queue.without(int(rng.integers(len(queue))))
        out.append(queue)
    return out


@HEAVY
@given(
    seed=hs.integers(0, 2**31 - 1),
    Q=hs.integers(1, 10),
    C=hs.integers(1, 10),
    robust=hs.booleans(),
    group=hs.booleans(),
    interference=hs.booleans(),
)
def test_action_tables_compiled_equal_reference(
    seed: int, Q: int, C: int, robust: bool, group: bool, interference: bool
) -> None:
    opts = {
        "num_slots": Q,
        "max_candidates": C,
        "robust": robust,
        "group_identical": group,
        "interference": interference,
    }

    def run() -> list[ActionTable | None]:
        state = _populated(seed)
        return build_action_tables(state, _queues(state, seed), **opts)

    fast, ref = _both(run)
    same(fast, ref, "tables")
    for table in ref:
        if table is not None:
            assert [f.name for f in fields(table)] == [f.name for f in fields(ActionTable)]


# ---------------------------------------------------------------------------- the observation
@HEAVY
@given(
    seed=hs.integers(0, 2**31 - 1),
    Q=hs.integers(1, 8),
    C=hs.integers(1, 8),
    noisy=hs.booleans(),
    privileged=hs.booleans(),
    extra=hs.booleans(),
)
def test_observation_compiled_equals_reference(
    seed: int, Q: int, C: int, noisy: bool, privileged: bool, extra: bool
) -> None:
    def run() -> dict[str, Any]:
        state = _populated(seed)
        regions = state.topology.regions
        # Tables of some regions (in the state's order), their queues.
        qs = _queues(state, seed)
        pairs = [(r, q) for r, q in enumerate(qs) if q is not None] or [
            (0, PendingQueue.of(state, []))
        ]
        pending: list[PendingQueue | None] = [None] * regions
        for r, q in pairs:
            pending[r] = q
        tables = [
            t
            for t in build_action_tables(
                state, pending, num_slots=Q, max_candidates=C, interference=privileged
            )
            if t is not None
        ]
        topo = state.topology.region_topology
        builder = ObservationBuilder(
            topo,
            state.perf,
            num_slots=Q,
            max_candidates=C,
            queue_size=16,
            max_job_gpus=16,
            privileged=privileged,
            gpu_extra=("extra",) if extra else (),
        )
        cond = state.conditions
        if noisy:
            seen_health = state.health.observe(np.random.default_rng(seed + 2), 0.2)
            seen = ObservedHealth.of(Conditions(state.topology, seen_health), true=cond)
        else:
            seen = ObservedHealth.of(cond)
        n = len(tables)
        x = (
            np.random.default_rng(seed).random((n, topo.num_gpus, 1)).astype(np.float32)
            if extra
            else None
        )
        rng = np.random.default_rng(seed + 9)
        steps = rng.integers(0, 30, size=n).tolist()
        return builder.build(state, seen, tables, [q for _, q in pairs], steps, 30, extra=x)

    fast, ref = _both(run)
    same(fast, ref, "observation")


# ---------------------------------------------------------------------------- whole episodes
def _play(env_id: str, steps: int = 40, seed: int = 0) -> list[Any]:
    """``steps`` random masked steps (uniform over the valid actions), resets included: every
    observation, reward, flag, info and mask."""
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out: list[Any] = [("reset", obs, info)]
    for _ in range(steps):
        mask = np.asarray(info["action_mask"])
        a = int(rng.choice(np.flatnonzero(mask)))
        obs, reward, term, trunc, info = env.step(a)
        out.append(("step", a, obs, float(reward), term, trunc, info))
        out.append(("mask", np.asarray(env.unwrapped.action_masks())))
        if term or trunc:
            obs, info = env.reset()
            out.append(("reset", obs, info))
    env.close()
    return out


@pytest.mark.filterwarnings("ignore:.*is out of date:DeprecationWarning")
@pytest.mark.parametrize("env_id", list(ENV_IDS))
def test_episode_compiled_equals_reference(env_id: str) -> None:
    fast, ref = _both(lambda: _play(env_id))
    same(fast, ref, env_id)


def test_vector_env_compiled_equals_reference() -> None:
    def run() -> list[Any]:
        vec = gym.make_vec(
            "crop_gym/Placement-v0", num_envs=3, vectorization_mode="vector_entry_point"
        )
        rng = np.random.default_rng(1)
        obs, info = vec.reset(seed=1)
        out: list[Any] = [obs, info]
        for _ in range(30):
            masks = np.asarray(vec.unwrapped.action_masks())
            acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            step = vec.step(acts)
            out.append(step)
        vec.close()
        return out

    fast, ref = _both(run)
    same(fast, ref, "vector")
