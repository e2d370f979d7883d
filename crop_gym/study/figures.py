"""Figures of trace-study records: grouped bars per policy and JCT CDFs.

The records are those of ``crop-gym study`` (``OUT/results.json``; the full study's are in
``docs/results/study/results.json``) or of the older trace evaluation (where the abnormality
profile is ``profile``): one
dict per run with the setting (``trace``, ``jobs``, ``cluster``, ``arrival_scale``, ...), the
``policy``, the ``seed``, scalar metrics and ``jct_quantiles_s`` (the 0th…100th percentiles of the
run's job completion times).

* :func:`bars_figure`: mean JCT (hours), η̄ and time-averaged effective GPUs per policy, one bar
  per abnormality profile; axes start at 0; error bars span the seeds (min…max) when there are
  several.
* :func:`jct_cdf_figure`: one panel per profile (and a row per setting), one line per policy: the
  CDF whose quantiles are the mean over seeds of the runs' quantiles. CROP is a wide translucent
  red band drawn *first*, underneath: a policy whose curve is CROP's (``crop-plain`` places as
  CROP does) stays visible on top of it instead of being hidden; ablations are dashed; see
  :mod:`crop_gym.plotting`.
* :func:`write_setting_figures`: both, per setting, as ``<prefix><slug>_bars.png`` and
  ``<prefix><slug>_jct_cdf.png`` (docs/figures is made this way: docs/figures/README.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.plotting import new_figure, policy_style, save_figure
from crop_gym.study.grid import setting_title

__all__ = [
    "CROP_BAND",
    "bars_figure",
    "jct_cdf_figure",
    "setting_slug",
    "setting_title",
    "split_by_setting",
    "write_setting_figures",
]

Record = Mapping[str, Any]
#: How CROP's CDF is drawn: wide, translucent and under the other lines (their z-orders are >= 3).
CROP_BAND: dict[str, Any] = {"lw": 6.0, "alpha": 0.4, "zorder": 2, "solid_capstyle": "butt"}
_PROFILE_COLOURS = {"none": "tab:blue", "mild": "tab:orange", "severe": "tab:green"}
_BAR_PANELS = (
    ("mean_jct_s", "mean JCT (hours, lower is better)", 1 / 3600.0),
    ("mean_efficiency", "η̄: throughput per allocated GPU (1 = ideal)", 1.0),
    ("mean_effective_gpus", "time-averaged F (effective GPUs)", 1.0),
)


def _profile(r: Record) -> str:
    return str(r.get("abnormal", r.get("profile")))


def split_by_setting(records: Sequence[Record]) -> dict[str, list[Record]]:
    """Records grouped by :func:`setting_title`, in first-seen order."""
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(setting_title(r), []).append(r)
    return out


def _ordered(records: Sequence[Record], key: str) -> list[str]:
    """Policies in the registry's order, profiles in :data:`PROFILES` order (others follow)."""
    from crop_gym.model.health import PROFILES
    from crop_gym.policy import policy_names

    order = [*policy_names(), *PROFILES]
    seen = list(dict.fromkeys(str(r[key]) if key == "policy" else _profile(r) for r in records))
    return sorted(seen, key=lambda n: order.index(n) if n in order else len(order))


def bars_figure(records: Sequence[Record], title: str = "") -> Any:
    """Grouped bars (policy × profile) of mean JCT, η̄ and F; a matplotlib ``Figure`` (Agg)."""
    policies, profiles = _ordered(records, "policy"), _ordered(records, "profile")
    fig = new_figure(16.0, 4.6)
    axes = fig.subplots(1, len(_BAR_PANELS))
    width = 0.8 / max(len(profiles), 1)
    x = np.arange(len(policies))
    seeds = sorted({r.get("seed") for r in records}, key=str)
    for ax, (metric, label, scale) in zip(axes, _BAR_PANELS, strict=True):
        for i, prof in enumerate(profiles):
            vals = [
                [
                    scale * float(r[metric])
                    for r in records
                    if r["policy"] == p and _profile(r) == prof and r.get(metric) is not None
                ]
                for p in policies
            ]
            mean = np.array([np.mean(v) if v else np.nan for v in vals])
            # (clipped at 0: equal seeds give a mean a rounding error above their minimum)
            lo = np.array([max(mean[k] - min(v), 0.0) if v else 0.0 for k, v in enumerate(vals)])
            hi = np.array([max(max(v) - mean[k], 0.0) if v else 0.0 for k, v in enumerate(vals)])
            ax.bar(
                x + (i - (len(profiles) - 1) / 2) * width,
                mean,
                width,
                yerr=np.vstack([lo, hi]) if len(seeds) > 1 else None,
                capsize=2,
                color=_PROFILE_COLOURS.get(prof),
                label=prof,
            )
        ax.set_xticks(x, policies, rotation=35, ha="right", fontsize=8)
        for tick in ax.get_xticklabels():
            if tick.get_text() == "crop":
                tick.set_fontweight("bold")
        ax.set_xlabel("policy")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0.0)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(title="abnormal devices", fontsize=8)
    what = (
        f"mean over {len(seeds)} seeds, error bars min…max"
        if len(seeds) > 1
        else f"seed {seeds[0]}"
    )
    fig.suptitle(f"{title} ({what})" if title else what)
    fig.tight_layout()
    return fig


def _mean_quantiles(runs: Sequence[Record]) -> np.ndarray | None:
    qs = [
        np.asarray(r["jct_quantiles_s"], dtype=np.float64) for r in runs if r.get("jct_quantiles_s")
    ]
    qs = [q for q in qs if len(q) and np.all(np.isfinite(q))]
    if not qs or len({len(q) for q in qs}) != 1:
        return None
    return np.mean(qs, axis=0)


def jct_cdf_figure(records: Sequence[Record], title: str = "") -> Any:
    """JCT CDFs: a row per setting, a panel per profile, a line per policy; a ``Figure`` (Agg).

    CROP is a wide translucent band under every other line (:data:`CROP_BAND`), so that a line
    that coincides with CROP's stays visible, and CROP still stands out.
    """
    groups = split_by_setting(records)
    profiles = _ordered(records, "profile")
    policies = _ordered(records, "policy")
    # CROP first and lowest: the others are drawn over its band.
    draw_order = [p for p in policies if p == "crop"] + [p for p in policies if p != "crop"]
    fig = new_figure(5.3 * len(profiles), 3.9 * len(groups) + 0.6)
    axes = fig.subplots(len(groups), len(profiles), squeeze=False)
    for row, (setting, runs) in zip(axes, groups.items(), strict=True):
        for ax, prof in zip(row, profiles, strict=True):
            for p in draw_order:
                q = _mean_quantiles([r for r in runs if r["policy"] == p and _profile(r) == prof])
                if q is None:
                    continue
                style = policy_style(p, policies)
                if p == "crop":
                    style = {**style, **CROP_BAND}
                ax.plot(q / 3600.0, np.linspace(0.0, 1.0, len(q)), label=p, **style)
            ax.set_xscale("log")
            ax.set_ylim(0.0, 1.02)
            ax.set_xlabel("job completion time (hours, log scale)")
            ax.set_ylabel("fraction of jobs")
            ax.set_title(
                f"{setting}: abnormal {prof}" if len(groups) > 1 else f"abnormal: {prof}",
                fontsize=10,
            )
            ax.grid(alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    order = [labels.index(p) for p in policies if p in labels]
    fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        title="policy",
        fontsize=8,
        loc="center right",
    )
    seeds = sorted({r.get("seed") for r in records}, key=str)
    what = "quantiles averaged over seeds" if len(seeds) > 1 else f"seed {seeds[0]}"
    fig.suptitle(f"{title}: JCT CDF ({what})" if title else f"JCT CDF ({what})")
    fig.tight_layout(rect=(0.0, 0.0, 1.0 - 1.3 / fig.get_figwidth(), 1.0))
    return fig


def setting_slug(title: str) -> str:
    """The file-name form of a setting title (the figures are ``<prefix><slug>_<kind>.png``)."""
    return re.sub(r"[^A-Za-z0-9]", "_", title)


def write_setting_figures(
    records: Sequence[Record], out: str | os.PathLike[str], *, prefix: str = "trace_"
) -> list[Path]:
    """Write the bars and the JCT CDFs of each setting under ``out``; returns the files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for title, runs in split_by_setting(records).items():
        for kind, make in (("bars", bars_figure), ("jct_cdf", jct_cdf_figure)):
            path = out / f"{prefix}{setting_slug(title)}_{kind}.png"
            save_figure(make(runs, title), path)
            written.append(path)
    return written
