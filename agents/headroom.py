"""The headroom table: how far each registered task leaves CROP from a bound (docs/BENCHMARK.md).

``python -m crop_gym.agents.headroom`` (``--fast`` for 2 seeds and 2 rollouts) measures, for every
registered ``crop_gym/`` ID, on held-out seeds (``reset(seed=s)``, ``s = 10^9, 10^9 + 1, ...``,
the seeds ``crop-gym eval`` uses; training draws seeds below ``10^6``):

* **static IDs** (``Placement*``; GPU-mode IDs share their scenario's row): mean F of a random
  valid action at every step (stop only when nothing else is valid), of the best heuristic
  (the best mean F among :data:`HEURISTICS` and *row-greedy*, the valid row of the largest
  ``w·k·η·s``, which the observation hands over), of CROP, of the shipped checkpoint where one
  applies (``--learned``: the first named checkpoint trained on that ID, else the last one:
  ``default-severe`` on ``Placement-Severe-v0``, ``default`` elsewhere), and a bound: the exact
  optimum (:func:`crop_gym.baselines.exact.optimum` over every placement) where the instance is
  within the solver's limits, else the least of the proven upper bounds of
  :func:`crop_gym.baselines.bounds.best_bound` (the GPU-sharing MILP and the knapsack bound).
  CROP's gap is ``1 - F_CROP / bound`` (mean over seeds) and, in gain terms,
  ``1 - (F_CROP - F_0) / (bound - F_0)``. Where the queue has at most ``--search-max-jobs``
  jobs, two more answers: ``crop-rollout`` (the shipped teacher,
  :class:`~crop_gym.baselines.rollout_expert.CropRolloutExpert`, ``top=12``; candidate-mode IDs)
  and a budgeted search (:func:`crop_gym.baselines.search.rollout_search` with lookahead
  ``--search-depth``, and the candidate space's optimum where it is small enough); on every
  instance, the sharing program's own answer (:attr:`~crop_gym.baselines.bounds.BoundResult.answer`)
  completed by CROP. Per instance, the best F of all of them is the *best achieved*; :class:`Reach` holds its gap to
  the bound (with a 95 % bootstrap interval), the instances within 5 % of it, and the headroom
  over the better of CROP and the best heuristic;
* **online IDs** (``OnlinePlacement*``): mean JCT (time in system until completion or the
  horizon, hours; lower is better) of ``random``, the best heuristic (``fifo-first-fit``,
  ``sjf-crop``), CROP (:mod:`crop_gym.baselines.online`), and two references: the best of ``rollouts``
  seeded ε-perturbed (ε = 0.1) rollouts of CROP and sjf-crop and of the lookahead per window
  (achieved, not a bound), and a proven hindsight lower bound (each job's work at its ideal
  speed, capped at the horizon); the *lookahead* column is one step of lookahead on the best JCT
  heuristic of the row (:func:`crop_gym.baselines.online.rollout_policy`, ``--lookahead-top``
  placements tried besides the base's, and *wait*; clairvoyant about arrivals and health, never
  worse than its base on a window), with its ratio to the best heuristic (95 % paired bootstrap
  over the windows) and its seconds per window;
  the learned column is the shipped online checkpoint (``--learned-online``, default
  ``default-online``) on the ID it was trained on.

``--ids ID ...`` measures those rows only and merges them into the existing ``headroom.json``
(the other rows are kept as they were).

It writes ``BENCHMARK.md``, ``headroom.json`` and ``headroom.csv`` into ``--out`` (default
``docs/`` for the table, ``docs/results/`` for the data).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.agents.config import EVAL_SEED_BASE
from crop_gym.agents.stats import mean_ci, ratio_bootstrap
from crop_gym.baselines.bounds import best_bound
from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.exact import EXACT_LIMITS, branch_and_bound, optimum, search_space
from crop_gym.baselines.online import (
    JCT_HEURISTICS,
    epsilon,
    make_online_policy,
    play,
    rollout_policy,
)
from crop_gym.baselines.rollout_expert import CropRolloutExpert
from crop_gym.baselines.search import rollout_search
from crop_gym.envs.actions import PendingQueue, build_action_tables
from crop_gym.envs.registration import ENV_IDS, with_split
from crop_gym.errors import ConfigError, CropGymError
from crop_gym.io import atomic_write
from crop_gym.model.state import ClusterState
from crop_gym.policy import apply, make_policy
from crop_gym.scenario import PlacementInstance, ScenarioSampler, get_scenario

__all__ = ["HELD_OUT_SEED", "HEURISTICS", "Reach", "Row", "headroom", "main", "render_markdown"]

#: First held-out seed (the seeds of ``crop-gym eval``).
HELD_OUT_SEED = EVAL_SEED_BASE
#: Heuristics of the static tasks' best-heuristic column (row-greedy is added).
HEURISTICS = ("random", "first-fit", "best-fit", "spread", "hived", "comm-greedy")
#: Heuristics of the online tasks' best-heuristic column.
ONLINE_HEURISTICS = ("fifo-first-fit", *JCT_HEURISTICS)


@dataclass
class Row:
    """One task's line of the table (static: mean F, higher is better; online: mean JCT in hours,
    lower is better)."""

    env_id: str
    kind: str  # "static" or "online"
    metric: str
    seeds: int
    random: float
    best_heuristic: float
    best_heuristic_name: str
    crop: float
    learned: float | None
    bound: float
    bound_kind: str
    crop_gap: float  # static: 1 - CROP / bound; online: CROP / bound - 1 (bound = best rollout)
    extra: dict[str, float] = field(default_factory=dict)
    learned_name: str | None = None  # the checkpoint of the learned column
    reach: Reach | None = None  # static: the best achieved F and its distance to the bound
    lookahead_base: str | None = None  # online: the base heuristic of the lookahead column


@dataclass
class Reach:
    """How close the best known answers come to the bound, per static task (means over seeds;
    intervals: 95 % percentile bootstrap over the seeds, :func:`crop_gym.agents.stats.mean_ci`).

    Attributes:
        crop_rollout: Mean F of ``crop-rollout`` (CROP with one step of lookahead, ``top=12``, the
            shipped teacher), ``None`` where it was not run.
        search: Mean F of the budgeted search (:func:`crop_gym.baselines.search.rollout_search`
            with lookahead ``depth``, and the exact optimum over the candidate space where
            :data:`~crop_gym.baselines.exact.EXACT_LIMITS` allow it).
        best: Mean of the best F achieved per instance by any method of the row (the columns,
            the exact optimum where known, and the sharing program's answer completed by CROP).
        best_by: How many instances each method achieved the best F on (ties to each).
        gap: Mean of ``1 - best / bound``.
        gap_ci: Its interval.
        gap_max: The largest ``1 - best / bound``.
        within_5pct: Instances whose bound is within 5 % of the best F (``bound <= 1.05 best``)
            or exact.
        exact: Instances whose bound is the exact optimum.
        proven_optimal: Instances whose best F is proven optimal: the exact optimum, or equal to
            the bound (relative difference at most 1e-5).
        violations: Instances whose bound came out below an achieved F by more than 1e-6
            relative (a solver fault: the bound is proven; the table then uses the achieved F).
        reference: The better of CROP and the best heuristic by mean F (the heuristic to beat).
        headroom_achieved: Mean of ``best / F_reference - 1`` (headroom shown to exist).
        headroom_achieved_ci: Its interval.
        headroom_bound: Mean of ``bound / F_reference - 1`` (the most headroom there can be).
        headroom_bound_ci: Its interval.
        bound_kinds: Instances per bound kind (:class:`crop_gym.baselines.bounds.BoundResult`).
        missed: ``[seed, 1 - best / bound]`` of each instance not within 5 % (seed: its
            ``reset`` seed).
    """

    crop_rollout: float | None
    search: float | None
    best: float
    best_by: dict[str, int]
    gap: float
    gap_ci: list[float]
    gap_max: float
    within_5pct: int
    exact: int
    proven_optimal: int
    reference: str
    headroom_achieved: float
    headroom_achieved_ci: list[float]
    headroom_bound: float
    headroom_bound_ci: list[float]
    bound_kinds: dict[str, int]
    violations: int = 0
    missed: list[list[float]] = field(default_factory=list)


# ---------------------------------------------------------------------------------- static


def _rollouts(
    env: Any, agent: Any, seeds: Sequence[int], score: Callable[[Any], float]
) -> list[float]:
    """``score(env.unwrapped)`` after one masked episode of ``agent`` per seed."""
    out = []
    for s in seeds:
        obs, _ = env.reset(seed=s)
        done = False
        while not done:
            obs, _, term, trunc, _ = env.step(agent.act(obs, env.unwrapped.action_masks()))
            done = bool(term or trunc)
        out.append(score(env.unwrapped))
    return out


def _rollout_rows(inst: PlacementInstance, pick: Any, C: int) -> float:
    """F after placing, at every step, the row ``pick(table)`` until nothing is placeable."""
    state: ClusterState = inst.state.copy()
    pending = list(inst.queue)
    while True:
        (table,) = build_action_tables(
            state, [PendingQueue.of(state, pending)], num_slots=len(pending) or 1, max_candidates=C
        )
        assert table is not None
        if not table.has_placement:
            return float(state.F)
        r = pick(table)
        q, c = int(table.row_slot[r]), int(table.row_cand[r])
        state.add(table.jobs[q], table.gpus(q, c), facts=table.facts.take(r))
        del pending[table.positions[q]]


def _bound(
    inst: PlacementInstance, time_limit: float, C: int
) -> tuple[float, str, float | None, float | None]:
    """The least valid bound, its kind, the exact optimum where it was reached, and the F of the
    sharing program's answer completed by CROP (an achieved F; ``None`` where there is none).

    The exact optimum over every placement (:func:`~crop_gym.baselines.exact.optimum`) where the
    instance is within :data:`EXACT_LIMITS`, else :func:`~crop_gym.baselines.bounds.best_bound`
    (the GPU-sharing MILP and the knapsack bound).
    """
    try:
        log10, _ = search_space(inst.state, inst.queue, space="all")
        if log10 <= EXACT_LIMITS.log10_all:
            F = float(optimum(inst.state, inst.queue).F)
            return F, "exact", F, None
    except ConfigError:
        pass
    b = best_bound(inst.state, inst.queue, time_limit=time_limit)
    if not b.answer:
        return b.value, b.kind, None, None
    state = inst.state.copy()
    apply(state, b.answer)
    placed = {p.job.job_id for p in b.answer}
    rest = [j for j in inst.queue if j.job_id not in placed]
    done = crop_greedy(state, rest, max_candidates=C).F if rest else state.F
    return b.value, b.kind, None, float(done)


def _search(inst: PlacementInstance, C: int, depth: int) -> float:
    """F of the budgeted search: the pilot method, and the candidate space's optimum where the
    limits allow it (each is an achieved answer, not a bound)."""
    F = rollout_search(inst.state, inst.queue, depth=depth, top=6, max_candidates=C).F
    try:
        cand = branch_and_bound(inst.state, inst.queue, space="candidates", max_candidates=C)
        F = max(F, float(cand.F))
    except ConfigError:
        pass
    return F


def _crop_rollout(env_id: str, seeds: Sequence[int]) -> list[float] | None:
    """F of ``crop-rollout`` (the teacher, ``top=12``) per seed (candidate-mode IDs only)."""
    if not ENV_IDS[env_id][0].endswith(":PlacementEnv"):
        return None
    env = gym.make(env_id)
    expert = CropRolloutExpert(env, top=12)
    out = []
    for s in seeds:
        env.reset(seed=s)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(expert.action())
            done = bool(term or trunc)
        out.append(float(expert.env.state.F))
    return out


def _learned_static(
    env_id: str, seeds: Sequence[int], learned: Sequence[str]
) -> tuple[list[float], str] | None:
    """F of a shipped checkpoint on ``env_id``, and its name (``None`` where none applies).

    The checkpoint is the first of ``learned`` trained on ``env_id`` (its metadata's ``env_id``),
    else the last of ``learned`` (the general static one). The checkpoint modules need the ``rl``
    extra (torch), so they are imported here, on first use.
    """
    if not learned or not ENV_IDS[env_id][0].endswith(":PlacementEnv"):
        return None
    try:
        from crop_gym.agents import checkpoint as ckpt
        from crop_gym.agents import evaluation

        name = next(
            (
                n
                for n in learned
                if ckpt.read_metadata(ckpt.resolve_model_path(n)).get("env_id") == env_id
            ),
            learned[-1],
        )
        model, _ = ckpt.load_checkpoint(name)
        agent = evaluation.PolicyAgent(model)
        env = gym.make(env_id)
        agent.bind(env)
    except (ImportError, CropGymError, ValueError) as exc:
        print(f"headroom: no learned column for {env_id}: {exc}", file=sys.stderr)
        return None
    return _rollouts(env, agent, seeds, lambda e: float(e.state.F)), name


def static_row(
    env_id: str,
    seeds: Sequence[int],
    learned: Sequence[str],
    *,
    search_depth: int = 2,
    search_max_jobs: int = 32,
    time_limit: float = 10.0,
) -> Row:
    """The static task's row (see the module docstring).

    Args:
        env_id: A static ID.
        seeds: Held-out seeds.
        learned: Checkpoints of the learned column (:func:`_learned_static`).
        search_depth: Lookahead of the budgeted search (1 or 2).
        search_max_jobs: Instances with more pending jobs get no crop-rollout or search column.
        time_limit: HiGHS' time limit per bound, seconds.
    """
    kwargs = ENV_IDS[env_id][1]
    scenario = get_scenario(kwargs.get("scenario", "default"))
    if kwargs.get("hardware") is not None:  # as the env does with its hardware= argument
        scenario = scenario.replace(hardware=kwargs["hardware"])
    sampler = ScenarioSampler(scenario)
    C = sampler.scenario.max_candidates
    per: dict[str, list[float]] = {n: [] for n in (*HEURISTICS, "row-greedy", "crop", "valid")}
    F0, bound, kinds, optima, searched, answers = [], [], [], [], [], []
    small = scenario.queue_size <= search_max_jobs
    for s in seeds:
        inst = sampler.sample(np.random.default_rng(s))
        F0.append(inst.initial_F)
        rng = np.random.default_rng([s, 1])
        per["valid"].append(
            _rollout_rows(inst, lambda t, g=rng: int(g.integers(len(t.row_slot))), C)
        )
        per["row-greedy"].append(_rollout_rows(inst, lambda t: int(np.argmax(t.gains.own)), C))
        for name in (*HEURISTICS, "crop"):
            kw = {"max_candidates": C} if name in ("crop", "comm-greedy") else {}
            state = inst.state.copy()
            apply(state, make_policy(name, **kw).place(inst.state, inst.queue, rng))
            per[name].append(float(state.F))
        b, kind, opt, answer = _bound(inst, time_limit, C)
        bound.append(b)
        kinds.append(kind)
        optima.append(opt)
        answers.append(answer)
        if small:
            searched.append(_search(inst, C, search_depth))
    mean = {n: float(np.mean(v)) for n, v in per.items()}
    best = max((*HEURISTICS, "row-greedy"), key=mean.__getitem__)
    lf = _learned_static(env_id, seeds, learned)
    roll = _crop_rollout(env_id, seeds) if small else None
    achieved: dict[str, list[float]] = {n: per[n] for n in (*HEURISTICS, "row-greedy", "crop")}
    if roll is not None:
        achieved["crop-rollout"] = roll
    if searched:
        achieved["search"] = searched
    if lf is not None:
        achieved["learned"] = lf[0]
    if any(o is not None for o in optima):
        achieved["exact"] = [o if o is not None else -np.inf for o in optima]
    if any(a is not None for a in answers):
        achieved["milp answer"] = [a if a is not None else -np.inf for a in answers]
    table = np.array(list(achieved.values()))  # [methods, seeds]
    top = table.max(axis=0)
    # A bound is proven, and so is never below an achieved F; the max only absorbs round-off
    # (anything more is counted as a violation).
    raw = np.array(bound)
    violations = int((raw < top * (1 - 1e-6)).sum())
    bnd = np.maximum(raw, top)
    crop, f0 = np.array(per["crop"]), np.array(F0)
    gain_gap = 1 - (crop - f0) / np.maximum(bnd - f0, 1e-12)
    gap = 1 - top / bnd
    ref_name = "crop" if mean["crop"] >= mean[best] else best
    ref = np.array(per[ref_name])
    names = list(achieved)
    exact = sum(k == "exact" for k in kinds)
    reach = Reach(
        crop_rollout=None if roll is None else float(np.mean(roll)),
        search=float(np.mean(searched)) if searched else None,
        best=float(top.mean()),
        best_by={n: int((table[i] >= top - 1e-9).sum()) for i, n in enumerate(names)},
        gap=float(gap.mean()),
        gap_ci=mean_ci(gap),
        gap_max=float(gap.max()),
        within_5pct=int(
            sum(b <= 1.05 * t or k == "exact" for b, t, k in zip(bnd, top, kinds, strict=True))
        ),
        exact=exact,
        proven_optimal=int(
            sum(
                b <= t * (1 + 1e-5) or k == "exact" for b, t, k in zip(bnd, top, kinds, strict=True)
            )
        ),
        reference="CROP" if ref_name == "crop" else ref_name,
        headroom_achieved=float((top / ref - 1).mean()),
        headroom_achieved_ci=mean_ci(top / ref - 1),
        headroom_bound=float((bnd / ref - 1).mean()),
        headroom_bound_ci=mean_ci(bnd / ref - 1),
        bound_kinds={k: kinds.count(k) for k in sorted(set(kinds))},
        violations=violations,
        missed=[
            [int(s), float(g)]
            for s, b, t, g, k in zip(seeds, bnd, top, gap, kinds, strict=True)
            if not (b <= 1.05 * t or k == "exact")
        ],
    )
    return Row(
        env_id=env_id,
        kind="static",
        metric="mean F",
        seeds=len(seeds),
        random=mean["valid"],
        best_heuristic=mean[best],
        best_heuristic_name=best,
        crop=mean["crop"],
        learned=None if lf is None else float(np.mean(lf[0])),
        learned_name=None if lf is None else lf[1],
        bound=float(bnd.mean()),
        bound_kind="exact" if exact == len(kinds) else "proven bound" if not exact else "mixed",
        crop_gap=float(np.mean(1 - crop / bnd)),
        extra={"F0": float(f0.mean()), "crop_gain_gap": float(gain_gap.mean())},
        reach=reach,
    )


# ---------------------------------------------------------------------------------- online
def _learned_online(
    env_id: str, seeds: Sequence[int], learned: Sequence[str]
) -> tuple[list[float], str] | None:
    """Mean JCT (hours) of the first of ``learned`` trained on ``env_id``, and its name.

    Each checkpoint applies to the environment it was trained on (its metadata's ``env_id``);
    ``None`` where none was (or the rl extra is missing).
    """
    try:
        from crop_gym.agents import checkpoint as ckpt
        from crop_gym.agents import evaluation
    except ImportError:
        return None
    for name in learned:
        try:
            if ckpt.read_metadata(ckpt.resolve_model_path(name)).get("env_id") != env_id:
                continue
            model, meta = ckpt.load_checkpoint(name)
        except (CropGymError, ValueError, OSError) as exc:
            print(f"headroom: learned {name!r} skipped: {exc}", file=sys.stderr)
            continue
        agent = evaluation.PolicyAgent(model)
        env = gym.make(env_id, **with_split(env_id, meta.get("env_kwargs"), "eval"))
        agent.bind(env)
        return _rollouts(env, agent, seeds, lambda e: float(e.mean_jct_h())), name
    return None


def online_row(
    env_id: str,
    seeds: Sequence[int],
    rollouts: int,
    learned: Sequence[str] = (),
    lookahead_top: int = 3,
) -> Row:
    """The online task's row (see the module docstring), on the eval part of the traces;
    ``lookahead_top``: placements the lookahead tries besides its base's."""
    env = gym.make(env_id, **with_split(env_id, {}, "eval"))
    jct: dict[str, list[float]] = {}
    decisions = multi = 0
    lb: list[float] = []
    for name in ("random", *ONLINE_HEURISTICS, "crop"):
        jct[name] = []
        for s in seeds:
            ep = play(env, make_online_policy(name, np.random.default_rng([s, 2])), s)
            jct[name].append(ep.mean_jct_h)
            if name == "crop":
                decisions, multi = decisions + ep.decisions, multi + ep.multi
                lb.append(ep.lower_bound_h)
    mean = {n: float(np.mean(v)) for n, v in jct.items()}
    best = min(ONLINE_HEURISTICS, key=mean.__getitem__)
    # The lookahead's base: the best JCT heuristic of these windows (fifo-first-fit has no order).
    base_name = min(JCT_HEURISTICS, key=mean.__getitem__)
    look, look_s = [], []
    for s in seeds:
        t0 = time.perf_counter()
        look.append(play(env, rollout_policy(base_name, top=lookahead_top), s).mean_jct_h)
        look_s.append(time.perf_counter() - t0)
    best_roll = []
    for i, s in enumerate(seeds):
        runs = [jct["crop"][i], jct["sjf-crop"][i], look[i]]
        for r in range(rollouts):
            rng = np.random.default_rng([s, 3, r])
            base = make_online_policy("crop" if r % 2 else "sjf-crop", rng)
            runs.append(play(env, epsilon(base, 0.1, rng), s).mean_jct_h)
        best_roll.append(min(runs))
    crop, roll = np.array(jct["crop"]), np.array(best_roll)
    lj = _learned_online(env_id, seeds, learned) if learned else None
    extra = {} if lj is None else {"learned_over_crop": float(np.mean(lj[0]) / crop.mean())}
    ratio = ratio_bootstrap(np.array(look)[None, :], np.array(jct[best]), reps=2000, seed=0)
    extra.update(
        lookahead_h=float(np.mean(look)),
        lookahead_top=float(lookahead_top),
        lookahead_over_best_heuristic=ratio["ratio_of_means"],
        lookahead_over_best_heuristic_low=ratio["ratio_of_means_ci95"][0],
        lookahead_over_best_heuristic_high=ratio["ratio_of_means_ci95"][1],
        lookahead_seconds_per_window=float(np.mean(look_s)),
    )
    return Row(
        env_id=env_id,
        kind="online",
        metric="mean JCT (h)",
        seeds=len(seeds),
        random=mean["random"],
        best_heuristic=mean[best],
        best_heuristic_name=best,
        crop=mean["crop"],
        learned=None if lj is None else float(np.mean(lj[0])),
        bound=float(roll.mean()),
        bound_kind=f"best of {rollouts + 3} rollouts",
        crop_gap=float(np.mean(crop / roll - 1)),
        extra={
            **extra,
            "hindsight_lower_bound_h": float(np.mean(lb)),
            "crop_over_lower_bound": float(np.mean(crop / np.array(lb))),
            "crop_decisions": float(decisions),
            "crop_multi_job_decisions": float(multi),
        },
        learned_name=None if lj is None else lj[1],
        lookahead_base=base_name,
    )


# ---------------------------------------------------------------------------------- driver
def headroom(
    ids: Sequence[str] | None = None,
    *,
    seeds: int = 40,
    online_seeds: int = 10,
    rollouts: int = 8,
    lookahead_top: int = 3,
    learned: Sequence[str] = ("default-severe", "default"),
    learned_online: Sequence[str] = ("default-online",),
    progress: bool = True,
    search_depth: int = 2,
    search_max_jobs: int = 32,
    time_limit: float = 10.0,
) -> list[Row]:
    """Rows of every registered ID (or of ``ids``); the keyword arguments of :func:`static_row`
    and :func:`online_row` (GPU-mode IDs play the same instances as their scenario's)."""
    known = [i for i in ENV_IDS if i in gym.registry]
    todo = known if ids is None else list(ids)
    for i in todo:
        if i not in known:
            raise ConfigError(f"--ids: unknown environment ID {i!r}; known: {', '.join(known)}")
    rows = []
    for env_id in todo:
        t0 = time.perf_counter()
        if "Online" in env_id:
            n = [HELD_OUT_SEED + i for i in range(online_seeds)]
            rows.append(online_row(env_id, n, rollouts, learned_online, lookahead_top))
        else:
            rows.append(
                static_row(
                    env_id,
                    [HELD_OUT_SEED + i for i in range(seeds)],
                    learned,
                    search_depth=search_depth,
                    search_max_jobs=search_max_jobs,
                    time_limit=time_limit,
                )
            )
        if progress:
            print(f"headroom: {env_id} {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return rows


def _fmt(x: float | None, kind: str) -> str:
    if x is None:
        return "—"
    return f"{x:.2f}" if kind == "online" else f"{x:.3f}"


def render_markdown(rows: Sequence[Row], command: str, note: str = "") -> str:
    """docs/BENCHMARK.md (``note``: a line under the regeneration command)."""
    out = [
        "# Benchmark headroom",
        "",
        f"Regenerate with `{command}` (module docstring of `agents/headroom.py` says what each",
        "column is). Held-out seeds from 10^9 (training uses seeds below 10^6).",
        *([note] if note else []),
        "",
        "## Static tasks (mean F, higher is better)",
        "",
        "| task | seeds | random valid | best heuristic | CROP | crop-rollout | learned | search | best achieved | bound | CROP gap (F) | CROP gap (gain) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.kind == "static":
            a = r.reach
            out.append(
                f"| `{r.env_id}` | {r.seeds} | {_fmt(r.random, 's')} | {_fmt(r.best_heuristic, 's')} "
                f"({r.best_heuristic_name}) | {_fmt(r.crop, 's')} | "
                f"{_fmt(a.crop_rollout if a else None, 's')} | {_fmt(r.learned, 's')} | "
                f"{_fmt(a.search if a else None, 's')} | {_fmt(a.best if a else None, 's')} | "
                f"{_fmt(r.bound, 's')} | {100 * r.crop_gap:.1f} % | "
                f"{100 * r.extra['crop_gain_gap']:.1f} % |"
            )
    out += [
        "",
        "CROP gap (F): mean of `1 - F_CROP / bound`; (gain): of `1 - (F_CROP - F0) / (bound - F0)`",
        "(F0: the background jobs). The bound is the exact optimum over every placement where the",
        "instance is small enough (`baselines/exact.py`), else the least of two proven upper",
        "bounds: the GPU-sharing MILP (`baselines/bounds.py`: each free GPU to one job at most,",
        "each job worth at most its per-GPU coefficients by pace and mode: on one server, or",
        "spread under a switch at the bandwidth of its slowest server or switch uplink, charged",
        "the survival of those links; HiGHS' dual bound at its time limit) and",
        "the knapsack bound (each job on its own best GPUs); rows without a best-achieved column",
        "are from an earlier run (knapsack bound only). Best achieved: per instance, the best F",
        "of any column (and of the exact optimum where it is known). Search:",
        "the pilot method on CROP (`baselines/search.py`, lookahead depth 2, 6 moves per level) and",
        "the optimum over the candidate space where it is small enough. GPU-mode IDs play the same",
        "instances as their scenario.",
        *_static_learned_note(rows),
        *_reach_table(rows),
        "",
        "## Online tasks (mean JCT in hours, lower is better)",
        "",
        "| task | windows | random | best heuristic | CROP | learned | lookahead | lookahead / best heuristic | s per window | best rollout | hindsight LB | CROP / best rollout - 1 | multi-job decisions (CROP) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.kind == "online":
            e = r.extra
            out.append(
                f"| `{r.env_id}` | {r.seeds} | {_fmt(r.random, 'online')} | "
                f"{_fmt(r.best_heuristic, 'online')} ({r.best_heuristic_name}) | "
                f"{_fmt(r.crop, 'online')} | {_fmt(r.learned, 'online')} | "
                f"{_lookahead_cells(r)} | "
                f"{_fmt(r.bound, 'online')} ({r.bound_kind}) | "
                f"{e['hindsight_lower_bound_h']:.2f} | {100 * r.crop_gap:.1f} % | "
                f"{int(e['crop_multi_job_decisions'])} of {int(e['crop_decisions'])} |"
            )
    out += [
        "",
        "JCT: time in the system until completion or the horizon, averaged over the window's jobs.",
        "Lookahead: one-step rollout on the row's best JCT heuristic (`baselines/online_rollout.py`,",
        "`srsf-crop-rollout` for srsf-crop): at each decision the base's own action, the next",
        "placements in its order (the lookahead's `top`, default 3) and *wait* are each completed",
        "by the base on a copy of the environment, and the lowest mean JCT wins; it is clairvoyant",
        "about the window's arrivals and health (an expert, not a deployable policy) and never",
        "worse than its base on a window. Lookahead / best heuristic: ratio of mean JCTs with a 95 %",
        "paired bootstrap interval over the windows; s per window: its wall-clock seconds on one",
        "core. Best rollout: per window, the best of CROP, sjf-crop, the lookahead and seeded",
        "ε = 0.1 perturbations of CROP and sjf-crop (achieved, not a bound; rows without a",
        "lookahead column are from an earlier run, without it). Hindsight LB: each job's work at",
        "its ideal speed capped at the horizon (proven, loose: it ignores queueing). Multi-job",
        "decisions: CROP's steps at which two or more jobs were placeable.",
        "`scripts/online_rollout_headroom.py` measures the lookahead on more windows, with",
        "settings beside (docs/results/online_rollout.json).",
    ]
    learned = [r for r in rows if r.kind == "online" and r.learned_name]
    if learned:
        out += [
            "Learned: the shipped online checkpoint trained on that ID ("
            + ", ".join(f"`{r.env_id.split('/')[-1]}`: `{r.learned_name}`" for r in learned)
            + "), greedy; it was cloned from the sjf-crop teacher and fine-tuned with MaskablePPO",
            "(docs/AGENTS.md, Online v1; its 5-seed evaluation on 30 windows is in",
            "docs/results/online_rl.json). — : no checkpoint was trained on that ID.",
        ]
    out.append("")
    return "\n".join(out)


def _lookahead_cells(r: Row) -> str:
    """The lookahead's three cells of an online row (dashes for rows from an earlier run)."""
    e = r.extra
    if "lookahead_h" not in e:
        return "— | — | —"
    return (
        f"{e['lookahead_h']:.2f} ({r.lookahead_base}, top {int(e['lookahead_top'])}) | "
        f"{e['lookahead_over_best_heuristic']:.3f} [{e['lookahead_over_best_heuristic_low']:.3f}, "
        f"{e['lookahead_over_best_heuristic_high']:.3f}] | {e['lookahead_seconds_per_window']:.0f}"
    )


def _ci(x: float, ci: Sequence[float]) -> str:
    return f"{100 * x:.1f} % [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _reach_table(rows: Sequence[Row]) -> list[str]:
    """The static tasks' distance from the best achieved F to the bound, and their headroom."""
    reach = [r for r in rows if r.kind == "static" and r.reach is not None]
    if not reach:
        return []
    out = [
        "",
        "### How far the best achieved F is from the bound, and the headroom over the best heuristic",
        "",
        "| task | seeds | bound kinds | gap best → bound | largest gap | within 5 % | proven optimal | bound below an answer | best by | heuristic to beat | headroom achieved | headroom at most |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reach:
        a = r.reach
        assert a is not None
        kinds = ", ".join(f"{k} {n}" for k, n in a.bound_kinds.items())
        by = ", ".join(f"{k} {n}" for k, n in sorted(a.best_by.items(), key=lambda kv: -kv[1]) if n)
        out.append(
            f"| `{r.env_id}` | {r.seeds} | {kinds} | {_ci(a.gap, a.gap_ci)} | "
            f"{100 * a.gap_max:.1f} % | {a.within_5pct} of {r.seeds} | {a.proven_optimal} | "
            f"{a.violations} | "
            f"{by} | {a.reference} | "
            f"{_ci(a.headroom_achieved, a.headroom_achieved_ci)} | "
            f"{_ci(a.headroom_bound, a.headroom_bound_ci)} |"
        )
    missed = [
        f"`{r.env_id.split('/')[-1]}` "
        + ", ".join(f"{int(m[0])} ({100 * m[1]:.1f} %)" for m in r.reach.missed)
        for r in reach
        if r.reach is not None and r.reach.missed
    ]
    if missed:
        out += [
            "",
            "Instances not within 5 % (reset seed, gap best → bound): " + "; ".join(missed) + ".",
        ]
    out += [
        "",
        "Gap best → bound: mean of `1 - best / bound` over the instances, with a 95 % bootstrap",
        "interval; within 5 %: instances whose bound is at most 1.05 × their best F, or exact;",
        "proven optimal: the best F is the exact optimum or meets the bound (to 1e-5); bound below",
        "an answer: instances where a solver fault put the bound under an achieved F (should be 0).",
        "Best by:",
        "instances on which each method reached the best F (ties count for each). Heuristic to",
        "beat: the better of CROP and the best heuristic by mean F; headroom achieved: mean of",
        "`best / F_heuristic - 1` (shown to exist); at most: of `bound / F_heuristic - 1`.",
    ]
    return out


def _static_learned_note(rows: Sequence[Row]) -> list[str]:
    """Which checkpoint each static row's learned column played (rows without a name: default)."""
    special = [r for r in rows if r.kind == "static" and r.learned_name not in (None, "default")]
    if not special:
        return ["Learned: the shipped static checkpoint `default` (greedy)."]
    return [
        "Learned: the shipped static checkpoint `default` (greedy), except "
        + ", ".join(f"`{r.env_id.split('/')[-1]}`: `{r.learned_name}`" for r in special)
        + " (the checkpoint trained on that ID; docs/AGENTS.md)."
    ]


def _csv(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    flat = []
    for r in rows:
        d = {k: v for k, v in asdict(r).items() if k not in ("extra", "reach")}
        d.update(r.extra)
        if r.reach is not None:
            for k, v in asdict(r.reach).items():
                d[f"reach_{k}"] = json.dumps(v) if isinstance(v, (list, dict)) else v
        flat.append(d)
    keys = list(dict.fromkeys(k for d in flat for k in d))
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for d in flat:
        w.writerow(d)
    return buf.getvalue()


def _row(d: dict[str, Any]) -> Row:
    """A :class:`Row` from its JSON form."""
    reach = d.get("reach")
    return Row(**{**d, "reach": None if reach is None else Reach(**reach)})


def _merge(path: Path, rows: Sequence[Row]) -> list[Row]:
    """``rows`` in place of their IDs' rows of an earlier table (``--ids`` updates those rows)."""
    if not path.exists():
        return list(rows)
    try:
        old = [_row(d) for d in json.loads(path.read_text(encoding="utf-8"))]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: cannot merge into it ({exc}); omit --ids") from None
    new = {r.env_id: r for r in rows}
    merged = [new.pop(r.env_id, r) for r in old]
    return merged + list(new.values())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m crop_gym.agents.headroom [--fast] [--ids ID ...] [--seeds N] [--out DIR]``."""
    p = argparse.ArgumentParser(
        prog="python -m crop_gym.agents.headroom", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--fast",
        action="store_true",
        help="2 seeds, 2 online windows, 2 rollouts, online lookahead top 1 at most",
    )
    p.add_argument("--ids", nargs="+", help="environment IDs (default: every registered one)")
    p.add_argument("--seeds", type=int, default=40, help="static seeds (default 40)")
    p.add_argument(
        "--search-depth", type=int, default=2, help="lookahead of the static search (1 or 2)"
    )
    p.add_argument(
        "--search-max-jobs",
        type=int,
        default=32,
        help="static tasks with larger queues get no crop-rollout or search column (default 32)",
    )
    p.add_argument(
        "--bound-time-limit", type=float, default=10.0, help="HiGHS seconds per bound (default 10)"
    )
    p.add_argument("--online-seeds", type=int, default=10, help="online windows (default 10)")
    p.add_argument("--rollouts", type=int, default=8, help="perturbed rollouts per window")
    p.add_argument(
        "--lookahead-top",
        type=int,
        default=3,
        help="online lookahead: placements tried besides its base heuristic's (default 3)",
    )
    p.add_argument(
        "--learned",
        nargs="+",
        default=["default-severe", "default"],
        help="checkpoints of the static learned column: the first trained on the row's ID, else "
        "the last (default: default-severe, default); 'none' for no column",
    )
    p.add_argument(
        "--learned-online",
        nargs="+",
        default=["default-online"],
        help="checkpoints of the online learned column, each for the ID it was trained on",
    )
    p.add_argument("--out", default="docs", help="directory of BENCHMARK.md (data in OUT/results)")
    a = p.parse_args(argv)
    try:
        for name in ("seeds", "online_seeds", "rollouts", "lookahead_top"):
            if getattr(a, name) < (0 if name in ("rollouts", "lookahead_top") else 1):
                raise ConfigError(f"--{name.replace('_', '-')}={getattr(a, name)} must be >= 1")
        fast = a.fast
        rows = headroom(
            a.ids,
            seeds=2 if fast else a.seeds,
            online_seeds=2 if fast else a.online_seeds,
            rollouts=2 if fast else a.rollouts,
            lookahead_top=min(a.lookahead_top, 1) if fast else a.lookahead_top,
            learned=[n for n in a.learned if n != "none"],
            learned_online=[n for n in a.learned_online if n != "none"],
            search_depth=a.search_depth,
            search_max_jobs=a.search_max_jobs,
            time_limit=a.bound_time_limit,
        )
        out = Path(a.out)
        (out / "results").mkdir(parents=True, exist_ok=True)
        if a.ids:
            rows = _merge(out / "results" / "headroom.json", rows)
        args = list(sys.argv[1:] if argv is None else argv)
        cmd = " ".join(["python -m crop_gym.agents.headroom", *args])
        note = ""
        if a.ids and (out / "BENCHMARK.md").exists():
            m = re.search(r"Regenerate with `([^`]*)`", (out / "BENCHMARK.md").read_text("utf-8"))
            if m:
                cmd, note = m.group(1), f"Rows of {', '.join(a.ids)} last updated with `{cmd}`."
        atomic_write(out / "BENCHMARK.md", render_markdown(rows, cmd, note))
        atomic_write(
            out / "results" / "headroom.json",
            json.dumps([asdict(r) for r in rows], indent=2) + "\n",
        )
        atomic_write(out / "results" / "headroom.csv", _csv(rows))
    except (CropGymError, OSError) as exc:
        print(f"headroom: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'BENCHMARK.md'} and {out / 'results'}/headroom.{{json,csv}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
