"""The ``crop-gym trace`` command: load a workload, print a summary, optionally write it as JSON.

Usage::

    crop-gym trace PATH_OR_BUILTIN [--format elasticflow|pollux|csv] [--map OLD=NEW ...] [--json PATH]
    crop-gym trace --list

Importing this module is cheap: the loaders (and numpy) are imported only when the command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["parse_map", "register"]


def parse_map(items: list[str]) -> dict[str, str]:
    """Turn ``["old=new", ...]`` into a dict.

    Raises:
        ConfigError: On an item without ``=`` or with an empty side.
    """
    from crop_gym.errors import ConfigError

    mapping: dict[str, str] = {}
    for item in items:
        old, sep, new = item.partition("=")
        old, new = old.strip(), new.strip()
        if not sep or not old or not new:
            raise ConfigError(f"--map {item!r}: expected OLD=NEW (e.g. --map resnet152=resnet50)")
        mapping[old] = new
    return mapping


def register(subparsers: Any) -> None:
    """Add the ``trace`` sub-command to the ``crop-gym`` parser."""
    p = subparsers.add_parser(
        "trace",
        help="load a workload trace and summarise it",
        description=(
            "Load a workload (a file, or a bundled trace such as elasticflow:cluster10), check every "
            "row, and print jobs, span, GPU-count histogram, model mix and GPU-hours."
        ),
    )
    p.add_argument(
        "spec",
        nargs="?",
        metavar="PATH_OR_BUILTIN",
        help="a trace file or a bundled trace name (see --list)",
    )
    p.add_argument(
        "--format",
        choices=("elasticflow", "pollux", "csv"),
        default=None,
        help="file format (default: detected from the header)",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="map a model (Pollux: application) the zoo does not know to a known one; repeatable",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the summary as JSON ('-': to stdout, the summary table then goes to stderr)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse columns the format does not read (without it, a misspelt optional column "
        "such as 'wieght' warns and is ignored)",
    )
    p.add_argument("--list", action="store_true", help="list the bundled traces and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``crop-gym trace``; returns the exit code.

    Errors are raised as :class:`ValueError` subclasses with one-line messages; the ``crop-gym``
    entry point prints them as ``crop-gym trace: error: ...`` and exits with status 2.
    """
    import json

    from crop_gym.errors import ConfigError

    if args.list:
        from crop_gym.workloads.registry import BUNDLED_TRACES

        if args.spec or args.json is not None or args.format or args.map:
            raise ConfigError("--list takes no trace, --json, --format or --map")

        from crop_gym.cli import report_stream

        out = report_stream()
        width = max(len(name) for name in BUNDLED_TRACES)
        print(f"{'name':<{width}}  {'format':<11}  {'jobs':>7}  description", file=out)
        for t in BUNDLED_TRACES.values():
            print(f"{t.name:<{width}}  {t.format:<11}  {t.jobs:>7,}  {t.description}", file=out)
        return 0
    if not args.spec:
        raise ConfigError("give a trace file or bundled trace name, or --list")

    from crop_gym.cli import check_input_file, report_stream, write_outputs
    from crop_gym.io import check_outputs
    from crop_gym.workloads.loader import load_workload
    from crop_gym.workloads.summary import format_summary, summarize

    folders = check_outputs({"--json": args.json}, inputs=[args.spec])
    check_input_file(args.spec, what="trace")
    out = report_stream(args.json)
    model_map = parse_map(args.map)
    workload = load_workload(
        args.spec, format=args.format, model_map=model_map or None, strict=args.strict
    )
    summary = summarize(workload)
    text = json.dumps(summary, indent=2) + "\n"
    written = []
    if args.json is not None:
        written = write_outputs(
            {args.json: lambda p: p.write_text(text, encoding="utf-8")}, folders
        )
    print(format_summary(summary), file=out)
    for path in written:
        print(f"\nwrote {path}", file=out)
    return 0
