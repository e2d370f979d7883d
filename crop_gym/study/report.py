"""A study's summary: means with bootstrap 95 % intervals over seeds, tables and a figure.

A *setting* is every grid coordinate but the seed (:attr:`Run.setting
<crop_gym.study.grid.Run.setting>`). For each setting and metric the interval is the percentile
bootstrap of the mean over the setting's seeds: the seed values are resampled with replacement
``resamples`` times and the 2.5 % and 97.5 % quantiles of the resampled means are reported. The
resampling RNG is seeded from the study's bootstrap seed and the setting (not its position), so a
table is reproducible and a setting's interval does not change when other settings are added. With
one seed the interval is the single value: say so when quoting it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.study.grid import COORDINATES, setting_title
from crop_gym.study.results import csv_cell

__all__ = [
    "MIN_SEEDS",
    "TABLE_METRICS",
    "HeadlineCell",
    "HeadlineRow",
    "Interval",
    "SummaryRow",
    "bootstrap_interval",
    "few_seeds_warning",
    "headline",
    "is_variant",
    "plot_summary",
    "summarize",
    "summary_csv",
    "summary_json",
    "summary_markdown",
]

#: Metrics of the markdown tables: key → (column title, scale, format).
TABLE_METRICS: dict[str, tuple[str, float, str]] = {
    "mean_jct_s": ("JCT mean h", 1 / 3600.0, "{:,.2f}"),
    "p95_jct_s": ("JCT p95 h", 1 / 3600.0, "{:,.2f}"),
    "mean_efficiency": ("η̄", 1.0, "{:.3f}"),
    "mean_effective_gpus": ("F", 1.0, "{:,.1f}"),
    "mean_utilization": ("util", 100.0, "{:.1f} %"),
    "comm_overhead": ("comm", 100.0, "{:.2f} %"),
    "job_failures": ("fail", 1.0, "{:,.0f}"),
    "lost_gpu_hours": ("lost GPU-h", 1.0, "{:,.1f}"),
}
#: Fewest seeds per setting whose interval is worth quoting (fewer: a warning, see
#: :func:`few_seeds_warning`).
MIN_SEEDS = 3
#: Coordinates that name a table (one table per value of these), the rest name its rows.
_TABLE_KEYS = ("trace", "cluster", "hardware", "jobs", "arrival_scale", "sim")


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its bootstrap interval.

    Attributes:
        mean: Mean of the values (NaN when there are none).
        low: Lower bound of the interval.
        high: Upper bound of the interval.
        n: Number of values (seeds with a finite value).
    """

    mean: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class SummaryRow:
    """One setting of a study, summarised over its seeds.

    Attributes:
        setting: The coordinates but the seed (``sim`` a table).
        seeds: The seeds summarised.
        stats: Metric → :class:`Interval`.
    """

    setting: dict[str, Any]
    seeds: tuple[int, ...]
    stats: dict[str, Interval]


def bootstrap_interval(
    values: Sequence[float] | NDArray[np.float64],
    rng: np.random.Generator,
    *,
    resamples: int = 2000,
    level: float = 0.95,
) -> Interval:
    """The mean of ``values`` (non-finite ones dropped) and its percentile-bootstrap interval.

    Args:
        values: One value per seed.
        rng: Seeded generator of the resampling.
        resamples: Number of bootstrap resamples.
        level: Coverage of the interval.
    """
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    n = len(a)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(a.mean())
    if n == 1:
        return Interval(mean, mean, mean, 1)
    means = a[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(mean, float(low), float(high), n)


@dataclass(frozen=True)
class HeadlineCell:
    """The reference against the best other policy on one metric.

    Attributes:
        metric: The metric (``mean_jct_s``, ``mean_efficiency``).
        policy: The best other policy on it.
        change: ``reference mean / best mean - 1`` (means over seeds).
    """

    metric: str
    policy: str
    change: float


@dataclass(frozen=True)
class HeadlineRow:
    """One setting and abnormality profile of the headline.

    Attributes:
        title: The setting (:func:`~crop_gym.study.grid.setting_title`).
        abnormal: The abnormality profile.
        cells: One :class:`HeadlineCell` per metric with values (metric order of the table).
    """

    title: str
    abnormal: str
    cells: tuple[HeadlineCell, ...]


def is_variant(policy: str, reference: str) -> bool:
    """Whether ``policy`` is one of ``reference``'s own variants, named ``REFERENCE-...``.

    CROP's are ``crop-plain`` (the same greedy without lazy evaluation: the same placements) and
    ``crop-nonrobust`` (the ablation): the headline compares CROP with the *other* policies, as
    docs/RESULTS.md does; the tables still show every policy.
    """
    return policy.startswith(f"{reference}-")


def few_seeds_warning(rows: Sequence[SummaryRow]) -> str | None:
    """A one-line warning when some setting has fewer than :data:`MIN_SEEDS` seeds, else ``None``."""
    fewest = min((len(r.seeds) for r in rows), default=MIN_SEEDS)
    if fewest >= MIN_SEEDS:
        return None
    return (
        f"the summary has settings with {fewest} seed(s): an interval over fewer than "
        f"{MIN_SEEDS} seeds says little (with one there is none); run more seeds before quoting it"
    )


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def summarize(
    records: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[SummaryRow]:
    """Group ``records`` by setting (first-seen order) and summarise each metric over seeds."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        setting = {k: r.get(k) for k in COORDINATES if k != "seed"}
        key = json.dumps(setting, sort_keys=True, separators=(",", ":"))
        groups.setdefault(key, []).append(r)
    rows = []
    for key, group in groups.items():
        rng_seed = [seed, zlib.crc32(key.encode("utf-8"))]
        stats = {}
        for m in metrics:
            rng = np.random.default_rng([*rng_seed, zlib.crc32(m.encode("utf-8"))])
            values = [_number(r.get(m)) for r in group]
            stats[m] = bootstrap_interval(values, rng, resamples=resamples)
        setting = {k: group[0].get(k) for k in COORDINATES if k != "seed"}
        seeds = tuple(sorted(int(r["seed"]) for r in group))
        rows.append(SummaryRow(setting, seeds, stats))
    return rows


def summary_csv(rows: Sequence[SummaryRow], metrics: Sequence[str]) -> str:
    """One row per setting: coordinates, seeds, then ``M``, ``M_low``, ``M_high`` per metric."""
    coords = [k for k in COORDINATES if k != "seed"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*coords, "seeds", *(f"{m}{s}" for m in metrics for s in ("", "_low", "_high"))])
    for row in rows:
        cells = [csv_cell(row.setting.get(k)) for k in coords]
        cells.append(" ".join(map(str, row.seeds)))
        for m in metrics:
            iv = row.stats[m]
            cells += [csv_cell(iv.mean), csv_cell(iv.low), csv_cell(iv.high)]
        w.writerow(cells)
    return buf.getvalue()


def _fmt(iv: Interval, scale: float, fmt: str) -> str:
    if iv.n == 0:
        return "—"
    text = fmt.format(iv.mean * scale)
    if iv.n > 1:
        unit = " %" if fmt.endswith(" %") else ""
        num = fmt.removesuffix(" %")
        text = (
            f"{num.format(iv.mean * scale)} [{num.format(iv.low * scale)}, "
            f"{num.format(iv.high * scale)}]{unit}"
        )
    return text


def _tables(rows: Sequence[SummaryRow]) -> dict[str, list[SummaryRow]]:
    tables: dict[str, list[SummaryRow]] = {}
    for row in rows:
        key = json.dumps({k: row.setting.get(k) for k in _TABLE_KEYS}, sort_keys=True)
        tables.setdefault(key, []).append(row)
    return tables


def summary_markdown(
    rows: Sequence[SummaryRow], *, reference: str | None = "crop", level: float = 0.95
) -> str:
    """Markdown tables, one per (trace, cluster, hardware, ...) with a row per profile and policy.

    Each cell is ``mean [low, high]`` over the seeds (just the value with one seed). When
    ``reference`` is one of the policies, a headline table compares it with the best other policy
    of each setting on mean JCT and η̄ (ratios of the means over seeds).
    """
    present = [
        m for m in TABLE_METRICS if any(r.stats.get(m, Interval(0, 0, 0, 0)).n for r in rows)
    ]
    seeds = sorted({s for r in rows for s in r.seeds})
    lines = [
        "# Study summary",
        "",
        f"Seeds: {', '.join(map(str, seeds))}. Cells: mean over seeds "
        f"[{level:.0%} percentile-bootstrap interval of the mean]"
        + (" (one seed: no interval)." if len(seeds) == 1 else "."),
        "",
    ]
    warning = few_seeds_warning(rows)
    if warning is not None:
        lines += [f"**Warning:** {warning}.", ""]
    tables = _tables(rows)
    if reference is not None and any(r.setting["policy"] == reference for r in rows):
        lines += _headline_markdown(headline(rows, reference), reference)
    for group in tables.values():
        lines += [f"## {setting_title(group[0].setting)}", ""]
        header = ["abnormal", "policy", *(TABLE_METRICS[m][0] for m in present)]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for row in group:
            cells = [str(row.setting["abnormal"]), str(row.setting["policy"])]
            cells += [_fmt(row.stats[m], *TABLE_METRICS[m][1:]) for m in present]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


#: Metrics of the headline: key → (column title, lower is better).
_HEADLINE_METRICS: dict[str, tuple[str, bool]] = {
    "mean_jct_s": ("mean JCT vs best (policy)", True),
    "mean_efficiency": ("η̄ vs best (policy)", False),
}


def headline(rows: Sequence[SummaryRow], reference: str) -> list[HeadlineRow]:
    """Per setting and profile, ``reference`` against the best other policy on mean JCT and η̄.

    The reference's own variants (:func:`is_variant`) are left out of the comparison: against
    ``crop-plain``, which places as CROP does, every row would read +0.0 %.
    """
    out = []
    for group in _tables(rows).values():
        for abnormal in dict.fromkeys(r.setting["abnormal"] for r in group):
            by_policy = {r.setting["policy"]: r for r in group if r.setting["abnormal"] == abnormal}
            ref = by_policy.get(reference)
            others = [
                r for p, r in by_policy.items() if p != reference and not is_variant(p, reference)
            ]
            if ref is None or not others:
                continue
            cells = []
            for metric, (_, lower_is_better) in _HEADLINE_METRICS.items():
                cands = [r for r in others if r.stats[metric].n]
                if not cands or not ref.stats[metric].n:
                    continue
                pick = min if lower_is_better else max
                top = pick(cands, key=lambda r, m=metric: r.stats[m].mean)  # type: ignore[misc]
                change = ref.stats[metric].mean / top.stats[metric].mean - 1.0
                cells.append(HeadlineCell(metric, str(top.setting["policy"]), change))
            out.append(HeadlineRow(setting_title(group[0].setting), str(abnormal), tuple(cells)))
    return out


def _headline_markdown(rows: Sequence[HeadlineRow], reference: str) -> list[str]:
    lines = [
        f"## Headline: {reference} against the best other policy",
        "",
        f"Change of {reference}'s mean JCT and η̄ against the other policy that is best on that "
        f"metric in the same setting (ratio of the means over seeds; negative JCT = faster); "
        f"{reference}'s own variants ({reference}-...) left out.",
        "",
        "| setting | abnormal | " + " | ".join(t for t, _ in _HEADLINE_METRICS.values()) + " |",
        "|---|---|" + "---|" * len(_HEADLINE_METRICS),
    ]
    for row in rows:
        by_metric = {c.metric: c for c in row.cells}
        cells = [
            f"{by_metric[m].change:+.1%} ({by_metric[m].policy})" if m in by_metric else "—"
            for m in _HEADLINE_METRICS
        ]
        lines.append(f"| {row.title} | {row.abnormal} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def summary_json(
    rows: Sequence[SummaryRow], metrics: Sequence[str], *, reference: str | None = "crop"
) -> str:
    """The summary as JSON: every setting's intervals, the headline and the warnings.

    ``{"seeds": [...], "warnings": [...], "reference": ..., "headline": [{"setting", "abnormal",
    METRIC: {"policy", "change"}}], "settings": [{"setting": {...}, "seeds": [...], "stats":
    {METRIC: {"mean", "low", "high", "n"}}}]}``; non-finite numbers are ``null``.
    """

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    warning = few_seeds_warning(rows)
    has_ref = reference is not None and any(r.setting["policy"] == reference for r in rows)
    data = {
        "seeds": sorted({s for r in rows for s in r.seeds}),
        "warnings": [warning] if warning is not None else [],
        "reference": reference if has_ref else None,
        "headline": [
            {
                "setting": h.title,
                "abnormal": h.abnormal,
                **{c.metric: {"policy": c.policy, "change": num(c.change)} for c in h.cells},
            }
            for h in (headline(rows, reference) if has_ref and reference is not None else [])
        ],
        "settings": [
            {
                "setting": r.setting,
                "seeds": list(r.seeds),
                "stats": {
                    m: {
                        "mean": num(r.stats[m].mean),
                        "low": num(r.stats[m].low),
                        "high": num(r.stats[m].high),
                        "n": r.stats[m].n,
                    }
                    for m in metrics
                },
            }
            for r in rows
        ],
    }
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def plot_summary(rows: Sequence[SummaryRow], path: str | Path) -> None:
    """Mean JCT and η̄ per policy and profile, with interval error bars, one figure row per table.

    Writes ``path`` (format from the suffix) with matplotlib's Agg backend.
    """
    from crop_gym.plotting import new_figure, save_figure

    tables = list(_tables(rows).values())
    panels: tuple[tuple[str, str, float], ...] = (
        ("mean_jct_s", "mean JCT (hours, lower is better)", 1 / 3600.0),
        ("mean_efficiency", "η̄: throughput per allocated GPU (1 = ideal)", 1.0),
    )
    fig = new_figure(6.0 * len(panels), 3.6 * len(tables))
    axes = fig.subplots(len(tables), len(panels), squeeze=False)
    for axrow, group in zip(axes, tables):
        policies = list(dict.fromkeys(r.setting["policy"] for r in group))
        profiles = list(dict.fromkeys(r.setting["abnormal"] for r in group))
        width = 0.8 / len(profiles)
        x = np.arange(len(policies))
        for ax, (metric, label, scale) in zip(axrow, panels):
            for i, prof in enumerate(profiles):
                by_policy = {
                    r.setting["policy"]: r.stats[metric]
                    for r in group
                    if r.setting["abnormal"] == prof
                }
                ivs = [
                    by_policy.get(p, Interval(math.nan, math.nan, math.nan, 0)) for p in policies
                ]
                mean = np.array([iv.mean for iv in ivs]) * scale
                err = (
                    np.array([[iv.mean - iv.low for iv in ivs], [iv.high - iv.mean for iv in ivs]])
                    * scale
                )
                ax.bar(x + (i - (len(profiles) - 1) / 2) * width, mean, width, label=prof)
                ax.errorbar(
                    x + (i - (len(profiles) - 1) / 2) * width,
                    mean,
                    yerr=np.nan_to_num(err),
                    fmt="none",
                    ecolor="black",
                    capsize=2,
                    lw=0.8,
                )
            ax.set_xticks(x, policies, rotation=30, ha="right", fontsize=8)
            ax.set_xlabel("policy")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0.0)
            ax.set_title(setting_title(group[0].setting), fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(title="abnormal", fontsize=8)
    fig.suptitle(
        "Study summary: mean over seeds, error bars = bootstrap 95 % interval", fontsize=11
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
