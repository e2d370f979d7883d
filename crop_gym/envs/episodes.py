"""Static placement episodes: ``N`` episodes of one scenario, held as one state over ``N`` regions.

:class:`StaticEpisodes` is the engine of the static environments. Episode ``i`` lives in region
``i`` of one :class:`~crop_gym.model.state.ClusterState` over ``N`` copies of the scenario's cluster
(:meth:`~crop_gym.model.topology.Topology.replicated`; for ``N = 1``, the cluster itself). No job
crosses regions, so each episode is exactly its cluster alone (tests/test_locality.py), while every
step of all episodes is one candidate generation, one facts look-up, one gains evaluation, one
state update and one observation pass:

* :meth:`StaticEpisodes.start` draws the new instances of the episodes that start (one lockstep
  draw, :meth:`~crop_gym.scenario.ScenarioSampler.draw`) and writes them straight into the state:
  their regions are cleared, their health written, their background jobs placed;
* :meth:`StaticEpisodes.rebuild` builds the action tables of the episodes whose state changed
  (:func:`~crop_gym.envs.actions.build_action_tables`);
* :meth:`StaticEpisodes.place` applies one placement per episode, all in one
  :meth:`~crop_gym.model.state.ClusterState.place`;
* :meth:`StaticEpisodes.observe` and :meth:`StaticEpisodes.info` read the state and the tables.

:class:`~crop_gym.envs.placement.PlacementEnv` is the batch of one; the batched environment
(:class:`~crop_gym.envs.vector.PlacementVectorEnv`) runs the same code on ``N`` episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable, PendingQueue, build_action_tables
from crop_gym.envs.observation import ObservationBuilder, ObservedHealth
from crop_gym.envs.rewards import placement_terms
from crop_gym.errors import ConfigError
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import PlacementFacts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState, RegionMetrics
from crop_gym.scenario import Draw, PlacementInstance, ScenarioSampler

__all__ = ["Placed", "StaticEpisodes"]


@dataclass(frozen=True)
class Placed:
    """One placement applied by :meth:`StaticEpisodes.place`.

    Attributes:
        job_id: The job placed (its id in its episode's queue).
        gpus: Its GPUs, in the cluster's own numbering.
        terms: The reward terms (:func:`~crop_gym.envs.rewards.placement_terms`).
    """

    job_id: str
    gpus: NDArray[np.int32]
    terms: dict[str, float]


def _renamed(job: Job, job_id: str) -> Job:
    """``job`` under another id (an episode's jobs are named ``region:id`` in the shared state)."""
    return job.unchecked(job_id=job_id)


def joined_health(parts: Sequence[Health]) -> Health:
    """The health of a replicated topology from one health per region (per-GPU arrays
    concatenated; per-node arrays after the joining root's entry, which carries no link)."""
    return Health(
        np.concatenate([h.gpu_slowdown for h in parts]),
        np.concatenate([h.gpu_failed for h in parts]),
        np.concatenate([h.gpu_fail_prob for h in parts]),
        np.concatenate([np.ones(1)] + [h.link_degradation for h in parts]),
        np.concatenate([np.zeros(1)] + [h.link_fail_prob for h in parts]),
    )


class StaticEpisodes:
    """``n`` static placement episodes of one scenario as one state over ``n`` regions.

    Args:
        sampler: The scenario's sampler.
        n: Number of episodes.
        features: The observation builder (of one episode's cluster).
        table_options: The keyword arguments of
            :func:`~crop_gym.envs.actions.build_action_tables` (view size, candidates,
            robustness, grouping, interference).

    Attributes:
        sampler, scenario: The scenario and its sampler.
        topology: One episode's cluster.
        state: The state of every episode (region ``i`` is episode ``i``).
        queues: Each episode's pending queue.
        tables: Each episode's action table (``None`` before its first :meth:`rebuild`).
        draws: Each episode's instance, as drawn (``None`` before its first :meth:`start`).
        health: Each episode's true device health.
        observed: Each episode's observed device health.
        steps: ``int64[n]`` steps taken in each episode.
        started: ``int64[n]`` episodes started in each region so far (an episode's number).
        initial_F: ``float64[n]`` F of each episode at its start.
        placed: Per episode, ``(job id, GPUs)`` of the jobs placed so far, in order.
    """

    def __init__(
        self,
        sampler: ScenarioSampler,
        n: int,
        features: ObservationBuilder,
        table_options: dict[str, Any],
    ) -> None:
        self.sampler = sampler
        self.scenario = sampler.scenario
        self.topology = sampler.topology
        self.n = n
        self.features = features
        self.table_options = dict(table_options)
        layout = self.topology if n == 1 else self.topology.replicated(n)
        self.state = ClusterState(layout, perf=self.scenario.perf)
        empty = PendingQueue.of(self.state, ())
        self.queues: list[PendingQueue] = [empty] * n
        self.tables: list[ActionTable | None] = [None] * n
        self.draws: list[Draw | None] = [None] * n
        self.health: list[Health] = [Health.healthy(self.topology)] * n
        self.observed: list[Health] = list(self.health)
        self.steps = np.zeros(n, dtype=np.int64)
        self.started = np.zeros(n, dtype=np.int64)
        self.initial_F = np.zeros(n)
        self.placed: list[list[tuple[str, NDArray[np.int32]]]] = [[] for _ in range(n)]
        self._seen = ObservedHealth.of(self.state.conditions)

    # ------------------------------------------------------------------ episodes
    def start(
        self,
        which: Sequence[int],
        rngs: Sequence[np.random.Generator],
        instances: Sequence[PlacementInstance | None] | None = None,
    ) -> None:
        """Start new episodes in regions ``which``: a given instance (``instances[j]``) or one
        drawn from ``rngs[j]`` (all drawn in lockstep), written into the state; then the observed
        health of each, drawn from its generator. The caller then calls :meth:`rebuild`."""
        which = list(which)
        if not which:
            return
        given = list(instances) if instances is not None else [None] * len(which)
        todo = [j for j, inst in enumerate(given) if inst is None]
        drawn = self.sampler.draw(
            [rngs[j] for j in todo], layout=self.state.topology, regions=[which[j] for j in todo]
        )
        draws: list[Draw] = []
        it = iter(drawn)
        for inst in given:
            draws.append(next(it) if inst is None else _draw_of(inst))
        G = self.topology.num_gpus
        self.state.clear(which)
        for r, d in zip(which, draws, strict=True):
            self.draws[r] = d
            self.health[r] = d.health
        self.state.set_health(self._joined(self.health))
        jobs: list[Job] = []
        gpus: list[NDArray[np.int32]] = []
        for r, d in zip(which, draws, strict=True):
            if self.n == 1:
                jobs += d.background
                gpus += d.placements
            else:
                jobs += [_renamed(j, f"{r}:{j.job_id}") for j in d.background]
                gpus += [p + np.int32(r * G) for p in d.placements]
        self.state.place(jobs, gpus, checked=True)
        noise = self.scenario.observation_noise
        F = self.state.region_F
        for j, (r, d) in enumerate(zip(which, draws, strict=True)):
            self.queues[r] = PendingQueue.of(self.state, d.queue)
            self.placed[r] = []
            self.steps[r] = 0
            self.started[r] += 1
            self.initial_F[r] = F[r]
            self.observed[r] = d.health.observe(rngs[j], noise)
        cond = self.state.conditions
        if any(o is not h for o, h in zip(self.observed, self.health, strict=True)):
            seen = Conditions(self.state.topology, self._joined(self.observed))
            self._seen = ObservedHealth.of(seen, true=cond)
        else:
            self._seen = ObservedHealth.of(cond)

    def _joined(self, parts: list[Health]) -> Health:
        return parts[0] if self.n == 1 else joined_health(parts)

    def rebuild(self, which: Sequence[int]) -> None:
        """Build the action tables of episodes ``which`` (for their current states), together."""
        if not len(which):
            return
        queues: list[PendingQueue | None] = [None] * self.n
        for r in which:
            queues[r] = self.queues[r]
        for r, table in enumerate(build_action_tables(self.state, queues, **self.table_options)):
            if table is not None:
                self.tables[r] = table

    def place(self, rows: Sequence[tuple[int, int]]) -> list[Placed]:
        """Place, for each ``(episode, row)``, that row of the episode's action table (one
        placement per episode), all in one state update; the jobs leave their queues.

        Returns:
            One :class:`Placed` per pair, in order.
        """
        if not rows:
            return []
        jobs, gpus, idx = [], [], []
        G = self.topology.num_gpus
        facts, const = [], []
        for r, row in rows:
            table = self.tables[r]
            assert table is not None
            q, c = int(table.row_slot[row]), int(table.row_cand[row])
            job = table.jobs[q]
            jobs.append(job if self.n == 1 else _renamed(job, f"{r}:{job.job_id}"))
            gpus.append(table.gpus(q, c))
            idx.append(q)
            facts.append(table.facts.take(row))
            const.append(table.const[q : q + 1])
        all_facts = PlacementFacts.concat(facts)
        all_const = const[0] if len(const) == 1 else np.concatenate(const)
        delta = self.state.place(jobs, gpus, all_facts, checked=True, const=all_const)
        out = []
        for (r, row), q, p in zip(rows, idx, gpus, strict=True):
            table = self.tables[r]
            assert table is not None
            own = float(table.gains.own[row])
            job_id = table.jobs[q].job_id
            self.queues[r] = self.queues[r].without(table.positions[q])
            local = p if self.n == 1 else p - np.int32(r * G)
            self.placed[r].append((job_id, local))
            out.append(Placed(job_id, local, placement_terms(own, float(delta[r]))))
        return out

    # ------------------------------------------------------------------ reading
    def observe(
        self,
        which: Sequence[int],
        metrics: RegionMetrics | None = None,
        *,
        max_steps: int,
        extra: NDArray[Any] | None = None,
    ) -> dict[str, NDArray[np.float32]]:
        """The observations of episodes ``which`` (a leading axis of one row each)."""
        tables = [self.tables[r] for r in which]
        if any(t is None for t in tables):
            raise ConfigError("observe: an episode has no action table yet (call rebuild)")
        return self.features.build(
            self.state,
            self._seen,
            tables,  # type: ignore[arg-type]
            [self.queues[r] for r in which],
            [int(self.steps[r]) for r in which],
            max_steps,
            metrics,
            extra=extra,
        )

    def info(self, r: int, mask: NDArray[np.bool_], metrics: RegionMetrics) -> dict[str, Any]:
        """The ``info`` entries every static environment gives for episode ``r`` (``mask`` is
        copied); the metrics are read from the state (:meth:`ClusterState.region_metrics`)."""
        return {
            "action_mask": mask.copy(),
            "F": float(metrics.F[r]),
            "F_start": float(self.initial_F[r]),
            "pending": len(self.queues[r]),
            "metrics": {
                "jobs_placed": int(metrics.jobs_placed[r]),
                "gpus_busy": int(metrics.gpus_busy[r]),
                "utilization": float(metrics.utilization[r]),
                "comm_overhead": float(metrics.comm_overhead[r]),
            },
        }

    def instance(self, r: int) -> PlacementInstance:
        """Episode ``r``'s instance as it started (a new state: a copy of nothing the episodes
        hold)."""
        d = self.draws[r]
        if d is None:
            raise ConfigError("instance: the episode has not started")
        return self.sampler.instance(d)


def _draw_of(inst: PlacementInstance) -> Draw:
    """A given instance as a :class:`~crop_gym.scenario.Draw` (its state's health and jobs)."""
    st = inst.state
    jobs = st.placed_jobs()
    return Draw(
        health=st.health,
        background=tuple(jobs),
        placements=tuple(st.placement(j.job_id) for j in jobs),
        queue=tuple(inst.queue),
    )
