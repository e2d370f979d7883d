"""Replay of the recorded observations of the pre-rebuild builder (tests/fixtures/observations.npz).

Each case holds everything needed to rebuild one state in the current code (topology, true and
observed health, placed jobs and their GPUs, pending jobs, the env's view and builder options) and
the observation the old ``crop_gym.envs.features.ObservationBuilder`` gave for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from helpers import observe, table_of
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable
from crop_gym.envs.observation import ObservationBuilder
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import make_topology

FIXTURE = Path(__file__).parent / "fixtures" / "observations.npz"
HEALTH_FIELDS = (
    "gpu_slowdown",
    "gpu_failed",
    "gpu_fail_prob",
    "link_degradation",
    "link_fail_prob",
)


@dataclass
class Case:
    """One recorded state: its metadata and arrays (``name -> array`` without the case prefix)."""

    meta: dict[str, Any]
    arrays: dict[str, NDArray[Any]]


def load_cases(path: Path | str = FIXTURE) -> Iterator[Case]:
    """The recorded cases, in order."""
    with np.load(path) as data:
        meta = json.loads(bytes(data["meta"]).decode())
        for i, m in enumerate(meta):
            prefix = f"c{i}_"
            arrays = {k[len(prefix) :]: data[k] for k in data.files if k.startswith(prefix)}
            yield Case(m, arrays)


def _health(case: Case, which: str) -> Health:
    return Health(*(case.arrays[f"{which}_{f}"] for f in HEALTH_FIELDS))


def rebuild(case: Case) -> tuple[ClusterState, Health, list[Job]]:
    """The case's state, observed health and pending jobs, in the current code."""
    m = case.meta
    topology = make_topology(m["topology"])
    state = ClusterState(topology, _health(case, "true"), PerfConfig(m["allreduce"], m["overlap"]))
    for job, gpus in m["placed"]:
        state.add(Job(**job), np.asarray(gpus))
    observed = state.health if m["obs_is_true"] else _health(case, "obs")
    return state, observed, [Job(**j) for j in m["pending"]]


def builder_for(case: Case, **overrides: Any) -> ObservationBuilder:
    """The builder the case's environment had."""
    m = case.meta
    kwargs: dict[str, Any] = dict(
        num_slots=m["Q"],
        max_candidates=m["C"],
        queue_size=m["queue_size"],
        max_job_gpus=m["max_job_gpus"],
        privileged=m["privileged"],
        with_candidates=m["with_candidates"],
        gpu_extra=tuple(m["gpu_extra"]),
    )
    kwargs.update(overrides)
    topology = make_topology(m["topology"])
    return ObservationBuilder(topology, PerfConfig(m["allreduce"], m["overlap"]), **kwargs)


def table_for(state: ClusterState, pending: list[Job], meta: dict[str, Any]) -> ActionTable:
    """The action table of a rebuilt case, with the case's view options."""
    return table_of(
        state,
        pending,
        num_slots=meta["Q"],
        max_candidates=meta["C"],
        robust=meta["robust"],
        group_identical=meta["group_identical"],
    )


def replay(
    case: Case,
) -> tuple[dict[str, NDArray[np.float32]], dict[str, NDArray[Any]], NDArray[Any], NDArray[Any]]:
    """``(new observation, recorded observation, recorded mask, new mask)`` of a case."""
    m = case.meta
    state, observed, pending = rebuild(case)
    table = table_for(state, pending, m)
    obs = observe(
        builder_for(case),
        state,
        observed,
        pending,
        table,
        m["step"],
        m["max_steps"],
        extra=case.arrays.get("extra"),
    )
    old = {k: case.arrays[f"o_{k}"] for k in m["keys"]}
    return obs, old, case.arrays["mask"], np.asarray(table.mask)
