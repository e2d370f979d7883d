"""Rollout on a JCT heuristic in the online environments: the online analogue of ``crop-rollout``.

At each decision of an online environment (``OnlinePlacement-*``: start one view job on one of
its candidate GPU sets now, or *wait* until the next event) :class:`OnlineRollout` tries a few
candidate actions on copies of the environment (:meth:`crop_gym.envs.online.OnlinePlacementEnv.copy`)
and completes the episode from each with a *base policy*, here one of the JCT heuristics of
:mod:`crop_gym.baselines.online`; it takes the action whose completion has the lowest mean JCT.
This is the rollout algorithm of approximate dynamic programming (Bertsekas, *Rollout, Policy
Iteration, and Distributed Reinforcement Learning*, 2020, ch. 2) with one-step lookahead.

**Candidates**, in this order: the base policy's own action; then, for the view jobs in the
candidate order (:attr:`OnlineRollout.candidates`, by default the base heuristic's priority order,
each job on its row of the largest ΔF), the first ``top`` distinct placements; then *wait*
(``consider_wait``). Ties keep the earlier candidate, so the rollout deviates from the base policy
only where a candidate is strictly better.

**What the lookahead knows.** A copy continues the same episode with the same future: the
window's remaining arrivals and the device-health timeline (both independent of the actions) are
in the copied simulator. The rollout is therefore *clairvoyant* about arrivals and health: it is
an expert that measures which schedules are reachable (every JCT it reports is that of a schedule
actually played), and a teacher whose choices a policy can only partly infer from its
observation. It is not a bound.

**Guarantee** (cost improvement, Bertsekas 2020, Prop. 2.3.1): with full completions
(``depth=None``) the rollout's mean JCT on a window is at most the base policy's on that window.
It holds here because (1) the system is deterministic given the copied random state, so a
completion's mean JCT is exactly what following the base policy from there gives; (2) the base
policies of :mod:`crop_gym.baselines.online` are functions of the current state only, so the base
policy run from the state after its own first action continues that same run (sequential
consistency); and (3) the base action is always a candidate and wins ties. With ``depth`` set (a
truncated horizon) the guarantee does not hold: completions stop after ``depth`` steps and the
jobs still in the system are charged their remaining ideal run time (a lower bound of their
remaining time in the system), so the comparison is a heuristic one.

Cost: every decision at which a placement is valid plays up to ``top + 2`` completions, each a
copy of the environment played to the end (or for ``depth`` steps) by the base policy; decisions
at which only *wait* is valid cost nothing. ``scripts/online_rollout_headroom.py`` measures it
(docs/BENCHMARK.md, Online tasks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from crop_gym.errors import check_range
from crop_gym.sim.ledger import QUEUED, RUNNING

__all__ = ["OnlineRollout", "RolloutStats"]

#: A policy of the online environments: the unwrapped env in, an action out.
OnlinePolicy = Callable[[Any], int]

#: Absolute tolerance (hours of mean JCT) below which two completions tie.
TIE_TOL_H = 1e-9


@dataclass
class RolloutStats:
    """What an :class:`OnlineRollout` did since it was made (or since :meth:`OnlineRollout.reset_stats`).

    Attributes:
        decisions: Calls at which a placement was valid (completions were played).
        completions: Completions played.
        deviations: Decisions at which the chosen action was not the base policy's.
        waits_chosen: Deviations that chose *wait*.
        seconds: Wall-clock seconds spent in the calls.
    """

    decisions: int = 0
    completions: int = 0
    deviations: int = 0
    waits_chosen: int = 0
    seconds: float = 0.0


class OnlineRollout:
    """One-step lookahead on a base policy of an online environment (module docstring).

    Args:
        base: The base policy (``env -> action``, a function of the env's current state only for
            the guarantee to hold).
        candidates: ``env -> actions``: placements worth trying, best first (the first ``top``
            distinct ones that are not the base action are tried).
        top: Placements tried besides the base action (>= 0).
        consider_wait: Also try *wait* (leave every job queued until the next event).
        depth: Steps of each completion (``None``: to the end of the episode, the default and the
            only setting with the guarantee); then the unfinished jobs are charged their remaining
            ideal run time.
    """

    def __init__(
        self,
        base: OnlinePolicy,
        candidates: Callable[[Any], Sequence[int]],
        *,
        top: int = 3,
        consider_wait: bool = True,
        depth: int | None = None,
    ) -> None:
        check_range("top", top, 0)
        if depth is not None:
            check_range("depth", depth, 1)
        self.base = base
        self.candidates = candidates
        self.top = int(top)
        self.consider_wait = bool(consider_wait)
        self.depth = None if depth is None else int(depth)
        self.stats = RolloutStats()

    def reset_stats(self) -> None:
        """Start counting :attr:`stats` afresh."""
        self.stats = RolloutStats()

    def tried(self, env: Any) -> list[int]:
        """The actions tried in ``env``'s current state, in tie-breaking order (base first)."""
        table = env.table
        first = int(self.base(env))
        out = [first]
        for a in self.candidates(env):
            if len(out) > self.top:
                break
            if int(a) not in out and int(a) != table.stop_action:
                out.append(int(a))
        if self.consider_wait and table.stop_action not in out:
            out.append(int(table.stop_action))
        return out

    def completion_h(self, env: Any, action: int) -> float:
        """Mean JCT (hours) after taking ``action`` in a copy of ``env`` and the base policy
        completing the episode (or ``depth`` steps of it, the unfinished jobs then charged their
        remaining ideal run time)."""
        sim_env = env.copy()
        _, _, term, trunc, _ = sim_env.step(action)
        steps = 0
        while not (term or trunc) and (self.depth is None or steps < self.depth):
            _, _, term, trunc, _ = sim_env.step(self.base(sim_env))
            steps += 1
        cost = float(sim_env.mean_jct_h())
        if not (term or trunc):
            cost += _remaining_ideal_h(sim_env.sim) / len(sim_env.sim.jobs)
        return cost

    def values(self, env: Any) -> dict[int, float]:
        """Each tried action's completion mean JCT (hours), in :meth:`tried` order."""
        return {a: self.completion_h(env, a) for a in self.tried(env)}

    def __call__(self, env: Any) -> int:
        """The rollout's action in the unwrapped online environment ``env``'s current state."""
        table = env.table
        if not table.has_placement:
            return int(table.stop_action)
        t0 = time.perf_counter()
        values = self.values(env)
        order = list(values)
        best = order[0]
        for a in order[1:]:
            if values[a] < values[best] - TIE_TOL_H:
                best = a
        s = self.stats
        s.decisions += 1
        s.completions += len(order)
        if best != order[0]:
            s.deviations += 1
            s.waits_chosen += int(best == table.stop_action)
        s.seconds += time.perf_counter() - t0
        return int(best)


def _remaining_ideal_h(sim: Any) -> float:
    """Σ over the jobs in the system (queued or running) of their remaining ideal run time, hours."""
    led = sim.ledger
    live = np.flatnonzero((led.status == QUEUED) | (led.status == RUNNING))
    return float(sum(sim.remaining_work(sim.jobs[i].job_id) * led.tstar[i] for i in live)) / 3600.0
