"""Compare placement policies on a scenario: the logic behind ``crop-gym compare``.

Each seed's instance is sampled once (``ScenarioSampler(scenario).sample(np.random.default_rng(seed))``)
and every policy sees the same instance. A policy's F is the state's F after its placements are applied
(so it counts the background jobs); its gain is that F minus the instance's initial F. With
``exact=True`` the exact optimum of F (:func:`crop_gym.baselines.exact.optimum`) and the MILP that places the
most jobs with the least communication (:func:`crop_gym.baselines.milp.milp_min_comm`) are added.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.errors import ConfigError, check_int, check_range
from crop_gym.io import atomic_write
from crop_gym.model.state import ClusterState
from crop_gym.policy import Placement, PlacementPolicy, apply, make_policy
from crop_gym.scenario import PlacementInstance, Scenario, ScenarioSampler, get_scenario

__all__ = [
    "DEFAULT_POLICIES",
    "MAX_SEEDS",
    "METRICS",
    "CompareResult",
    "Runs",
    "format_table",
    "plot_figure",
    "run_compare",
    "to_json",
    "write_json",
    "write_plot",
]

#: Policies compared by default (``crop-plain`` returns exactly what ``crop`` returns, only slower).
#: The most seeds one comparison takes (as :mod:`crop_gym.study` caps a study's seeds).
MAX_SEEDS = 10_000

DEFAULT_POLICIES: tuple[str, ...] = (
    "crop",
    "crop-nonrobust",
    "random",
    "first-fit",
    "best-fit",
    "spread",
    "hived",
    "comm-greedy",
)

#: Per-seed metrics recorded for every policy (JSON keys).
METRICS: tuple[str, ...] = (
    "F",
    "gain",
    "jobs_placed",
    "comm_overhead",
    "utilization",
    "solve_time_s",
)


@dataclass
class Runs:
    """One policy's per-seed results (lists aligned with :attr:`CompareResult.seeds`)."""

    F: list[float] = field(default_factory=list)
    gain: list[float] = field(default_factory=list)
    jobs_placed: list[int] = field(default_factory=list)
    comm_overhead: list[float] = field(default_factory=list)
    utilization: list[float] = field(default_factory=list)
    solve_time_s: list[float] = field(default_factory=list)

    def record(
        self, inst: PlacementInstance, placements: Sequence[Placement], seconds: float
    ) -> None:
        """Apply ``placements`` to a copy of the instance's state and record the metrics."""
        state: ClusterState = inst.state.copy()
        apply(state, placements)
        m = state.metrics()
        self.F.append(m.F)
        self.gain.append(m.F - inst.initial_F)
        self.jobs_placed.append(len(placements))
        self.comm_overhead.append(m.comm_overhead)
        self.utilization.append(m.utilization)
        self.solve_time_s.append(seconds)

    def to_dict(self) -> dict[str, list[float] | list[int]]:
        """The JSON form: metric name → one value per seed."""
        return {name: list(getattr(self, name)) for name in METRICS}


@dataclass
class CompareResult:
    """Outcome of :func:`run_compare`.

    Attributes:
        scenario: The scenario.
        seeds: Seeds, one instance each.
        initial_F: F of each instance before placement (background jobs only).
        queue_size: Pending jobs per instance.
        policies: Policy name → its runs, in table order.
        optimum: The exact optimum of F (``exact=True``), else ``None``.
        optimum_space: ``"all"`` (every placement) or ``"candidates"`` (the candidate space).
        min_comm: The MILP answer (most jobs, least communication), if computed.
        notes: Remarks printed under the table (e.g. why the MILP was skipped).
    """

    scenario: Scenario
    seeds: list[int]
    initial_F: list[float] = field(default_factory=list)
    queue_size: int = 0
    policies: dict[str, Runs] = field(default_factory=dict)
    optimum: Runs | None = None
    optimum_space: str | None = None
    min_comm: Runs | None = None
    notes: list[str] = field(default_factory=list)


def _build(name: str, scenario: Scenario) -> PlacementPolicy:
    """A registered policy, with the scenario's candidate cap where the policy takes one."""
    policy = make_policy(name)
    if "max_candidates" in inspect.signature(type(policy)).parameters:
        return make_policy(name, max_candidates=scenario.max_candidates)
    return policy


def _check_exact(insts: Sequence[PlacementInstance], seeds: Sequence[int]) -> str:
    """The search space the exact solver will use, or a ConfigError saying why it cannot."""
    from crop_gym.baselines.exact import EXACT_LIMITS, search_space

    spaces = []
    for inst, seed in zip(insts, seeds, strict=True):
        errors = []
        for space in ("all", "candidates"):
            try:
                log10, _ = search_space(inst.state, inst.queue, space=space)
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            if log10 <= EXACT_LIMITS.log10_limit(space):
                spaces.append(space)
                break
            errors.append(
                f"space={space!r}: 10^{log10:.1f} combinations, limit 10^{EXACT_LIMITS.log10_limit(space):g}"
            )
        else:
            raise ConfigError(
                f"--exact: scenario {insts[0].scenario.name!r} is too large for the exact solver "
                f"(seed {seed}: {len(inst.queue)} pending jobs on {inst.state.num_free} free GPUs; "
                f"{'; '.join(errors)}; the limit is on combinations of jobs x placement options); "
                "try --scenario testbed-8"
            )
    return "all" if all(s == "all" for s in spaces) else "candidates"


def run_compare(
    scenario: str | Path | Scenario = "default",
    *,
    seeds: int = 10,
    first_seed: int = 0,
    policies: Sequence[str] | None = None,
    exact: bool = False,
    progress: bool | None = None,
) -> CompareResult:
    """Run every policy on the same sampled instances.

    Args:
        scenario: Built-in scenario name, scenario file or :class:`Scenario`.
        seeds: Number of instances, in ``[1, MAX_SEEDS]`` (10,000, as a study caps them).
        first_seed: Seed of the first instance (later ones count up).
        policies: Registered policy names (default :data:`DEFAULT_POLICIES`).
        exact: Add the exact optimum of F and the min-communication MILP.
        progress: Show a progress bar on stderr (default: when stderr is a terminal).

    Raises:
        ConfigError: For an unknown scenario or policy, a bad seed count, or ``exact=True`` on an
            instance too large for the exact solver (checked before anything runs).
    """
    check_int("seeds", seeds, 1, MAX_SEEDS)
    check_range("first_seed", first_seed, 0)
    sc = get_scenario(scenario)
    names = list(DEFAULT_POLICIES if policies is None else policies)
    if not names:
        raise ConfigError("no policy to compare")
    if len(set(names)) != len(names):
        raise ConfigError(f"a policy is listed twice: {names}")
    built = {n: _build(n, sc) for n in names}
    seed_list = list(range(first_seed, first_seed + seeds))
    sampler = ScenarioSampler(sc)
    insts = [sampler.sample(np.random.default_rng(s)) for s in seed_list]
    result = CompareResult(sc, seed_list, [i.initial_F for i in insts], sc.queue_size)
    result.policies = {n: Runs() for n in names}
    if exact:
        from crop_gym.baselines.exact import OptimumPolicy
        from crop_gym.baselines.milp import milp_variables

        result.optimum_space = _check_exact(insts, seed_list)
        result.optimum = Runs()
        optimum = OptimumPolicy(space=result.optimum_space)
        try:
            for inst in insts:
                milp_variables(inst.state, inst.queue)
            result.min_comm = Runs()
        except ConfigError as exc:
            result.notes.append(f"min-comm MILP skipped: {exc}")
    total = len(insts) * (len(names) + (2 if exact else 0))
    from tqdm import tqdm

    show = sys.stderr.isatty() if progress is None else progress
    with tqdm(
        total=total,
        desc=f"compare {sc.name}",
        unit="run",
        disable=not show,
        file=sys.stderr,
        leave=False,
    ) as bar:
        for seed, inst in zip(seed_list, insts, strict=True):
            for i, (name, policy) in enumerate(built.items()):
                rng = np.random.default_rng([seed, i])
                t0 = time.perf_counter()
                placements = policy.place(inst.state, inst.queue, rng)
                result.policies[name].record(inst, placements, time.perf_counter() - t0)
                bar.update()
            if exact:
                _run_exact(result, inst, optimum)
                bar.update(2)
    return result


def _run_exact(result: CompareResult, inst: PlacementInstance, optimum: PlacementPolicy) -> None:
    from crop_gym.baselines.milp import milp_min_comm

    assert result.optimum is not None
    t0 = time.perf_counter()
    placements = optimum.place(inst.state, inst.queue)
    result.optimum.record(inst, placements, time.perf_counter() - t0)
    if result.min_comm is not None:
        t0 = time.perf_counter()
        milp = milp_min_comm(inst.state, inst.queue)
        result.min_comm.record(inst, milp.placements, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------ output
def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std())


def _ratio(num: Sequence[float], den: Sequence[float]) -> float:
    r = [n / d for n, d in zip(num, den, strict=True) if d > 0]
    return float(np.mean(r)) if r else math.nan


def format_table(result: CompareResult) -> str:
    """A readable terminal table: per policy mean ± std over the seeds."""
    sc = result.scenario
    f0, f0s = _mean_std(result.initial_F)
    s = result.seeds
    head = (
        f"crop-gym compare: scenario {sc.name!r} ({sc.cluster}, {sc.abnormal.name} abnormalities, "
        f"{result.queue_size} pending jobs), {len(s)} seeds ({s[0]}..{s[-1]})\n"
        f"F before placement (background jobs): {f0:.2f} ± {f0s:.2f}; F = expected effective GPUs after placement"
    )
    rows: list[tuple[str, Runs]] = list(result.policies.items())
    if result.optimum is not None:
        rows.append((f"optimum ({result.optimum_space})", result.optimum))
    if result.min_comm is not None:
        rows.append(("min-comm MILP", result.min_comm))
    crop = result.policies.get("crop")
    cols = ["policy", "F", "F/CROP", "gain", "jobs", "util", "comm", "time"]
    if result.optimum is not None:
        cols.insert(3, "F/opt")
    table = [cols]
    for name, r in rows:
        fm, fs = _mean_std(r.F)
        gm, gs = _mean_std(r.gain)
        t = float(np.mean(r.solve_time_s))
        line = [
            name,
            f"{fm:.2f} ± {fs:.2f}",
            f"{_ratio(r.F, crop.F):.3f}" if crop is not None else "-",
            f"{gm:.2f} ± {gs:.2f}",
            f"{np.mean(r.jobs_placed):.1f}",
            f"{np.mean(r.utilization):.3f}",
            f"{np.mean(r.comm_overhead):.3f}",
            f"{t * 1e3:.1f} ms" if t < 10 else f"{t:.1f} s",
        ]
        if result.optimum is not None:
            line.insert(3, f"{_ratio(r.F, result.optimum.F):.3f}")
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    out = [head, ""]
    for n, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append("")
    out.append(
        "F/CROP, F/opt: mean over seeds of the per-seed ratio; gain: F minus F before placement; jobs: "
        "pending jobs placed; util: busy GPU share; comm: GPU-weighted share of iteration time spent "
        "communicating; time: mean solve time."
    )
    out.extend(result.notes)
    return "\n".join(out)


def to_json(result: CompareResult) -> dict[str, Any]:
    """The documented JSON shape: ``{"policies": {name: {metric: [one per seed]}}, "optimum": {...} | null}``
    plus ``scenario``, ``seeds``, ``initial_F``, ``optimum_space`` and ``min_comm``, and ``hardware``
    when the scenario's is not the default (so that a default run's file is unchanged)."""
    hw = result.scenario.cluster_hardware
    return {
        "scenario": result.scenario.name,
        **({} if hw.is_default else {"hardware": hw.spec}),
        "seeds": list(result.seeds),
        "initial_F": list(result.initial_F),
        "policies": {name: r.to_dict() for name, r in result.policies.items()},
        "optimum": result.optimum.to_dict() if result.optimum is not None else None,
        "optimum_space": result.optimum_space,
        "min_comm": result.min_comm.to_dict() if result.min_comm is not None else None,
    }


def write_json(result: CompareResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`to_json` to ``path`` atomically."""
    atomic_write(path, json.dumps(to_json(result), indent=2) + "\n")


def write_plot(result: CompareResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`plot_figure` to ``path`` atomically (format from the suffix: png, pdf, svg)."""
    from crop_gym.plotting import save_figure

    save_figure(plot_figure(result), path)


def plot_figure(result: CompareResult) -> Any:
    """Bar chart (mean ± std over seeds) of F and of the communication overhead (a matplotlib
    ``Figure``, Agg).

    Both axes start at 0 (differences of a few % are printed above the bars instead of being
    magnified by a cut axis); the legend names the kinds of policy.
    """
    from crop_gym.plotting import bar_colours, bar_legend_handles, new_figure

    rows: list[tuple[str, Runs]] = list(result.policies.items())
    if result.optimum is not None:
        rows.append(("optimum", result.optimum))
    if result.min_comm is not None:
        rows.append(("min-comm", result.min_comm))
    names = [n for n, _ in rows]
    x = np.arange(len(rows))
    fig = new_figure(max(9.0, 1.0 * len(rows) * 2), 4.6)
    axes = fig.subplots(1, 2)
    for ax, metric, label, scale, fmt in (
        (axes[0], "F", "F: expected effective GPUs (GPUs)", 1.0, "{:.2f}"),
        (axes[1], "comm_overhead", "communication overhead (% of iteration time)", 100.0, "{:.1f}"),
    ):
        means = np.array([np.mean(getattr(r, metric)) for _, r in rows]) * scale
        stds = np.array([np.std(getattr(r, metric)) for _, r in rows]) * scale
        colours = bar_colours(names)
        ax.bar(x, means, yerr=stds, capsize=3, color=colours, error_kw={"lw": 1.0, "ecolor": "0.2"})
        top = float(np.max(means + stds, initial=0.0)) * 1.15 or 1.0
        for xi, m, c in zip(x, means, colours, strict=True):
            # The value at the foot of its bar, boxed so that an error bar does not cross it.
            ax.text(
                xi,
                0.03 * top,
                fmt.format(m),
                ha="center",
                va="bottom",
                fontsize=8,
                color="w",
                zorder=5,
                bbox={"boxstyle": "round,pad=0.15", "fc": c, "ec": "none"},
            )
        ax.set_xticks(x, names, rotation=35, ha="right")
        ax.set_xlabel("policy")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0.0, top=top)
        ax.grid(axis="y", alpha=0.3)
    fig.legend(
        handles=bar_legend_handles(names),
        fontsize=8,
        loc="upper left",
        ncol=4,
        frameon=False,
        bbox_to_anchor=(0.0, 1.0),
    )
    fig.suptitle(f"{result.scenario.name}: mean over {len(result.seeds)} seeds, error bars ± 1 std")
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.93))
    return fig
