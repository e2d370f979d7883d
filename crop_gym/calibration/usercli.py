"""``crop-gym calibrate --profiles`` and ``--evaluate``: a hardware profile from your measurements.

* ``--profiles DIR --gpus-per-node N [--gpu-type NAME] --out PROFILE.json [--json REPORT]`` reads
  every ``DIR/<app>/placements*.csv`` and ``scalability*.csv`` of one cluster
  (:func:`~crop_gym.calibration.measurements.load_measurements`), fits a profile
  (:func:`~crop_gym.calibration.fit.fit_profile`), prints its in-sample errors per application and
  writes the profile (a file ``--hardware`` and scenario files take) and, with ``--json``, the report.
* ``--hardware NAME|PATH --evaluate DIR [--json OUT]`` predicts every row of ``DIR``
  (:func:`~crop_gym.calibration.fit.predict_step_time`) and prints and writes the errors
  (:mod:`crop_gym.calibration.report`).

Outputs are checked first (never a measurement file or the profile read) and written atomically,
all or none (:func:`crop_gym.cli.write_outputs`). A malformed file is one line naming the file, the
line and the column.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crop_gym.errors import ConfigError

__all__ = ["run_measured"]


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


def _refuse(args: argparse.Namespace, flags: dict[str, bool], mode: str) -> None:
    for flag, used in flags.items():
        if used:
            raise ConfigError(f"{flag} cannot be combined with {mode}")


def run_measured(args: argparse.Namespace) -> int:
    """Run the ``--profiles`` or the ``--evaluate`` mode of ``crop-gym calibrate``."""
    from crop_gym.calibration.fit import fit_profile, predict_step_time
    from crop_gym.calibration.measurements import load_measurements
    from crop_gym.calibration.report import error_report, format_error_table
    from crop_gym.cli import report_stream, write_outputs
    from crop_gym.io import check_outputs
    from crop_gym.model.hardware import get_hardware

    elasticflow = {
        "--allreduce": args.allreduce is not None,
        "--write": args.write is not None,
        "--min-latency-ratio": args.min_latency_ratio is not None,
    }
    app_map = _app_map(args.app_map)
    writers: dict[str, Callable[[Path], object]] = {}
    if args.profiles is not None:
        mode = "--profiles"
        _refuse(
            args,
            {
                **elasticflow,
                "--hardware": args.hardware is not None,
                "--evaluate": bool(args.evaluate),
            },
            mode,
        )
        if args.gpus_per_node is None:
            raise ConfigError("--profiles needs --gpus-per-node N (GPUs per node of the cluster)")
        if args.out is None or args.out == "-" or not args.out.endswith(".json"):
            raise ConfigError(
                f"--profiles needs --out PROFILE.json (a .json file), got {args.out!r}"
            )
        folders = check_outputs(
            {"--out": args.out, "--json": args.json}, inputs=_inputs(args.profiles)
        )
        out = report_stream(args.json)
        meas = load_measurements(args.profiles, cluster=args.cluster, app_map=app_map)
        profile = fit_profile(
            meas,
            gpus_per_node=args.gpus_per_node,
            gpu_type=args.gpu_type,
            name=args.name,
            compute=args.compute,
            citation=f"fitted by crop-gym calibrate --profiles {args.profiles}"
            + (f" --cluster {args.cluster}" if args.cluster is not None else ""),
        )
        report = error_report(predict_step_time(profile, meas), meas.step_time, meas.app)
        fit = dict(profile.fit)
        print(
            f"fitted {profile.name} ({profile.gpu_type}, {profile.gpus_per_node} GPUs per node) to "
            f"{len(meas)} rows: {fit.get('parameters')} parameters, NIC "
            f"{profile.links[1].bandwidth / 1e9:.2f} GB/s, overlap {profile.overlap:.3f}",
            file=out,
        )
        print(format_error_table(report, "in-sample |predicted / measured - 1|:"), file=out)
        profile_text = profile.to_json()
        writers[args.out] = lambda p: p.write_text(profile_text, encoding="utf-8")
        summary: dict[str, Any] = {"profile": args.out, "name": profile.name, "fit": fit}
    else:
        mode = "--evaluate"
        if args.evaluate is None or args.hardware is None:
            raise ConfigError("--hardware PROFILE and --evaluate DIR go together")
        _refuse(
            args,
            {
                **elasticflow,
                "--out": args.out is not None,
                "--gpus-per-node": args.gpus_per_node is not None,
                "--gpu-type": args.gpu_type != "gpu",
                "--name": args.name is not None,
                "--compute": args.compute != "measured",
            },
            mode,
        )
        hw_input = [args.hardware] if Path(args.hardware).exists() else []
        folders = check_outputs({"--json": args.json}, inputs=[*_inputs(args.evaluate), *hw_input])
        out = report_stream(args.json)
        profile = get_hardware(args.hardware)
        meas = load_measurements(args.evaluate, cluster=args.cluster, app_map=app_map)
        report = error_report(predict_step_time(profile, meas), meas.step_time, meas.app)
        print(
            format_error_table(
                report, f"{profile.name} on {args.evaluate}: |predicted / measured - 1|:"
            ),
            file=out,
        )
        summary = {"hardware": profile.name, "folder": args.evaluate}
    if args.json is not None:
        text = json.dumps({**summary, **report.to_mapping()}, indent=2) + "\n"
        writers[args.json] = lambda p: p.write_text(text, encoding="utf-8")
    for path in write_outputs(writers, folders):
        print(f"wrote {path}", file=out)
    return 0
