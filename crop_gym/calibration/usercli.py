"""``crop-gym calibrate`` on your own measurements: fit, score, extend a hardware profile.

* ``--profiles DIR --gpus-per-node N [--gpu-type NAME] --out PROFILE.json [--json REPORT]`` reads
  every ``DIR/<app>/placements*.csv`` and ``scalability*.csv`` of one cluster
  (:func:`~crop_gym.calibration.measurements.load_measurements`), fits a profile
  (:func:`~crop_gym.calibration.fit.fit_profile`), prints its in-sample scores per application and
  writes the profile (a file ``--hardware`` and scenario files take) and, with ``--json``, the
  scores.
* ``--hardware NAME|PATH --evaluate DIR [--predictions OUT.csv] [--json OUT]`` predicts every row
  of ``DIR`` (:func:`~crop_gym.calibration.fit.predict_step_time`) and prints and writes the
  scores (:func:`~crop_gym.calibration.report.evaluate`: median and p90 error, signed bias per
  node count, ordering with ties counted wrong, tied pairs, best-to-worst spread; per application
  and overall) and, with ``--predictions``, one row per measured row.
* ``--evaluate DIR --gpus-per-node N --fit-within-nodes K`` fits on the rows of at most ``K`` nodes
  and scores the others; ``--evaluate DIR --gpus-per-node N --leave-one-app-out`` fits on all
  applications but one, adds that one from its 1-GPU rows and gradient size, and scores its
  multi-GPU rows, for each (:mod:`crop_gym.calibration.protocols`).
* ``--hardware P --new-app DIR/APP --out PROFILE.json [--grad-bytes B]`` writes ``P`` with the
  application added from its 1-GPU rows and its gradient size (the zoo's, or ``--grad-bytes``).

Outputs are checked first (never a measurement file or the profile read) and written atomically,
all or none (:func:`crop_gym.cli.write_outputs`). A malformed file is one line naming the file, the
line and the column.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from crop_gym.calibration.fit import GRAD_PRIOR, fit_profile, predict_step_time
from crop_gym.calibration.measurements import Measurements, load_measurements
from crop_gym.calibration.protocols import (
    HeldOut,
    fit_within_nodes,
    leave_one_app_out,
    new_application,
)
from crop_gym.calibration.report import (
    EvaluationReport,
    evaluate,
    format_evaluation,
    predictions_csv,
)
from crop_gym.cli import report_stream, write_outputs
from crop_gym.errors import ConfigError
from crop_gym.io import OutputFolder, check_outputs
from crop_gym.model.hardware import HardwareProfile, get_hardware

__all__ = ["run_measured", "scores_mapping"]


def _inputs(folder: str) -> list[Path]:
    root = Path(folder)
    return sorted(root.glob("*/*.csv")) if root.is_dir() else []


def _app_map(items: list[str]) -> dict[str, str]:
    """``["app=model", ...]`` as a mapping (the models are checked by the loader)."""
    out: dict[str, str] = {}
    for item in items:
        app, sep, model = (x.strip() for x in item.partition("="))
        if not sep or not app or not model:
            raise ConfigError(f"--app-map {item!r}: expected APP=MODEL (e.g. --app-map bert=bert)")
        out[app] = model
    return out


def _refuse(flags: dict[str, bool], mode: str) -> None:
    for flag, used in flags.items():
        if used:
            raise ConfigError(f"{flag} cannot be combined with {mode}")


def scores_mapping(report: EvaluationReport) -> dict[str, Any]:
    """The JSON of ``--json``: the overall scores at the top level (``rows``, the error
    statistics, ``bias_by_nodes``, ``ordering``, ``ordering_same_gpus``, ``spread``) and
    ``per_app`` (the same per application)."""
    data = report.to_mapping()
    return {**data["overall"], "per_app": data["per_app"]}


def _notes(m: Measurements, out: TextIO) -> list[str]:
    notes = m.placement_notes()
    for line in notes:
        print(f"note: {line}", file=out)
    return notes


def _fitter(args: argparse.Namespace, source: str) -> Callable[[Measurements], HardwareProfile]:
    if args.gpus_per_node is None:
        raise ConfigError(f"{source} needs --gpus-per-node N (GPUs per node of the cluster)")

    def fit(rows: Measurements) -> HardwareProfile:
        return fit_profile(
            rows,
            gpus_per_node=args.gpus_per_node,
            gpu_type=args.gpu_type,
            name=args.name,
            compute=args.compute,
            grad_prior=GRAD_PRIOR if args.grad_prior is None else args.grad_prior,
            latency_overlap=args.latency_overlap,
            citation=f"fitted by crop-gym calibrate {source}"
            + (f" --cluster {args.cluster}" if args.cluster is not None else ""),
        )

    return fit


def run_measured(args: argparse.Namespace) -> int:
    """Run the ``--profiles``, ``--evaluate`` or ``--new-app`` mode of ``crop-gym calibrate``."""
    elasticflow = {
        "--allreduce": args.allreduce is not None,
        "--write": args.write is not None,
        "--min-latency-ratio": args.min_latency_ratio is not None,
    }
    _refuse(elasticflow, "--profiles, --evaluate or --new-app")
    app_map = _app_map(args.app_map)
    splits = {
        "--fit-within-nodes": args.fit_within_nodes is not None,
        "--leave-one-app-out": args.leave_one_app_out,
    }
    if args.new_app is not None:
        return _new_app(args, app_map, splits)
    if args.profiles is not None:
        return _profiles(args, app_map, splits)
    return _evaluate(args, app_map, splits)


def _profiles(args: argparse.Namespace, app_map: dict[str, str], splits: dict[str, bool]) -> int:
    _refuse(
        {
            "--hardware": args.hardware is not None,
            "--evaluate": args.evaluate is not None,
            "--predictions": args.predictions is not None,
            **splits,
        },
        "--profiles",
    )
    if args.out is None or args.out == "-" or not args.out.endswith(".json"):
        raise ConfigError(f"--profiles needs --out PROFILE.json (a .json file), got {args.out!r}")
    fit = _fitter(args, f"--profiles {args.profiles}")
    folders = check_outputs({"--out": args.out, "--json": args.json}, inputs=_inputs(args.profiles))
    out = report_stream(args.json)
    meas = load_measurements(args.profiles, cluster=args.cluster, app_map=app_map)
    notes = _notes(meas, out)
    profile = fit(meas)
    report = evaluate(predict_step_time(profile, meas), meas)
    fitted = dict(profile.fit)
    print(
        f"fitted {profile.name} ({profile.gpu_type}, {profile.gpus_per_node} GPUs per node) to "
        f"{len(meas)} rows: {fitted.get('parameters')} parameters; NIC "
        f"{profile.links[1].bandwidth / 1e9:.2f} GB/s, node fabric "
        f"{profile.fabric_bandwidth / 1e9:.2f} GB/s, ν {profile.nic_sharing:.2f}, overlap "
        f"{profile.overlap:.2f}, hop latency behind compute ψ {profile.latency_overlap:.2f}",
        file=out,
    )
    if fitted.get("network", "fitted") != "fitted":
        print(f"network terms: {fitted['network']}", file=out)
    print(format_evaluation(report, "in sample (ties counted wrong):"), file=out)
    profile_text = profile.to_json()
    writers: dict[str, Callable[[Path], object]] = {
        args.out: lambda p: _write_text(p, profile_text)
    }
    summary = {"profile": args.out, "name": profile.name, "fit": fitted, "placement_notes": notes}
    return _finish(args, writers, folders, {**summary, **scores_mapping(report)}, out)


def _evaluate(args: argparse.Namespace, app_map: dict[str, str], splits: dict[str, bool]) -> int:
    if args.evaluate is None:
        raise ConfigError("--hardware PROFILE and --evaluate DIR go together")
    split = [flag for flag, used in splits.items() if used]
    if len(split) > 1:
        raise ConfigError("--fit-within-nodes and --leave-one-app-out are two protocols: give one")
    fitting = {"--out": args.out is not None}
    if split:
        _refuse({**fitting, "--hardware": args.hardware is not None}, split[0])
    else:
        if args.hardware is None:
            raise ConfigError("--hardware PROFILE and --evaluate DIR go together")
        _refuse(
            {
                **fitting,
                "--gpus-per-node": args.gpus_per_node is not None,
                "--gpu-type": args.gpu_type != "gpu",
                "--name": args.name is not None,
                "--compute": args.compute != "measured",
                "--grad-prior": args.grad_prior is not None,
                "--latency-overlap": args.latency_overlap is not None,
            },
            "--hardware ... --evaluate",
        )
    hw_input = [args.hardware] if args.hardware and Path(args.hardware).exists() else []
    folders = check_outputs(
        {"--json": args.json, "--predictions": args.predictions},
        inputs=[*_inputs(args.evaluate), *hw_input],
    )
    out = report_stream(args.json, args.predictions)
    meas = load_measurements(args.evaluate, cluster=args.cluster, app_map=app_map)
    notes = _notes(meas, out)
    summary: dict[str, Any] = {"folder": args.evaluate, "placement_notes": notes}
    if not split:
        profile = get_hardware(args.hardware)
        held = [HeldOut("all rows", profile, meas, predict_step_time(profile, meas))]
        summary["hardware"] = profile.name
        title = f"{profile.name} on {args.evaluate} (ties counted wrong):"
    elif args.fit_within_nodes is not None:
        fit = _fitter(
            args, f"--evaluate {args.evaluate} --fit-within-nodes {args.fit_within_nodes}"
        )
        held = [fit_within_nodes(meas, args.fit_within_nodes, fit)]
        summary["protocol"] = f"fit within {args.fit_within_nodes} nodes, predict the rest"
        # Say where the fit took its network terms from (not identified on rows of one node).
        summary["network"] = held[0].profile.fit.get("network", "fitted")
        if summary["network"] != "fitted":
            print(f"network terms: {summary['network']}", file=out)
        title = f"fitted on rows of <= {args.fit_within_nodes} nodes, scored on the rest:"
    else:
        fit = _fitter(args, f"--evaluate {args.evaluate} --leave-one-app-out")
        held = leave_one_app_out(meas, fit)
        summary["protocol"] = (
            "leave one application out: fit on the others, add it from its 1-GPU rows and "
            "gradient size, score its multi-GPU rows"
        )
        title = "each application left out of the fit, added from its 1-GPU rows, scored:"
    rows = Measurements.concatenate([h.rows for h in held])
    pred = np.concatenate([h.predicted for h in held])
    report = evaluate(pred, rows)
    print(format_evaluation(report, title), file=out)
    writers: dict[str, Callable[[Path], object]] = {}
    if args.predictions is not None:
        text = predictions_csv(pred, rows)
        writers[args.predictions] = lambda p: _write_text(p, text)
    if args.leave_one_app_out:
        summary["per_app_left_out"] = {
            h.label: scores_mapping(evaluate(h.predicted, h.rows)) for h in held
        }
    return _finish(args, writers, folders, {**summary, **scores_mapping(report)}, out)


def _new_app(args: argparse.Namespace, app_map: dict[str, str], splits: dict[str, bool]) -> int:
    _refuse(
        {
            "--profiles": args.profiles is not None,
            "--evaluate": args.evaluate is not None,
            "--predictions": args.predictions is not None,
            "--gpus-per-node": args.gpus_per_node is not None,
            "--grad-prior": args.grad_prior is not None,
            "--latency-overlap": args.latency_overlap is not None,
            **splits,
        },
        "--new-app",
    )
    if args.hardware is None:
        raise ConfigError("--new-app DIR/APP needs --hardware PROFILE (the fitted cluster)")
    if args.out is None or args.out == "-" or not args.out.endswith(".json"):
        raise ConfigError(f"--new-app needs --out PROFILE.json (a .json file), got {args.out!r}")
    app_dir = Path(args.new_app)
    if not app_dir.is_dir():
        raise ConfigError(f"--new-app {app_dir}: not a folder of placements*.csv files")
    hw_input = [args.hardware] if Path(args.hardware).exists() else []
    folders = check_outputs(
        {"--out": args.out, "--json": args.json},
        inputs=[*sorted(app_dir.glob("*.csv")), *hw_input],
    )
    out = report_stream(args.json)
    profile = get_hardware(args.hardware)
    rows = load_measurements(
        app_dir.parent, cluster=args.cluster, app_map=app_map, apps=[app_dir.name]
    )
    added = new_application(profile, rows, grad_bytes=args.grad_bytes, name=args.name)
    model = str(rows.model[0])
    curve = added.compute[model][added.gpu_type]
    print(
        f"added {app_dir.name} (model {model}) to {profile.name}: compute from "
        f"{len(curve.local_batch)} 1-GPU batches ({int((rows.num_gpus == 1).sum())} rows), "
        f"gradient {added.model_grad_bytes(model) / 1e6:.2f} MB; compute sharing "
        f"{added.model_kappa(model):g}, latency inflation {added.model_chi(model):g}, "
        f"single-replica overhead {added.model_delta(model) * 1e3:g} ms (the cluster's)",
        file=out,
    )
    text = added.to_json()
    writers: dict[str, Callable[[Path], object]] = {args.out: lambda p: _write_text(p, text)}
    summary = {"profile": args.out, "name": added.name, "application": app_dir.name, "model": model}
    return _finish(args, writers, folders, summary, out)


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, the private staging file :func:`write_outputs` gives a writer."""
    path.write_text(text, encoding="utf-8")


def _finish(
    args: argparse.Namespace,
    writers: dict[str, Callable[[Path], object]],
    folders: Mapping[str, OutputFolder],
    summary: dict[str, Any],
    out: TextIO,
) -> int:
    if args.json is not None:
        text = json.dumps(summary, indent=2) + "\n"
        writers[args.json] = lambda p: _write_text(p, text)
    for path in write_outputs(writers, folders):
        print(f"wrote {path}", file=out)
    return 0
