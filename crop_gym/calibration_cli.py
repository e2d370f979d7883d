"""The ``crop-gym calibrate`` command: fit the performance model to the bundled measurements.

Usage::

    crop-gym calibrate [--allreduce ring|hierarchical|both] [--json PATH|-] [--write [PATH]]

Prints, per all-reduce algorithm, a table of the fitted compute coefficients and errors per model,
the fitted link parameters and the Chronus check; then the default algorithm chosen by the evidence.
``--json`` writes the full result; ``--write`` regenerates ``crop_gym/data/calibration.json`` (the
package's defaults). Importing this module is cheap: numpy and scipy are imported when it runs.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crop_gym.calibration import CalibrationResult

__all__ = ["default_calibration_path", "format_result", "register", "run"]


def default_calibration_path() -> Path:
    """Path of the package's ``data/calibration.json`` (the file ``--write`` regenerates)."""
    return Path(__file__).resolve().parent / "data" / "calibration.json"


def _ratio(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return v


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
        default="both",
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
        type=_ratio,
        default=4.0,
        metavar="R",
        help="constraint inter_latency >= R x intra_latency (default 4; see docs/MODEL.md)",
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
        f"Spearman over all spread points {result.chronus_spearman:.2f}"
    )
    for c in result.chronus:
        pairs = ", ".join(
            f"s={s}: {p:.3f} vs {m:.3f}"
            for s, p, m in zip(c.servers, c.predicted, c.measured)
            if s > 1
        )
        mark = "ok" if c.order_matches else "MISMATCH"
        lines.append(f"  {c.model:<13} k={c.gpus}  predicted vs measured  {pairs}  [{mark}]")
    return "\n".join(lines)


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

    from crop_gym.calibration import calibration_json, choose_default, fit_all
    from crop_gym.cli import report_stream, write_outputs
    from crop_gym.io import atomic_write_text, check_outputs

    if args.write == "-":
        from crop_gym.errors import ConfigError

        raise ConfigError("--write -: give a file name (or no value for the package's file)")
    target = None
    if args.write is not None:
        target = Path(args.write) if args.write else default_calibration_path()
    inputs: list[Path] = _measurement_files()
    if target is None or os.path.realpath(target) != os.path.realpath(default_calibration_path()):
        inputs.append(default_calibration_path())
    check_outputs({"--json": args.json, "--write": target}, inputs=inputs)
    out = report_stream(args.json)

    algorithms = ("ring", "hierarchical") if args.allreduce == "both" else (args.allreduce,)
    start = time.perf_counter()
    results = fit_all(algorithms, min_latency_ratio=args.min_latency_ratio)
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
        writers[args.json] = lambda p: atomic_write_text(p, summary_text)
    if target is not None:
        content_text = json.dumps(calibration_json(results, default, reason), indent=2) + "\n"
        writers[str(target)] = lambda p: atomic_write_text(p, content_text)
    for path in write_outputs(writers):
        print(f"wrote {path}", file=out)
    return 0
