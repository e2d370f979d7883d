"""The ``crop-gym calibrate`` command: fit the performance model to measurements.

Usage::

    crop-gym calibrate [--allreduce ring|hierarchical|both] [--json PATH|-] [--write [PATH]]
    crop-gym calibrate --profiles DIR --gpus-per-node N [--gpu-type NAME] [--cluster SUFFIX]
        [--app-map APP=MODEL ...] --out PROFILE.json [--json REPORT]
    crop-gym calibrate --hardware NAME|PROFILE.json --evaluate DIR [--cluster SUFFIX]
        [--app-map APP=MODEL ...] [--predictions OUT.csv] [--json OUT]
    crop-gym calibrate --evaluate DIR --gpus-per-node N (--fit-within-nodes K | --leave-one-app-out)
        [--predictions OUT.csv] [--json OUT]
    crop-gym calibrate --hardware NAME|PROFILE.json --new-app DIR/APP --out PROFILE.json
        [--grad-bytes BYTES]

Without ``--profiles`` / ``--evaluate`` it fits the bundled ElasticFlow A100 profiles: per
all-reduce algorithm, a table of the fitted compute coefficients and errors per model, the fitted
link parameters and the Chronus check (each spread marked against :data:`CHRONUS_TOLERANCE`); then
the default algorithm chosen by the evidence. ``--json`` writes the full result; ``--write``
regenerates ``crop_gym/data/calibration.json`` (the package's defaults).

``--profiles DIR`` fits a hardware profile to a folder of measured step times in the Pollux/Sia
format (:mod:`crop_gym.calibration.measurements`, :func:`crop_gym.calibration.fit.fit_profile`) and
writes it to ``--out``; ``--evaluate DIR`` predicts every row of such a folder with a profile
(:func:`crop_gym.calibration.fit.predict_step_time`), or with a profile fitted on part of it
(``--fit-within-nodes``, ``--leave-one-app-out``: :mod:`crop_gym.calibration.protocols`);
``--new-app`` adds an application to a profile from its 1-GPU rows. Each prints the scores per
application (:mod:`crop_gym.calibration.report`; :mod:`crop_gym.calibration.usercli` runs them).
Outputs are written atomically and never over an input.
Importing this module is cheap: numpy and scipy are imported when it runs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crop_gym.cli import int_at_least, number_at_least

if TYPE_CHECKING:
    from crop_gym.calibration import CalibrationResult

__all__ = ["CHRONUS_TOLERANCE", "default_calibration_path", "format_result", "register", "run"]

#: Largest |predicted - measured| Chronus relative throughput of a spread marked ``ok`` (the
#: issue's target for the mean error).
CHRONUS_TOLERANCE = 0.05


def default_calibration_path() -> Path:
    """Path of the package's ``data/calibration.json`` (the file ``--write`` regenerates)."""
    return Path(__file__).resolve().parent / "data" / "calibration.json"


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` sub-command to the ``crop-gym`` parser."""
    p = subparsers.add_parser(
        "calibrate",
        help="fit the performance model to the bundled A100 profiles and check it against Chronus",
        description=(
            "Fit per-model compute time (t0 + per_sample x local batch) and the intra/inter-server "
            "bandwidths and latencies to the ElasticFlow A100 throughput profiles (least squares on "
            "log iteration time), check the spread penalties against Chronus, and choose the "
            "default all-reduce algorithm by the evidence."
        ),
    )
    p.add_argument(
        "--allreduce",
        choices=("ring", "hierarchical", "both"),
        default=None,
        help="algorithm(s) to fit (default: both; the default algorithm is chosen among them)",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="write the results as JSON ('-': to stdout, the report then goes to stderr)",
    )
    p.add_argument(
        "--write",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="regenerate crop_gym/data/calibration.json (or write to PATH instead)",
    )
    p.add_argument(
        "--min-latency-ratio",
        type=number_at_least(0.0),
        default=None,
        metavar="R",
        help="constraint inter_latency >= R x intra_latency (default 4; see docs/MODEL.md)",
    )
    g = p.add_argument_group("your own measurements (Pollux/Sia format)")
    g.add_argument(
        "--profiles", metavar="DIR", default=None, help="fit a profile to DIR/<app>/*.csv"
    )
    g.add_argument(
        "--gpus-per-node", type=int_at_least(1), default=None, metavar="N", help="GPUs per node"
    )
    g.add_argument("--gpu-type", default="gpu", metavar="NAME", help="GPU type (default gpu)")
    g.add_argument("--name", default=None, help="profile name (default fitted-<gpu type>)")
    g.add_argument(
        "--cluster",
        default=None,
        metavar="SUFFIX",
        help="read placements-SUFFIX.csv / scalability-SUFFIX.csv (default: the only ones there)",
    )
    g.add_argument(
        "--app-map",
        action="append",
        default=[],
        metavar="APP=MODEL",
        help="map an application folder to a zoo model; repeatable",
    )
    g.add_argument(
        "--compute",
        choices=("measured", "affine"),
        default="measured",
        help="compute curve per application: measured (the 1-GPU rows themselves; default) or "
        "affine (fitted t0 + per_sample * batch); see docs/MODEL.md section 7.3",
    )
    g.add_argument(
        "--grad-prior",
        type=_grad_prior,
        default=None,
        metavar="W|inf",
        help="weight of the pull of each application's fitted gradient bytes towards the zoo's "
        "size (default 0.1; inf pins them to the zoo's); see docs/MODEL.md section 7.3",
    )
    g.add_argument(
        "--latency-overlap",
        type=_unit_interval,
        default=None,
        metavar="PSI",
        help="pin the share of the compute behind which the ring's hop latency hides to PSI in "
        "[0, 1] (default: fitted; 0 is the model without it); see docs/MODEL.md section 7.1",
    )
    g.add_argument("--out", metavar="PROFILE.json", default=None, help="the fitted profile")
    g.add_argument("--hardware", metavar="NAME|PATH", default=None, help="profile to --evaluate")
    g.add_argument(
        "--evaluate", metavar="DIR", default=None, help="predict every row of DIR/<app>/*.csv"
    )
    g.add_argument(
        "--predictions",
        metavar="OUT.csv",
        default=None,
        help="with --evaluate: write app,placement,local_bsz,measured_s,predicted_s per row",
    )
    g.add_argument(
        "--fit-within-nodes",
        type=int_at_least(1),
        default=None,
        metavar="K",
        help="with --evaluate: fit on the rows of at most K nodes, score the others",
    )
    g.add_argument(
        "--leave-one-app-out",
        action="store_true",
        help="with --evaluate: fit without each application, add it from its 1-GPU rows, score it",
    )
    g.add_argument(
        "--new-app",
        metavar="DIR/APP",
        default=None,
        help="with --hardware and --out: add this application from its 1-GPU rows",
    )
    g.add_argument(
        "--grad-bytes",
        type=number_at_least(1.0),
        default=None,
        metavar="BYTES",
        help="with --new-app: the application's gradient bytes (default the model zoo's)",
    )
    p.set_defaults(func=run)


def _fmt_bw(value: float) -> str:
    return f"{value / 1e9:.2f} GB/s"


def _fmt_lat(value: float) -> str:
    return f"{value * 1e6:.1f} us"


def format_result(result: CalibrationResult) -> str:
    """Readable report of one algorithm's fit: per-model table, links, Chronus check."""
    lines = [
        f"== all-reduce: {result.allreduce} ==",
        f"{'model':<18} {'points':>6} {'median err':>10} {'max err':>8} {'t0 (ms)':>9} "
        f"{'per_sample (ms)':>15}",
    ]
    for name, fit in result.models.items():
        lines.append(
            f"{name:<18} {fit.points:>6} {fit.median_abs_rel_error:>10.2%} "
            f"{fit.max_abs_rel_error:>8.2%} {fit.t0 * 1e3:>9.3f} {fit.per_sample * 1e3:>15.4f}"
        )
    lines.append(
        f"{'all':<18} {len(result.points):>6} {result.median_abs_rel_error:>10.2%} "
        f"{result.max_abs_rel_error:>8.2%}   (mean {result.mean_abs_rel_error:.2%})"
    )
    lk = result.links
    lines.append(
        f"links: intra {_fmt_bw(lk['intra_bandwidth'])}, {_fmt_lat(lk['intra_latency'])}; "
        f"inter {_fmt_bw(lk['inter_bandwidth'])}, {_fmt_lat(lk['inter_latency'])}"
    )
    lines.append(
        f"Chronus (local batch {result.options.get('chronus_local_batch', 0):g}/GPU): "
        f"rank agreement {result.chronus_rank_agreement:.2f} "
        f"({sum(c.order_matches for c in result.chronus)}/{len(result.chronus)}), "
        f"mean abs error {result.chronus_mean_abs_error:.3f}, "
        f"Spearman over all spread points {result.chronus_spearman:.2f}; [ok] = same order "
        f"and every spread within {CHRONUS_TOLERANCE:g}"
    )
    for c in result.chronus:
        pairs = ", ".join(
            f"s={s}: {p:.3f} vs {m:.3f}"
            for s, p, m in zip(c.servers, c.predicted, c.measured)
            if s > 1
        )
        worst = max(abs(p - m) for s, p, m in zip(c.servers, c.predicted, c.measured) if s > 1)
        if not c.order_matches:
            mark = f"order MISMATCH, off by up to {worst:.3f}"
        elif worst > CHRONUS_TOLERANCE:
            mark = f"order ok, off by {worst:.3f} > {CHRONUS_TOLERANCE:g}"
        else:
            mark = "ok"
        lines.append(f"  {c.model:<13} k={c.gpus}  predicted vs measured  {pairs}  [{mark}]")
    return "\n".join(lines)


def _grad_prior(text: str) -> float:
    """An argparse ``type`` for ``--grad-prior``: a number >= 0 or ``inf`` (M pinned)."""
    if text.strip().lower() in ("inf", "infinity"):
        return float("inf")
    return number_at_least(0.0)(text)


def _unit_interval(text: str) -> float:
    """An argparse ``type`` for ``--latency-overlap``: a number in [0, 1]."""
    v = number_at_least(0.0)(text)
    if v > 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return v


def _refuse_measured_options(args: argparse.Namespace) -> None:
    """Refuse the options of a measured fit without ``--profiles`` / ``--evaluate``."""
    from crop_gym.errors import ConfigError

    given = {
        "--gpus-per-node": args.gpus_per_node is not None,
        "--gpu-type": args.gpu_type != "gpu",
        "--name": args.name is not None,
        "--cluster": args.cluster is not None,
        "--app-map": bool(args.app_map),
        "--out": args.out is not None,
        "--predictions": args.predictions is not None,
        "--fit-within-nodes": args.fit_within_nodes is not None,
        "--leave-one-app-out": args.leave_one_app_out,
        "--grad-bytes": args.grad_bytes is not None,
        "--grad-prior": args.grad_prior is not None,
        "--latency-overlap": args.latency_overlap is not None,
    }
    for flag, used in given.items():
        if used:
            raise ConfigError(f"{flag} needs --profiles DIR (or --evaluate DIR)")


def _measurement_files() -> list[Path]:
    """The bundled files the fit reads (inputs that no output may replace)."""
    data = Path(__file__).resolve().parent / "data"
    return [
        *sorted((data / "profiles" / "throughputs_A100").glob("*.csv")),
        data / "chronus" / "model_info.json",
    ]


def run(args: argparse.Namespace) -> int:
    """Execute ``crop-gym calibrate``; returns the exit code.

    Outputs are checked before the fit: neither may replace a bundled measurement file, nor (for
    ``--json``) the package's ``calibration.json`` unless ``--write`` targets it. With ``--json -`` the
    report goes to stderr.
    """
    import json
    import time

    if any(x is not None for x in (args.profiles, args.evaluate, args.hardware, args.new_app)):
        from crop_gym.calibration.usercli import run_measured

        return run_measured(args)
    _refuse_measured_options(args)
    allreduce = args.allreduce or "both"
    ratio = 4.0 if args.min_latency_ratio is None else args.min_latency_ratio

    from crop_gym.calibration import calibration_json, choose_default, fit_all
    from crop_gym.cli import report_stream, write_outputs
    from crop_gym.io import check_outputs

    if args.write == "-":
        from crop_gym.errors import ConfigError

        raise ConfigError("--write -: give a file name (or no value for the package's file)")
    target = None
    if args.write is not None:
        target = Path(args.write) if args.write else default_calibration_path()
    inputs: list[Path] = _measurement_files()
    if target is None or os.path.realpath(target) != os.path.realpath(default_calibration_path()):
        inputs.append(default_calibration_path())
    folders = check_outputs({"--json": args.json, "--write": target}, inputs=inputs)
    out = report_stream(args.json)

    algorithms = ("ring", "hierarchical") if allreduce == "both" else (allreduce,)
    start = time.perf_counter()
    results = fit_all(algorithms, min_latency_ratio=ratio)
    elapsed = time.perf_counter() - start
    default, reason = choose_default(results)
    for result in results.values():
        print(format_result(result), file=out)
        print(file=out)
    print(f"default all-reduce: {default} — {reason}", file=out)
    if len(results) == 1:
        print(
            "(only one algorithm fitted; pass --allreduce both to choose by the evidence)", file=out
        )
    print(f"fit time: {elapsed:.2f} s", file=out)

    chosen = results[default]
    writers: dict[str, Callable[[Path], object]] = {}
    if args.json is not None:
        summary = {
            "default_allreduce": default,
            "reason": reason,
            "median_abs_rel_error": chosen.median_abs_rel_error,
            "max_abs_rel_error": chosen.max_abs_rel_error,
            "per_model": chosen.to_dict()["per_model"],
            "links": dict(chosen.links),
            "chronus_rank_agreement": chosen.chronus_rank_agreement,
            "chronus_mean_abs_error": chosen.chronus_mean_abs_error,
            "chronus_spearman": chosen.chronus_spearman,
            "algorithms": {a: r.to_dict() for a, r in results.items()},
        }
        summary_text = json.dumps(summary, indent=2) + "\n"
        writers[args.json] = lambda p: p.write_text(summary_text, encoding="utf-8")
    if target is not None:
        content_text = json.dumps(calibration_json(results, default, reason), indent=2) + "\n"
        writers[str(target)] = lambda p: p.write_text(content_text, encoding="utf-8")
    for path in write_outputs(writers, folders):
        print(f"wrote {path}", file=out)
    return 0
