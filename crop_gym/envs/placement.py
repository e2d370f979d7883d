"""The static placement environment, candidate mode (the CROP problem as an MDP), and its step:
:func:`candidate_steps` steps any number of episodes of a
:class:`~crop_gym.envs.episodes.StaticEpisodes` engine at once (the single environment is the batch
of one; the batched environment, :mod:`crop_gym.envs.vector`, runs the same function)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, SupportsFloat

import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.actions import action_space
from crop_gym.envs.base import Obs, StaticPlacementBase
from crop_gym.envs.episodes import StaticEpisodes
from crop_gym.envs.observation import ObservationBuilder
from crop_gym.envs.rewards import NO_TERMS, total
from crop_gym.model.state import RegionMetrics
from crop_gym.scenario import Scenario, with_hardware

__all__ = ["PlacementEnv", "StepOutcome", "candidate_steps"]


@dataclass(frozen=True)
class StepOutcome:
    """What :func:`candidate_steps` did to each episode it stepped (one element each).

    Attributes:
        terms: The reward terms (:func:`~crop_gym.envs.rewards.placement_terms`; 0 when nothing
            was placed).
        invalid: Whether the action was invalid.
        placed: The job id placed, or ``None``.
        terminated: ``bool[n]``.
        truncated: ``bool[n]``.
    """

    terms: list[dict[str, float]]
    invalid: list[bool]
    placed: list[str | None]
    terminated: NDArray[np.bool_]
    truncated: NDArray[np.bool_]

    @property
    def rewards(self) -> NDArray[np.float64]:
        """``float64[n]``: each step's reward (the sum of its terms, ΔF)."""
        return np.array([total(t) for t in self.terms])


def candidate_steps(
    episodes: StaticEpisodes,
    which: Sequence[int],
    actions: Sequence[Any],
    *,
    invalid_action: str,
    max_steps: int,
) -> StepOutcome:
    """One candidate-mode step of each episode of ``which`` (``actions[j]`` for ``which[j]``): the
    valid placements are applied together, then the tables of the episodes that changed are
    rebuilt together (the specification is :class:`PlacementEnv`'s)."""
    n = len(which)
    rows: list[tuple[int, int]] = []
    stopped = np.zeros(n, dtype=bool)
    invalid = [False] * n
    at: dict[int, int] = {}
    for j, (r, action) in enumerate(zip(which, actions, strict=True)):
        episodes.steps[r] += 1
        table = episodes.tables[r]
        assert table is not None
        row = table.row(action)
        if row is not None:
            at[r] = j
            rows.append((r, row))
        elif table.is_stop(action):
            stopped[j] = True
        else:
            invalid[j] = True
            stopped[j] = invalid_action == "stop"
    terms: list[dict[str, float]] = [dict(NO_TERMS) for _ in range(n)]
    placed: list[str | None] = [None] * n
    changed = [r for r, _ in rows]
    for (r, _), p in zip(rows, episodes.place(rows), strict=True):
        terms[at[r]], placed[at[r]] = p.terms, p.job_id
    episodes.rebuild(changed)
    terminated = stopped.copy()
    for r in changed:
        table = episodes.tables[r]
        assert table is not None
        terminated[at[r]] = not table.has_placement
    steps = episodes.steps[np.asarray(which, dtype=np.int64)]
    truncated = ~terminated & (steps >= max_steps)
    return StepOutcome(terms, invalid, placed, terminated, truncated)


class PlacementEnv(StaticPlacementBase):
    """Static multi-job placement, one (job, candidate placement) pair per step.

    Each episode is one static placement problem drawn from a scenario: a cluster (topology, abnormal
    devices, background jobs already running) and a queue of ``K`` pending jobs. At every step the
    agent places one pending job on one of its candidate placements — the compact GPU sets CROP
    considers, from :func:`crop_gym.model.candidates.candidate_sets` — or stops. The reward is the
    change of the objective F (expected effective GPUs, docs/MODEL.md §1.7), so the undiscounted return is
    ``F(end) - F(start)``, the same number CROP, the baselines and the exact optimum report.

    **Action space** ``Discrete(Q * C + 1)``. The *view* is the first ``Q`` pending jobs, in queue
    order, that have at least one candidate now (jobs too big for the free GPUs are skipped and stay
    pending). Jobs identical for the objective (same model, size, batch and weight) share one view
    slot, held by the earliest of them — they have the same candidates and gains, so nothing is lost
    and the view reaches further down long queues (``group_identical_jobs=False`` gives every job
    its own slot). Each slot has ``C`` rows, one per candidate, padded. Action ``a = q * C + c``
    places view job ``q`` on its candidate ``c``; action ``Q * C`` is **stop**.
    ``Q = min(K, queue_view)``, ``C = max_candidates``. After a placement the job leaves the queue
    and the view and candidates are rebuilt for the new state (:attr:`table`, an
    :class:`~crop_gym.envs.actions.ActionTable` per state; :meth:`action_for` finds the action of a
    given job and GPU set).

    **Action mask** ``action_masks()`` (used by sb3-contrib's ``MaskablePPO``) and
    ``info["action_mask"]``: ``bool[Q * C + 1]``; a row is valid when its view slot holds a job
    and the job has that many candidates. Stop is always valid, so the mask is never empty.

    **Invalid actions** (masked, out of range, or not one integer: floats with a fraction, NaN,
    strings, ``None``, arrays of several elements, and booleans — ``True`` is not action 1) never
    raise. With ``invalid_action="noop"`` (default) the state is unchanged, the reward is 0, the
    step counts toward the step cap and ``info["invalid_action"]`` is ``True``; with ``"stop"`` the
    episode also terminates, as if stop had been chosen. An integral float such as ``3.0`` is
    action 3.

    **Observation** ``Dict`` of ``float32`` boxes, every value in ``[0, 1]`` (SB3
    ``MultiInputPolicy`` ready; columns in :mod:`crop_gym.envs.observation` and docs/ENVS.md). The
    tables below are flattened row-major to 1-D (``obs["candidates"].reshape(Q * C, 17)`` recovers
    the rows) unless ``table_layout=True``:

    * ``"gpus"`` ``(G, 10)``: free, busy, failed, slowness ``1 - 1/σ``, failure probability π,
      relative speed, server-uplink load and degradation, η and size of the job holding it;
    * ``"candidates"`` ``(Q * C, 17)``: valid flag, job size, gradient size, compute time, servers,
      spread, switches, share of slow / failure-prone GPUs, slowdown, survival, estimated η under
      the current contention, η·survival, contention, bottleneck bandwidth, view position, weight;
    * ``"queue"`` ``(Q, 8)``: per view slot: present, size, gradient size, compute time, weight,
      number of candidates, best estimated η, identical pending copies;
    * ``"summary"`` ``(10,)``: pending and hidden jobs, pending GPUs, free GPUs, F, utilisation,
      communication overhead, failed and abnormal GPU shares, elapsed share of the step cap;
    * ``"gain"`` ``(Q * C,)`` in ``[-1, 1]``, only with ``privileged=True``: the exact ΔF of each
      row divided by the largest job size (this is what a greedy expert maximises).

    Device features come from the scenario's health signal: the true state when
    ``observation_noise`` is 0, otherwise a noisy reading drawn once per episode
    (:meth:`Health.observe`); rewards always use the true state.

    **Reward** ``ΔF`` of the placement (0 for stop and invalid actions), in GPU units; it can be
    negative when the new job slows running ones more than it adds. ``info["reward_terms"]``
    splits it into ``own_value`` (the new job's value ``w·k·η·s``) and ``interference`` (the change
    of the other jobs' values), which sum to the reward (:mod:`crop_gym.envs.rewards`; both are read
    from the action table's gains of the chosen row).

    **Episode end**: *terminated* on stop, on an invalid action under ``invalid_action="stop"``,
    when no pending job has a candidate left (including an empty queue); *truncated*
    after ``max_steps`` steps. An instance with nothing placeable starts with only stop valid. After
    the end, ``step`` raises :class:`gymnasium.error.ResetNeeded` until ``reset`` is called.

    **Info** (reset and step): ``action_mask``, ``F`` (current objective), ``F_start``,
    ``metrics`` (jobs placed, busy GPUs, utilisation, communication overhead), ``pending`` (jobs
    left), and on steps ``invalid_action``, ``reward_terms`` and ``placed`` (the job id placed, or
    ``None``).

    **Arguments**:
        scenario: A :class:`~crop_gym.scenario.Scenario`, a built-in scenario name (see
            ``crop_gym.scenario.SCENARIOS``) or a scenario file. Default ``"default"``.
        privileged: Add the exact marginal gains ``"gain"`` to the observation (the action table
            evaluates them for every state anyway).
        queue_view: Largest view size ``Q``, an integer >= 1 (default 64; capped at the queue size
            ``K``).
        max_candidates: Candidates per job ``C``, an integer >= 1 (default: the scenario's
            ``max_candidates``, as CROP).
        robust_candidates: Let device health steer candidate choice (CROP's default). ``False`` is the
            "without robustness" ablation.
        group_identical_jobs: Identical pending jobs share a view slot (default ``True``).
        max_steps: Step cap, an integer >= 1 (default ``2 * K``; a run of valid actions never
            reaches it).
        table_layout: Return the tables ``"gpus"``, ``"candidates"`` and ``"queue"`` as 2-D
            ``(rows, columns)`` arrays (for custom per-row policies) instead of row-major 1-D
            vectors (default; what SB3's checker and ``MultiInputPolicy`` expect).
        invalid_action: ``"noop"`` or ``"stop"`` (see above).
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        hardware: Hardware spec replacing the scenario's (:attr:`Scenario.hardware`); ``None``:
            the scenario's.

    **Reset options**: ``{"instance": PlacementInstance}`` plays a given instance (its state is
    copied) instead of sampling one, e.g. to compare with CROP on the same problem. Other keys are
    refused (:class:`~crop_gym.errors.ConfigError`), as are non-integer or boolean ``queue_view``,
    ``max_candidates`` and ``max_steps``.

    **Version history**:
        v0: Initial version.
        v0 (core rebuild): ``step`` after the end raises ``ResetNeeded`` (it used to return a
        reward and ``terminated=False``); booleans are invalid actions (``True`` used to be action
        1); non-integer counts (``queue_view=2.5`` used to become 2) and unknown reset options are
        refused. Rewards, masks and observations are unchanged.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path = "default",
        *,
        privileged: bool = False,
        queue_view: int | None = None,
        max_candidates: int | None = None,
        robust_candidates: bool = True,
        group_identical_jobs: bool = True,
        max_steps: int | None = None,
        invalid_action: Literal["noop", "stop"] = "noop",
        table_layout: bool = False,
        render_mode: str | None = None,
        hardware: str | None = None,
    ) -> None:
        super().__init__(
            with_hardware(scenario, hardware),
            queue_view=queue_view,
            max_candidates=max_candidates,
            robust_candidates=robust_candidates,
            group_identical_jobs=group_identical_jobs,
            invalid_action=invalid_action,
            render_mode=render_mode,
        )
        sc = self.scenario
        self.max_steps = self._check_max_steps(max_steps, 2 * sc.queue_size)
        self.privileged = bool(privileged)
        self.features = ObservationBuilder(
            self.topology,
            sc.perf,
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            queue_size=sc.queue_size,
            max_job_gpus=sc.job_size_limit,
            privileged=self.privileged,
            table_layout=table_layout,
        )
        self.action_space = action_space(self.queue_view, self.max_candidates)
        self.observation_space = self.features.observation_space  # type: ignore[assignment]
        self._start_engine()

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on a new instance (or on ``options["instance"]``)."""
        self._start_episode(seed, options)
        m = self.state.region_metrics()
        return self._observe(metrics=m), self._info(m)

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Place one (job, candidate) pair, or stop."""
        self._guard.check()
        out = candidate_steps(
            self.episodes,
            [0],
            [action],
            invalid_action=self.invalid_action,
            max_steps=self.max_steps,
        )
        terminated, truncated = bool(out.terminated[0]), bool(out.truncated[0])
        self._guard.end_if(terminated, truncated)
        m = self.state.region_metrics()
        obs = self._observe(metrics=m)
        info = self._info(m)
        info["invalid_action"] = out.invalid[0]
        info["reward_terms"] = out.terms[0]
        info["placed"] = out.placed[0]
        return obs, total(out.terms[0]), terminated, truncated, info

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[Q * C + 1]`` (sb3-contrib's ``MaskablePPO`` calls this)."""
        return self.table.mask.copy()

    def action_for(
        self, job_id: str, gpus: NDArray[np.integer[Any]], job: Any = None
    ) -> int | None:
        """The action placing ``job_id`` on exactly ``gpus`` now, or ``None`` if it is not offered.

        With ``job`` given, a view job identical to it (same model, size, batch and weight) also
        matches (see :meth:`ActionTable.index_of`).
        """
        return self.table.index_of(job_id, gpus, job)

    def equal_gain_actions(self, action: Any, rtol: float = 1e-9) -> NDArray[np.bool_]:
        """``bool[Q * C + 1]``: the actions that place ``action``'s job with the same ΔF as
        ``action`` now, the interference with the placed jobs included (evaluated here for every
        row when the table was built without it); stop or an invalid action: itself alone
        (:meth:`ActionTable.equal_gain_actions`)."""
        t = self.table
        gain = t.gains.own + (
            self.state.interference(t.facts)
            if t.gains.interference is None
            else t.gains.interference
        )
        return t.equal_gain_actions(action, gain, rtol)

    def _info(self, metrics: RegionMetrics | None = None) -> dict[str, Any]:
        return self._base_info(self.table.mask, metrics)

    # ---------------------------------------------------------------- render
    def _header(self) -> list[str]:
        view = ", ".join(f"{j.job_id}:{j.model}x{j.num_gpus}" for j in self.table.jobs[:8])
        more = len(self.pending) - min(len(self.pending), 8)
        return [
            self._status_line(),
            f"pending {len(self.pending)}: {view}{f' (+{more})' if more > 0 else ''}",
        ]
