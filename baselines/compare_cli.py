"""``crop-gym compare``: CROP against the baselines (and the optimum) on a scenario.

With no arguments it runs the bundled ``default`` scenario (64-GPU leaf-spine, mild abnormalities,
queue drawn from the ElasticFlow traces) over 10 seeds and prints a table of F, F relative to CROP,
gain, jobs placed, utilisation, communication overhead and solve time, per policy (mean ± std).
``--json -`` writes the JSON to stdout and the table to stderr.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crop_gym.cli import int_at_least

__all__ = ["register"]

_EPILOG = """examples:
  crop-gym compare                                   # default scenario, 10 seeds
  crop-gym compare --scenario testbed-8 --exact      # add the exact optimum and the MILP
  crop-gym compare --seeds 20 --first-seed 1000 --policies crop,best-fit,hived
  crop-gym compare --json out.json --plot out.png    # machine-readable results and a bar chart
  crop-gym compare --hardware azure-v100             # the same scenario on Azure V100 hardware
"""


_positive_int = int_at_least(1)
_nonneg_int = int_at_least(0)


def register(subparsers: Any) -> None:
    """Add the ``compare`` sub-command."""
    from crop_gym.baselines.compare import DEFAULT_POLICIES
    from crop_gym.policy import policy_names

    p = subparsers.add_parser(
        "compare",
        help="compare CROP with the baseline placement policies on a scenario",
        description=__doc__,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scenario",
        default="default",
        metavar="NAME|FILE",
        help="built-in scenario or scenario file (default: default)",
    )
    p.add_argument(
        "--seeds",
        type=_positive_int,
        default=10,
        metavar="N",
        help="number of instances, one per seed (default: 10)",
    )
    p.add_argument(
        "--first-seed",
        type=_nonneg_int,
        default=0,
        metavar="S",
        help="seed of the first instance (default: 0)",
    )
    p.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        metavar="A,B,C",
        help=f"comma-separated policies (default: %(default)s; available: {', '.join(policy_names())})",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="add the exact optimum and each policy's ratio to it (small scenarios only)",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="write per-seed results as JSON ('-': to stdout, the table then goes to stderr)",
    )
    p.add_argument(
        "--plot", metavar="PATH", help="write a bar chart with error bars (.png, .pdf, .svg)"
    )
    p.add_argument(
        "--hardware",
        default=None,
        metavar="NAME|PATH",
        help="hardware profile replacing the scenario's: a bundled name (see docs/MODEL.md), a "
        "profile file, or profiles joined by '+' for mixed GPU types (default: the scenario's)",
    )
    p.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from crop_gym.baselines.compare import format_table, run_compare, write_json, write_plot
    from crop_gym.cli import check_input_file, check_plot_path, report_stream, write_outputs
    from crop_gym.io import check_outputs, read_mapping
    from crop_gym.model.hardware import hardware_files
    from crop_gym.scenario import SCENARIOS, with_hardware

    check_plot_path("--plot", args.plot)
    scenario_file = None if args.scenario in SCENARIOS else args.scenario
    hw_files = hardware_files(args.hardware)
    pinned = check_outputs(
        {"--json": args.json, "--plot": args.plot}, inputs=[scenario_file, *hw_files]
    )
    check_input_file(scenario_file, what="scenario")
    for f in hw_files:
        check_input_file(f, what="hardware profile")
    if scenario_file is not None and os.path.exists(scenario_file):
        # Syntax, encoding, size, duplicate keys and YAML aliases, each as one line naming the file
        # (Scenario.from_file then reads the fields).
        read_mapping(scenario_file, what="scenario")
    out = report_stream(args.json)
    policies = [name.strip() for name in args.policies.split(",") if name.strip()]
    result = run_compare(
        with_hardware(args.scenario, args.hardware),
        seeds=args.seeds,
        first_seed=args.first_seed,
        policies=policies,
        exact=args.exact,
        progress=False if args.no_progress else None,
    )
    writers: dict[str, Callable[[Path], object]] = {}
    if args.json is not None:
        writers[args.json] = functools.partial(write_json, result)
    if args.plot is not None:
        writers[args.plot] = functools.partial(write_plot, result)
    written = write_outputs(writers, pinned)
    print(format_table(result), file=out)
    for path in written:
        print(f"wrote {path}", file=out)
    return 0
