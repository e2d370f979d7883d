"""Policies that act through the online environments' action interface (``OnlinePlacement-*``).

Each policy is a callable ``policy(env) -> action`` that reads the unwrapped environment's public
state (its simulator ``sim``, its action table ``table``) and answers one action of the current
step. They are the references of the headroom table (docs/BENCHMARK.md):

* ``random``: a uniformly drawn valid action, wait included;
* ``fifo-first-fit``: the oldest job that fits, on its candidate with the lowest-numbered GPUs
  (health-blind, the FIFO-with-backfilling of today's schedulers);
* ``crop``: CROP's first placement on the jobs in the view (:func:`crop_gym.baselines.crop.crop_greedy`,
  the same candidates and robustness as the environment), wait when CROP places nothing;
* the JCT schedulers' orders, each with CROP's placement (the row of the largest ΔF among the
  chosen job's candidates), on the placeable jobs of the view (ties: the older job):

  - ``sjf-crop``: the least remaining work (iterations left × ideal iteration time) first — a
    shortest-job-first order CROP does not know;
  - ``srsf-crop``: the least remaining work × GPUs first (shortest remaining service first);
  - ``las-crop``: the least attained service first (Tiresias-like: GPU-seconds run so far,
    :meth:`crop_gym.sim.Simulator.attained_service_s`; a job not yet started has 0);
  - ``fifo-backfill-crop``: the oldest queued job first; if it does not fit now, the next one
    that fits (backfilling).

:data:`JCT_HEURISTICS` names these four: ``crop-gym eval`` reports the best of them on every
window set (``best_heuristic``).

* ``srsf-crop-rollout`` (:data:`ROLLOUT_POLICIES`, :func:`rollout_policy`): one step of lookahead
  on srsf-crop, the best heuristic of the v2 tasks (:mod:`crop_gym.baselines.online_rollout`):
  srsf-crop's action, the next placements in its order and *wait* are each completed by
  srsf-crop on a copy of the environment, and the lowest mean JCT wins. It sees the window's
  future arrivals and health (an expert and a teacher, not a deployable scheduler), is never
  worse than srsf-crop on a window, and costs tens of completions per decision.

:func:`play` runs one episode and returns its mean JCT (time in system until completion or the
horizon) and what was decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.online_rollout import OnlineRollout
from crop_gym.model.jobs import Job

__all__ = [
    "JCT_HEURISTICS",
    "ONLINE_POLICIES",
    "ROLLOUT_POLICIES",
    "Episode",
    "jct_priority",
    "make_online_policy",
    "play",
    "rollout_policy",
]

OnlinePolicy = Callable[[Any], int]


def _wait(env: Any) -> int:
    return int(env.table.stop_action)


def _random(rng: np.random.Generator) -> OnlinePolicy:
    def act(env: Any) -> int:
        return int(rng.choice(np.flatnonzero(env.action_masks())))

    return act


def _fifo_first_fit(env: Any) -> int:
    table = env.table
    if not table.has_placement:
        return _wait(env)
    gpus = [tuple(np.sort(g).tolist()) for g in table.sets[0].gpus]
    return int(min(range(len(gpus)), key=gpus.__getitem__))


def _crop(env: Any) -> int:
    table = env.table
    if not table.has_placement:
        return _wait(env)
    plan = crop_greedy(
        env.sim.state,
        list(table.jobs),
        robust=env.robust_candidates,
        max_candidates=env.max_candidates,
        max_rounds=None,
    ).placements
    if not plan:
        return _wait(env)
    a = env.action_for(plan[0].job_id, plan[0].gpus)
    return _best_row(env, None) if a is None else int(a)


def _best_row(env: Any, slot: int | None) -> int:
    """The row of the largest ΔF (of slot ``slot``, or of any slot)."""
    table = env.table
    rows = (
        np.arange(len(table.row_slot)) if slot is None else np.flatnonzero(table.row_slot == slot)
    )
    g = table.gains
    # ΔF in full: an environment that does not observe the interference did not evaluate it.
    total = (
        g.total if g.interference is not None else g.own + env.sim.state.interference(table.facts)
    )
    r = rows[int(np.argmax(total[rows]))]
    return int(table.row_action[r])


def _remaining_s(sim: Any, job: Job) -> float:
    """Remaining run time of ``job`` at its ideal speed (iterations left × ideal iteration time)."""
    return float(sim.remaining_work(job.job_id) * sim.state.ideal_time(job))


def _queue_positions(sim: Any, jobs: Sequence[Job]) -> list[float]:
    """Each job's position in the queue (oldest first)."""
    order = {j.job_id: i for i, j in enumerate(sim.queue)}
    return [float(order[j.job_id]) for j in jobs]


#: The JCT orders (name → ``(sim, jobs) -> priorities``, lowest first) of :func:`jct_priority`.
_PRIORITIES: dict[str, Callable[[Any, Sequence[Job]], list[float]]] = {
    "sjf-crop": lambda sim, jobs: [_remaining_s(sim, j) for j in jobs],
    "srsf-crop": lambda sim, jobs: [_remaining_s(sim, j) * j.num_gpus for j in jobs],
    "las-crop": lambda sim, jobs: [float(sim.attained_service_s(j.job_id)) for j in jobs],
    "fifo-backfill-crop": _queue_positions,
}

#: The online JCT heuristics, each with CROP's placement (the best of them is reported).
JCT_HEURISTICS: tuple[str, ...] = tuple(_PRIORITIES)


def jct_priority(name: str, sim: Any, jobs: Sequence[Job]) -> list[float]:
    """The priorities of ``jobs`` (queued jobs of ``sim``) under heuristic ``name``; lowest first.

    Raises:
        KeyError: For a name not in :data:`JCT_HEURISTICS`.
    """
    if name not in _PRIORITIES:
        raise KeyError(f"unknown JCT heuristic {name!r}; heuristics: {', '.join(JCT_HEURISTICS)}")
    return _PRIORITIES[name](sim, jobs)


def _ordered_crop(name: str) -> OnlinePolicy:
    """The view job first in ``name``'s order (ties: the earlier slot, the older job), on its row
    of the largest ΔF; wait when nothing is placeable."""

    def act(env: Any) -> int:
        table = env.table
        if not table.has_placement:
            return _wait(env)
        return _best_row(env, int(np.argmin(jct_priority(name, env.sim, table.jobs))))

    return act


def _ranked_rows(name: str) -> Callable[[Any], list[int]]:
    """``env -> actions``: every placeable view job in ``name``'s order (ties: the earlier slot),
    each on its row of the largest ΔF (the placements a rollout on ``name`` tries)."""

    def rank(env: Any) -> list[int]:
        table = env.table
        if not table.has_placement:
            return []
        prio = jct_priority(name, env.sim, table.jobs)
        order = sorted(range(len(table.jobs)), key=lambda q: (prio[q], q))
        return [_best_row(env, q) for q in order if np.any(table.row_slot == q)]

    return rank


def rollout_policy(
    base: str = "srsf-crop", *, top: int = 3, consider_wait: bool = True, depth: int | None = None
) -> OnlineRollout:
    """Rollout on the JCT heuristic ``base`` (:class:`~crop_gym.baselines.online_rollout.OnlineRollout`):
    its own action, the next ``top`` view jobs in its order (each on its row of the largest ΔF)
    and *wait* are tried, each completed by ``base``.

    Raises:
        KeyError: For a ``base`` not in :data:`JCT_HEURISTICS`.
    """
    if base not in _PRIORITIES:
        raise KeyError(f"unknown JCT heuristic {base!r}; heuristics: {', '.join(JCT_HEURISTICS)}")
    return OnlineRollout(
        _ordered_crop(base), _ranked_rows(base), top=top, consider_wait=consider_wait, depth=depth
    )


#: Rollout policies (name → base heuristic): one-step lookahead on the best JCT heuristic of the
#: v2 tasks (docs/BENCHMARK.md), clairvoyant about arrivals and health (an expert, a teacher).
ROLLOUT_POLICIES: dict[str, str] = {"srsf-crop-rollout": "srsf-crop"}

#: Policy names → factories ``(rng) -> policy``.
ONLINE_POLICIES: dict[str, Callable[[np.random.Generator], OnlinePolicy]] = {
    "random": _random,
    "fifo-first-fit": lambda rng: _fifo_first_fit,
    "crop": lambda rng: _crop,
    **{name: (lambda rng, name=name: _ordered_crop(name)) for name in JCT_HEURISTICS},  # type: ignore[misc]
    **{
        name: (lambda rng, base=base: rollout_policy(base))  # type: ignore[misc]
        for name, base in ROLLOUT_POLICIES.items()
    },
}


def make_online_policy(name: str, rng: np.random.Generator | None = None) -> OnlinePolicy:
    """An online policy by name (:data:`ONLINE_POLICIES`).

    Raises:
        KeyError: For an unknown name (the message lists the known ones).
    """
    if name not in ONLINE_POLICIES:
        raise KeyError(f"unknown online policy {name!r}; policies: {', '.join(ONLINE_POLICIES)}")
    return ONLINE_POLICIES[name](rng if rng is not None else np.random.default_rng(0))


def epsilon(policy: OnlinePolicy, eps: float, rng: np.random.Generator) -> OnlinePolicy:
    """``policy``, but a uniformly drawn valid action with probability ``eps``."""
    rand = _random(rng)

    def act(env: Any) -> int:
        return rand(env) if rng.random() < eps else policy(env)

    return act


@dataclass(frozen=True)
class Episode:
    """One played episode.

    Attributes:
        mean_jct_h: Mean time in system of the window's jobs (completion or horizon), hours.
        decisions: Steps at which at least one placement was valid.
        multi: Steps at which jobs of two or more view slots were placeable.
        completed: Jobs completed.
        jobs: Jobs of the window.
        lower_bound_h: Hindsight lower bound of ``mean_jct_h``: each job's remaining work at its
            ideal speed, capped at the time left to the horizon after its arrival.
    """

    mean_jct_h: float
    decisions: int
    multi: int
    completed: int
    jobs: int
    lower_bound_h: float


def play(env: gym.Env[Any, Any], policy: OnlinePolicy, seed: int) -> Episode:
    """Play one episode of an online environment from ``reset(seed=seed)``."""
    from crop_gym.model.timing import ideal_time

    env.reset(seed=seed)
    u: Any = env.unwrapped
    sim = u.sim
    horizon = float(sim.config.max_time_s)
    lb = float(
        np.mean(
            [
                min(
                    j.iterations * ideal_time(sim.topology, j, sim.config.perf), horizon - j.arrival
                )
                for j in sim.jobs
            ]
        )
    )
    decisions = multi = 0
    info: dict[str, Any] = {}
    done = False
    while not done:
        n_view = len(u.table.jobs)
        decisions += int(n_view > 0)
        multi += int(n_view > 1)
        _, _, term, trunc, info = env.step(policy(u))
        done = bool(term or trunc)
    ledger = sim.ledger  # per-job arrival and finish (NaN while unfinished)
    end = np.where(np.isnan(ledger.finish), sim.now, ledger.finish)
    in_system = np.maximum(end - ledger.arrival, 0.0)
    return Episode(
        mean_jct_h=float(in_system.mean()) / 3600.0,
        decisions=decisions,
        multi=multi,
        completed=int(info["completed"]),
        jobs=len(sim.jobs),
        lower_bound_h=lb / 3600.0,
    )
