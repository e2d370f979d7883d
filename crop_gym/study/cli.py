"""The ``crop-gym study`` command: a grid of simulations, run locally or on Ray, resumable.

Usage::

    crop-gym study --traces elasticflow:cluster10 --cluster n32g8 --policies crop,best-fit \
        --abnormal mild --seeds 2 --backend local --out DIR
    crop-gym study --study study.yaml --backend ray --address auto --out DIR

Lists are comma-separated; ``--policies all`` is every registered policy, ``--cluster auto`` (the
default) ElasticFlow's cluster for each trace. Flags override the fields of a ``--study`` file.
A re-run with the same ``--out`` skips the runs already finished there (docs/STUDY.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from crop_gym.cli import int_at_least, number_at_least

__all__ = ["ENDING_SIGNALS", "Terminated", "register", "run"]

_positive_int = int_at_least(1)
_count = int_at_least(0)

#: Signals whose default action ends the driver and that a study turns into :class:`Terminated`,
#: so that it stops its workers first (SIGINT is Ctrl-C, already an exception; SIGKILL cannot be
#: caught: on Linux the workers then get SIGTERM from the kernel, see
#: :func:`crop_gym.study.worker.worker_init`). Timer signals are left to profilers and tests.
ENDING_SIGNALS: tuple[str, ...] = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGXCPU")


class Terminated(BaseException):
    """The driver got one of :data:`ENDING_SIGNALS` (a ``BaseException``, as KeyboardInterrupt is,
    so that no ``except Exception`` on the way swallows it).

    Attributes:
        signum: The signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _signals_end_the_study() -> Iterator[None]:
    """Raise :class:`Terminated` on any of :data:`ENDING_SIGNALS` until the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {}
    for name in ENDING_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, end)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Merged outputs written under ``--out`` after the runs (see :mod:`crop_gym.study.results`).
MERGED_OUTPUTS: tuple[str, ...] = (
    "results.json",
    "results.csv",
    "summary.csv",
    "summary.md",
    "summary.png",
    "jct_cdf.png",
)


def register(subparsers: Any) -> None:
    """Add the ``study`` sub-command to the ``crop-gym`` parser."""
    p = subparsers.add_parser(
        "study",
        help="run a grid of simulations (traces x clusters x policies x profiles x seeds)",
        description=(
            "Run every combination of traces, clusters, hardware profiles, policies, abnormality "
            "profiles and seeds in the simulator, on local processes or a Ray cluster. Each run's "
            "result is written atomically to OUT/runs/<run id>.json; a re-run skips finished "
            "runs. Then writes merged JSON/CSV, a summary with bootstrap 95%% intervals over "
            "seeds (CSV and markdown) and a figure."
        ),
    )
    p.add_argument("--study", metavar="FILE", default=None, help="study file (.yaml/.json/.toml)")
    p.add_argument("--traces", default=None, metavar="LIST", help="bundled traces or files")
    p.add_argument(
        "--cluster",
        "--clusters",
        dest="clusters",
        default=None,
        metavar="LIST",
        help="topology presets, or auto: ElasticFlow's cluster per trace (default auto)",
    )
    p.add_argument(
        "--hardware", default=None, metavar="LIST", help="hardware profiles (default: default)"
    )
    p.add_argument(
        "--policies", default=None, metavar="LIST", help="policies, or all (every registered one)"
    )
    p.add_argument(
        "--abnormal",
        default=None,
        metavar="LIST",
        help="abnormality profiles: none, mild, severe, testbed (default none)",
    )
    p.add_argument(
        "--seeds", type=_positive_int, default=None, metavar="N", help="N seeds (default 1)"
    )
    p.add_argument(
        "--first-seed", type=_count, default=0, metavar="S", help="seeds S .. S+N-1 (default 0)"
    )
    p.add_argument(
        "--jobs",
        "--max-jobs",
        dest="jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="simulate the first N jobs of each trace (default all)",
    )
    p.add_argument(
        "--arrival-scale",
        type=number_at_least(0.0, inclusive=False),
        default=None,
        metavar="X",
        help="multiply arrival times by X (< 1 loads the cluster more; default 1)",
    )
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="default local")
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="local worker processes (default: the CPU count; 1 = in this process)",
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="Ray cluster: auto, ray://HOST:10001 (default: RAY_ADDRESS, else a local Ray)",
    )
    p.add_argument(
        "--retries",
        type=_count,
        default=3,
        metavar="N",
        help="times a run is retried when its worker dies (default 3)",
    )
    p.add_argument(
        "--out", required=True, metavar="DIR", help="results folder (created if missing)"
    )
    p.add_argument(
        "--rerun", action="store_true", help="run finished runs again (default: skip them)"
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing; merge and summarise the finished runs of the study",
    )
    p.add_argument(
        "--bootstrap",
        type=_positive_int,
        default=2000,
        metavar="N",
        help="bootstrap resamples of each interval (default 2000)",
    )
    p.add_argument(
        "--bootstrap-seed", type=_count, default=0, metavar="S", help="seed of the bootstrap"
    )
    p.add_argument(
        "--reference",
        default="crop",
        metavar="POLICY",
        help="policy the summary's headline compares with the best other (default crop; its own "
        "variants, POLICY-..., are left out of the headline)",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the summary (intervals, headline, warnings) as JSON ('-': to stdout, the "
        "report then goes to stderr)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse trace columns the format does not read (without it, a misspelt optional "
        "column such as 'wieght' warns and is ignored)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not draw summary.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def build_spec(args: argparse.Namespace) -> Any:
    """The :class:`~crop_gym.study.spec.StudySpec` of the command line (over ``--study``)."""
    from crop_gym.errors import ConfigError
    from crop_gym.study.spec import StudySpec, load_study

    flags = {
        "traces": args.traces,
        "clusters": args.clusters,
        "hardware": args.hardware,
        "policies": args.policies,
        "abnormal": args.abnormal,
        "jobs": args.jobs,
        "arrival_scale": args.arrival_scale,
    }
    if args.seeds is not None:
        flags["seeds"] = tuple(range(args.first_seed, args.first_seed + args.seeds))
    elif args.first_seed:
        flags["seeds"] = (args.first_seed,)
    given = {k: v for k, v in flags.items() if v is not None}
    if args.study is not None:
        base = load_study(args.study)
        return base.replace(**given) if given else base
    for required in ("traces", "policies"):
        if required not in given:
            raise ConfigError(f"--{required} is required without --study")
    return StudySpec(**given)


def run(args: argparse.Namespace) -> int:
    """Execute ``crop-gym study``; returns the exit code."""
    from crop_gym.cli import check_input_file, report_stream, write_outputs
    from crop_gym.errors import ConfigError
    from crop_gym.io import check_outputs
    from crop_gym.plotting import save_figure
    from crop_gym.study.backends import make_backend
    from crop_gym.study.figures import jct_cdf_figure
    from crop_gym.study.grid import expand
    from crop_gym.study.report import (
        few_seeds_warning,
        plot_summary,
        summarize,
        summary_csv,
        summary_json,
        summary_markdown,
    )
    from crop_gym.study.results import finished_records, merged_csv, merged_json, scalar_metrics
    from crop_gym.study.runner import StudyOutcome, run_study
    from crop_gym.workloads.loader import check_trace_columns

    check_input_file(args.study, what="study")
    spec = build_spec(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out}: is not a folder")
    if args.address is not None and args.backend != "ray":
        raise ConfigError("--address is for --backend ray")
    names = [n for n in MERGED_OUTPUTS if not (args.no_plot and n.endswith(".png"))]
    inputs = [args.study, *spec.trace_files]
    out.mkdir(parents=True, exist_ok=True)
    folders = check_outputs(
        {**{f"--out {n}": str(out / n) for n in names}, "--json": args.json}, inputs=inputs
    )
    report = report_stream(args.json)
    for trace in spec.trace_files:  # once here, not in every worker (they do not warn again)
        check_trace_columns(trace, strict=args.strict)
    if args.report_only:
        runs = expand(spec)
        found = finished_records(out, runs)
        if not found:
            raise ConfigError(f"--out {args.out}: no finished run of this study")
        outcome = StudyOutcome(tuple(runs), found, len(found), 0, 0.0)
    else:
        workers = args.workers or os.cpu_count() or 1
        backend = make_backend(
            args.backend, workers=workers, address=args.address, retries=args.retries
        )
        print(f"study: {spec.size} runs, results in {out}", file=report, flush=True)
        try:
            with _signals_end_the_study():
                outcome = run_study(
                    spec, out, backend, resume=not args.rerun, progress=not args.no_progress
                )
        except Terminated as stop:
            print(
                f"crop-gym study: stopped by {stop}; its workers are stopped and the runs "
                "finished are kept: run the same command again to resume",
                file=sys.stderr,
            )
            return 128 + stop.signum
        print(
            f"{outcome.executed} run(s) executed on {backend.name} in {outcome.wall_s:.1f} s, "
            f"{outcome.skipped} already finished",
            file=report,
            flush=True,
        )
    records = outcome.ordered_records()
    metrics = scalar_metrics(records)
    rows = summarize(records, metrics, resamples=args.bootstrap, seed=args.bootstrap_seed)
    missing = len(outcome.runs) - len(records)
    warning = few_seeds_warning(rows)
    if warning is not None:
        warnings.warn(warning, stacklevel=1)
    writers: dict[str, Callable[[Path], object]] = {
        str(out / "results.json"): lambda p: p.write_text(merged_json(records), encoding="utf-8"),
        str(out / "results.csv"): lambda p: p.write_text(merged_csv(records), encoding="utf-8"),
        str(out / "summary.csv"): lambda p: p.write_text(
            summary_csv(rows, metrics), encoding="utf-8"
        ),
        str(out / "summary.md"): lambda p: p.write_text(
            summary_markdown(rows, reference=args.reference) + "\n", encoding="utf-8"
        ),
    }
    if not args.no_plot:
        writers[str(out / "summary.png")] = lambda p: plot_summary(rows, p)
        writers[str(out / "jct_cdf.png")] = lambda p: save_figure(jct_cdf_figure(records), p)
    if args.json is not None:
        text = summary_json(rows, metrics, reference=args.reference)
        writers[args.json] = lambda p: p.write_text(text, encoding="utf-8")
    for path in write_outputs(writers, folders):
        print(f"wrote {path}", file=report)
    if missing:
        print(
            f"{missing} run(s) of the study not finished yet: run again without --report-only",
            file=report,
        )
    return 0
