"""The ``crop-gym`` command.

Each sub-command lives in its own module exposing ``register(subparsers)``, which adds an argparse
sub-parser whose ``func`` default takes the parsed namespace and returns an exit code. Modules are
imported here by name so that heavy dependencies are only imported inside each command's ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from crop_gym.errors import CropGymError

__all__ = ["main"]

#: Modules that provide sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "baselines.compare_cli",
    "crop_gym.calibration_cli",
    "crop_gym.workloads.cli",
    "crop_gym.sim_cli",
    "agents.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="crop-gym",
        description="GPU-cluster job placement: CROP, baselines, simulator and RL environments.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A module not written yet, or an optional extra (torch for ``agents``) missing.
            if exc.name is not None and (name.startswith(exc.name) or exc.name in {"torch"}):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crop-gym`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (CropGymError, ValueError, FileNotFoundError) as exc:
        print(f"crop-gym {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
