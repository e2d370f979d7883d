"""Policies that act through the online environments' action interface (``OnlinePlacement-*``).

Each policy is a callable ``policy(env) -> action`` that reads the unwrapped environment's public
state (its simulator ``sim``, its action table ``table``) and answers one action of the current
step. They are the references of the headroom table (docs/BENCHMARK.md):

* ``random``: a uniformly drawn valid action, wait included;
* ``fifo-first-fit``: the oldest job that fits, on its candidate with the lowest-numbered GPUs
  (health-blind, the FIFO-with-backfilling of today's schedulers);
* ``crop``: CROP's first placement on the jobs in the view (:func:`crop_gym.baselines.crop.crop_greedy`,
  the same candidates and robustness as the environment), wait when CROP places nothing;
* ``sjf-crop``: the job with the least remaining work (at the ideal speed) first, on the row of
  the largest ΔF among its candidates — a shortest-job-first order CROP does not know.

:func:`play` runs one episode and returns its mean JCT (time in system until completion or the
horizon) and what was decided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from crop_gym.baselines.crop import crop_greedy

__all__ = ["ONLINE_POLICIES", "Episode", "make_online_policy", "play"]

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


def _sjf_crop(env: Any) -> int:
    table = env.table
    if not table.has_placement:
        return _wait(env)
    sim = env.sim
    work = [sim.remaining_work(j.job_id) * sim.state.ideal_time(j) for j in table.jobs]
    return _best_row(env, int(np.argmin(work)))


#: Policy names → factories ``(rng) -> policy``.
ONLINE_POLICIES: dict[str, Callable[[np.random.Generator], OnlinePolicy]] = {
    "random": _random,
    "fifo-first-fit": lambda rng: _fifo_first_fit,
    "crop": lambda rng: _crop,
    "sjf-crop": lambda rng: _sjf_crop,
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
