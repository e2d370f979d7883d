"""The ``crop-gym simulate`` command: run a placement policy over a trace in the simulator.

Usage::

    crop-gym simulate --trace elasticflow:cluster10 [--cluster n32g8] [--hardware NAME|PATH]
        [--policy crop]
        [--abnormal none|mild|severe|testbed] [--jobs N] [--seed S] [--checkpoint-interval SECONDS]
        [--json PATH] [--csv PATH] [--plot PATH]

``--json -`` (or ``--csv -``) writes to stdout, and the report then goes to stderr. Outputs are
checked before the run (never an input, another output, a directory or a special file).

Importing this module is cheap; the simulator, the workloads and the policies (looked up in
:mod:`crop_gym.policy`) are imported only when the command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crop_gym.cli import int_at_least, number_at_least

__all__ = ["ELASTICFLOW_CLUSTERS", "default_cluster", "format_metrics", "register"]

#: The cluster ElasticFlow simulated each of its traces on (the rest used n64g8).
ELASTICFLOW_CLUSTERS: dict[str, str] = {
    "elasticflow:cluster10": "n32g8",
    "elasticflow:cluster04": "n128g8",
    "elasticflow:cluster07": "n128g8",
    "elasticflow:cluster08": "n128g8",
    "elasticflow:cluster09": "n128g8",
}


def default_cluster(trace: str) -> str:
    """The cluster preset for a trace: ElasticFlow's size for its bundled traces, else ``n64g8``.

    ``elasticflow:195job`` (a 2-day slice of 195 jobs) runs on ``n32g8``.
    """
    name = trace if ":" in trace else f"elasticflow:{trace}"
    if name == "elasticflow:195job":
        return "n32g8"
    return ELASTICFLOW_CLUSTERS.get(name, "n64g8")


_positive_int = int_at_least(1)
_seed = int_at_least(0)


def _seconds(text: str) -> float:
    if text.lower() in {"inf", "never", "none"}:
        return float("inf")
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (a number or 'never'), got {text!r}"
        ) from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return v


def register(subparsers: Any) -> None:
    """Add the ``simulate`` sub-command to the ``crop-gym`` parser."""
    p = subparsers.add_parser(
        "simulate",
        help="run a placement policy over a job trace in the discrete-event simulator",
        description=(
            "Trace-driven discrete-event simulation: jobs arrive from a trace, the policy places "
            "them on the cluster, abnormal devices come and go, failures cost the work since the "
            "last checkpoint. Prints JCT, utilisation, effective GPUs and failure figures."
        ),
    )
    p.add_argument(
        "--trace", required=True, help="bundled trace (e.g. elasticflow:cluster10) or a file path"
    )
    p.add_argument(
        "--format",
        choices=("elasticflow", "pollux", "csv"),
        default=None,
        help="file format (default: the bundled trace's, or detected from the header)",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="map a model the zoo does not know to a known one; repeatable",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="PRESET",
        help="topology preset (default: ElasticFlow's cluster for the trace, else n64g8)",
    )
    p.add_argument(
        "--hardware",
        default=None,
        metavar="NAME|PATH",
        help="hardware profile: a bundled name, a profile file, or profiles joined by '+' for "
        "mixed GPU types (default a100-elasticflow, the package calibration)",
    )
    p.add_argument(
        "--policy",
        default="crop",
        help="placement policy (crop, first-fit, best-fit, ...; an unknown name lists them; "
        "default crop)",
    )
    p.add_argument(
        "--abnormal",
        default="none",
        metavar="PROFILE",
        help="abnormality profile: none, mild, severe, testbed (default none)",
    )
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="simulate the first N jobs only",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the health timeline and the policy, >= 0 (default 0)",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=_seconds,
        default=1800.0,
        metavar="SECONDS",
        help="seconds between checkpoints of a running job, or 'never' (default 1800)",
    )
    p.add_argument(
        "--failure-horizon",
        type=_seconds,
        default=86400.0,
        metavar="SECONDS",
        help="horizon of the failure probabilities π (default 86400)",
    )
    p.add_argument(
        "--repair-time",
        type=_seconds,
        default=4 * 3600.0,
        metavar="SECONDS",
        help="mean repair time of a failed GPU (default 14400)",
    )
    p.add_argument(
        "--no-transient", action="store_true", help="no abnormal onsets/recoveries over time"
    )
    p.add_argument("--no-failures", action="store_true", help="no GPU or link failures")
    p.add_argument(
        "--queue-view",
        choices=("fitting", "all"),
        default="fitting",
        help="what the policy is shown of the queue (default: jobs that fit in the free GPUs)",
    )
    p.add_argument(
        "--max-queue-view",
        type=_positive_int,
        default=None,
        metavar="N",
        help="show the policy at most the N oldest queued jobs",
    )
    p.add_argument(
        "--events-per-job",
        type=_positive_int,
        default=None,
        metavar="N",
        help="the run's event budget grows by N events per job (default 50: 20,000 + 50 per job, "
        "at most 10^7); a run that spends it stops with one line",
    )
    p.add_argument(
        "--max-hours",
        type=number_at_least(0.0, inclusive=False),
        default=None,
        metavar="H",
        help="stop after H simulated hours (jobs left unfinished are reported)",
    )
    p.add_argument(
        "--skip-oversized",
        action="store_true",
        help="skip (and report) jobs larger than the cluster instead of refusing the trace",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="write the metrics as JSON ('-': to stdout, the report then goes to stderr)",
    )
    p.add_argument(
        "--csv",
        metavar="PATH",
        default=None,
        help="write per-job records as CSV ('-': to stdout, the report then goes to stderr)",
    )
    p.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="save a JCT CDF + utilisation figure (png/pdf/svg)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse trace columns the format does not read (without it, a misspelt optional "
        "column such as 'wieght' warns and is ignored)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def format_metrics(summary: dict[str, Any]) -> str:
    """A short human-readable report of a simulation summary."""

    def h(key: str) -> str:
        v = summary.get(key)
        return "n/a" if v is None else f"{v / 3600.0:,.2f} h"

    def f(key: str, fmt: str = "{:,.3f}") -> str:
        v = summary.get(key)
        return "n/a" if v is None else fmt.format(v)

    lines = [
        f"policy {summary['policy']} | {summary['workload']} on {summary['cluster']} ({summary['gpus']} GPUs) "
        f"| abnormal {summary['profile']} | seed {summary['seed']}",
        f"jobs            {summary['jobs_completed']:,} completed of {summary['jobs_total']:,}"
        + (
            f" ({summary['jobs_skipped']} skipped: larger than the cluster)"
            if summary.get("jobs_skipped")
            else ""
        ),
        f"JCT             mean {h('mean_jct_s')}  p50 {h('p50_jct_s')}  p95 {h('p95_jct_s')}  p99 {h('p99_jct_s')}",
        f"queueing        mean {h('mean_queueing_s')}  p95 {h('p95_queueing_s')}",
        f"makespan        {h('makespan_s')}",
        f"utilisation     {f('mean_utilization', '{:.2%}')}   effective GPUs {f('mean_effective_gpus', '{:,.1f}')}"
        f"   throughput GPUs {f('mean_throughput_gpus', '{:,.1f}')}   goodput {f('goodput_gpus', '{:,.1f}')}",
        f"efficiency      {f('mean_efficiency', '{:.3f}')} (η over GPU-time)   comm overhead "
        f"{f('comm_overhead', '{:.2%}')}",
        f"failures        {summary['job_failures']} job interruptions ({summary['gpu_failures']} GPU failures, "
        f"{summary['link_failures']} link faults), lost {f('lost_gpu_hours', '{:,.1f}')} GPU-h",
        f"abnormal        {summary['abnormal_onsets']} onsets, {summary['abnormal_recoveries']} recoveries",
        f"simulation      {summary['events']:,} events, {summary['policy_calls']:,} policy calls, "
        f"{f('wall_s', '{:.2f}')} s wall ({f('events_per_s', '{:,.0f}')} events/s, "
        f"{f('policy_wall_s', '{:.2f}')} s in the policy)",
    ]
    if summary.get("truncated"):
        lines.append(f"stopped at the time limit with {summary['jobs_unfinished']} jobs unfinished")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Execute ``crop-gym simulate``; returns the exit code.

    The policy is looked up in :mod:`crop_gym.policy`'s registry (which loads the installed
    policy providers on first use). Outputs are checked before the run and written together after
    it; with ``--json -`` or ``--csv -`` the report goes to stderr.
    """
    from crop_gym.cli import check_input_file, check_plot_path, report_stream, write_outputs
    from crop_gym.io import check_outputs
    from crop_gym.model.hardware import DEFAULT_HARDWARE, hardware_files, resolve_hardware
    from crop_gym.policy import make_policy
    from crop_gym.sim import SimConfig, Simulator
    from crop_gym.workloads.cli import parse_map
    from crop_gym.workloads.loader import load_workload

    check_plot_path("--plot", args.plot)
    hw_files = hardware_files(args.hardware)
    folders = check_outputs(
        {"--json": args.json, "--csv": args.csv, "--plot": args.plot},
        inputs=[args.trace, *hw_files],
    )
    check_input_file(args.trace, what="trace")
    for f in hw_files:
        check_input_file(f, what="hardware profile")
    hardware = resolve_hardware(args.hardware or DEFAULT_HARDWARE)
    out = report_stream(args.json, args.csv)
    policy = make_policy(args.policy)
    model_map = parse_map(args.map)
    workload = load_workload(
        args.trace,
        format=args.format,
        model_map=model_map or None,
        max_jobs=args.jobs,
        strict=args.strict,
    )
    jobs = workload.jobs[: args.jobs] if args.jobs is not None else workload.jobs
    cluster = args.cluster or default_cluster(workload.name)
    config = SimConfig(
        perf=hardware.perf(),
        checkpoint_interval_s=args.checkpoint_interval,
        failure_horizon_s=args.failure_horizon,
        mean_repair_s=args.repair_time,
        transient_abnormalities=not args.no_transient,
        gpu_failures=not args.no_failures,
        link_failures=not args.no_failures,
        queue_view=args.queue_view,
        max_queue_view=args.max_queue_view,
        max_time_s=None if args.max_hours is None else args.max_hours * 3600.0,
        skip_oversized=args.skip_oversized,
        **({} if args.events_per_job is None else {"events_per_job": args.events_per_job}),
    )
    topology = hardware.topology(cluster)
    sim = Simulator(jobs, topology, profile=args.abnormal, config=config, seed=args.seed)
    sim.workload_name = workload.name + (f"[:{args.jobs}]" if args.jobs is not None else "")
    if sim.skipped:
        print(
            f"skipping {len(sim.skipped)} job(s) larger than {cluster} ({sim.topology.num_gpus} GPUs)",
            file=out,
        )
    result = sim.run(policy, progress=not args.no_progress)
    writers: dict[str, Callable[[Path], object]] = {}
    if args.json is not None:
        writers[args.json] = result.to_json
    if args.csv is not None:
        writers[args.csv] = result.to_csv
    if args.plot is not None:
        writers[args.plot] = result.plot
    written = write_outputs(writers, folders)
    print(format_metrics(result.summary()), file=out)
    print(f"event budget    {sim.event_budget:,} (used {sim.events:,})", file=out)
    if not hardware.is_default:
        print(f"hardware        {hardware.spec}", file=out)
    for path in written:
        print(f"wrote {path}", file=out)
    return 0
