"""Summaries of workloads: a JSON-ready dict and a readable table.

GPU-hours are ``Σ duration × num_gpus / 3600`` for jobs whose source recorded a duration (ElasticFlow
traces; the synthetic generator's nominal durations). For the others (Pollux files, generic CSV
without ``duration_s``) they are an **estimate** from the model zoo: ``iterations × Job.compute_time ×
num_gpus / 3600``, the compute-only time on reference GPUs, which ignores communication and is
therefore a lower bound. ``gpu_hours_source`` says which was used: ``"duration"``, ``"estimate"`` or
``"mixed"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crop_gym.workloads.workload import Workload

__all__ = ["format_summary", "summarize"]

_ESTIMATE_NOTE = "estimate: iterations x compute time on reference GPUs (no communication)"


def summarize(workload: Workload) -> dict[str, Any]:
    """Key facts of a workload, as plain JSON-serialisable values.

    Args:
        workload: The workload.

    Returns:
        A dict with ``name``, ``source``, ``format``, ``jobs``, ``span_s``, ``time_offset_s``,
        ``arrival_rate_per_h``, ``gpus`` (``total``, ``max``, ``histogram`` {count: jobs}),
        ``models`` {model: jobs}, ``iterations_total``, ``gpu_hours``, ``gpu_hours_source``,
        ``gpu_hours_note``, ``gpu_hours_by_gpus`` {count: GPU-hours} and ``deadlines`` (jobs with one).
    """
    a = workload.arrays
    n = len(a)
    span = float(a.arrival[-1]) if n else 0.0
    gpus = a.num_gpus
    known = ~np.isnan(a.duration)
    seconds = np.where(known, a.duration, a.iterations * a.compute_time()) if n else np.zeros(0)
    gpu_hours_each = seconds * gpus / 3600.0
    if n == 0 or known.all():
        source = "duration"
    elif not known.any():
        source = "estimate"
    else:
        source = "mixed"
    note = {
        "duration": (
            "from the generator's nominal durations"
            if workload.format == "synthetic"
            else "from the durations recorded in the source"
        ),
        "estimate": _ESTIMATE_NOTE,
        "mixed": f"recorded durations for {int(known.sum())} jobs; {_ESTIMATE_NOTE} for the rest",
    }[source]
    sizes, size_counts = np.unique(gpus, return_counts=True)
    model_counts = np.bincount(a.model_index, minlength=len(a.model_names))
    models = sorted(zip(a.model_names, model_counts.tolist()), key=lambda t: (-t[1], t[0]))
    return {
        "name": workload.name,
        "source": workload.source,
        "format": workload.format,
        "jobs": n,
        "span_s": span,
        "time_offset_s": workload.time_offset,
        "arrival_rate_per_h": (n - 1) / span * 3600.0 if span > 0 else None,
        "gpus": {
            "total": int(gpus.sum()),
            "max": int(gpus.max()) if n else 0,
            "histogram": {str(k): int(c) for k, c in zip(sizes.tolist(), size_counts.tolist())},
        },
        "models": dict(models),
        "iterations_total": float(a.iterations.sum()),
        "gpu_hours": float(gpu_hours_each.sum()),
        "gpu_hours_source": source,
        "gpu_hours_note": note,
        "gpu_hours_by_gpus": {
            str(k): float(gpu_hours_each[gpus == k].sum()) for k in sizes.tolist()
        },
        "deadlines": int((~np.isnan(a.deadline)).sum()),
    }


def _duration(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds:,.0f} s ({seconds / 86_400:.1f} d)"
    if seconds >= 3_600:
        return f"{seconds:,.0f} s ({seconds / 3_600:.1f} h)"
    return f"{seconds:,.0f} s"


def format_summary(summary: dict[str, Any]) -> str:
    """Render :func:`summarize`'s dict as a readable text table."""
    n = summary["jobs"]
    rate = summary["arrival_rate_per_h"]
    hours = summary["gpu_hours"]
    est = "" if summary["gpu_hours_source"] == "duration" else " (estimate)"
    lines = [
        f"workload     {summary['name']}  [{summary['format']}]",
        f"source       {summary['source']}",
        f"jobs         {n:,}",
        f"span         {_duration(summary['span_s'])}  (first arrival rebased to 0;"
        f" offset {summary['time_offset_s']:,.0f} s)",
        f"arrivals     {'-' if rate is None else f'{rate:,.2f} jobs/h'}",
        f"GPUs         {summary['gpus']['total']:,} requested in total, largest job"
        f" {summary['gpus']['max']}",
        f"iterations   {summary['iterations_total']:,.0f}",
        f"GPU-hours    {hours:,.1f}{est}  ({summary['gpu_hours_note']})",
        f"deadlines    {summary['deadlines']:,} jobs",
        "",
        f"{'GPUs/job':>8}  {'jobs':>8}  {'share':>6}  {'GPU-hours':>12}  {'share':>6}",
    ]
    for k, count in summary["gpus"]["histogram"].items():
        gh = summary["gpu_hours_by_gpus"][k]
        job_share = count / n if n else 0.0
        gh_share = gh / hours if hours else 0.0
        lines.append(f"{k:>8}  {count:>8,}  {job_share:>6.1%}  {gh:>12,.1f}  {gh_share:>6.1%}")
    lines += ["", f"{'model':<14}  {'jobs':>8}  {'share':>6}"]
    for model, count in summary["models"].items():
        lines.append(f"{model:<14}  {count:>8,}  {(count / n if n else 0.0):>6.1%}")
    return "\n".join(lines)
