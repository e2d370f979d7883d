"""Lines of "the step path": the crop_gym modules whose code ``env.step`` runs.

How the modules are chosen: a seeded rollout of masked random actions (resets between episodes are
not traced) runs with :func:`sys.settrace` switched on only inside ``env.step``; every module of the
``crop_gym`` package that one of the traced frames belongs to is on the step path. Gymnasium, numpy
and the standard library are left out (they are not this project's code). The script prints the
lines (as ``wc -l`` counts them) of each module and the total (the measure issue 11 sets its
target in), and beside them a finer one: the lines of the functions and methods of the module that
ran (by name, docstrings included; the rest of a module is its construction, validation, other
entry points and module documentation).

The compiled inputs (``model/topology.py``, ``model/health.py``, ``model/jobs.py``: the cluster,
its health and the jobs, built before an episode and immutable) are listed apart, with the
functions of theirs that the step calls (accessors such as ``Topology.num_gpus`` and the model-zoo
look-up), and counted in a second total: the step reads them but runs none of their logic.

Usage::

    PYTHONPATH=. python benchmarks/step_path_lines.py                     # Placement-v0
    PYTHONPATH=. python benchmarks/step_path_lines.py --ids crop_gym/Placement-v0 crop_gym/PlacementGPU-v0
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import gymnasium as gym
import numpy as np

import crop_gym

ROOT = Path(crop_gym.__file__).resolve().parent
#: The compiled-input modules (see the module docstring).
INPUTS = ("model/topology.py", "model/health.py", "model/jobs.py")


def step_modules(env_id: str, steps: int, seed: int) -> dict[Path, set[str]]:
    """The files of ``crop_gym`` that ``env.step`` of ``env_id`` executes over ``steps`` steps,
    each with the names of the functions of it that ran."""
    seen: dict[str, set[str]] = {}

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            seen.setdefault(frame.f_code.co_filename, set()).add(frame.f_code.co_name)

    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    for _ in range(steps):
        valid = np.flatnonzero(info["action_mask"])
        action = int(valid[rng.integers(len(valid))])
        sys.setprofile(tracer)  # call events of Python frames (cheaper than settrace)
        try:
            _, _, term, trunc, info = env.step(action)
        finally:
            sys.setprofile(None)
        if term or trunc:
            _, info = env.reset()
    env.close()
    out: dict[Path, set[str]] = {}
    for name, functions in seen.items():
        p = Path(name).resolve()
        if p.suffix == ".py" and p.is_relative_to(ROOT):
            out.setdefault(p, set()).update(functions)
    return out


def ran_lines(path: Path, functions: set[str]) -> int:
    """Lines of the functions and methods of module ``path`` named in ``functions``."""
    tree = ast.parse(path.read_text())
    return sum(
        node.end_lineno - node.lineno + 1  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in functions
    )


def main(argv: list[str] | None = None) -> None:
    """Print the lines of each module on the step path and their total."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", nargs="*", default=["crop_gym/Placement-v0"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    files: dict[Path, set[str]] = {}
    for env_id in args.ids:
        for p, functions in step_modules(env_id, args.steps, args.seed).items():
            files.setdefault(p, set()).update(functions)
    total, inputs, ran = 0, 0, 0
    path = [p for p in sorted(files) if p.relative_to(ROOT).as_posix() not in INPUTS]
    print(f"{'module':>6s}  {'ran':>5s}")
    for p in path:
        n, r = len(p.read_text().splitlines()), ran_lines(p, files[p])
        total, ran = total + n, ran + r
        print(f"{n:6d}  {r:5d}  crop_gym/{p.relative_to(ROOT)}")
    print(
        f"{total:6d}  {ran:5d}  total, step path ({len(path)} modules; {', '.join(args.ids)}); "
        "ran: lines of the functions that ran"
    )
    for p in sorted(set(files) - set(path)):
        n = len(p.read_text().splitlines())
        inputs += n
        called = ", ".join(sorted(files[p]))
        print(
            f"{n:6d}  {'':5s}  crop_gym/{p.relative_to(ROOT)}  (compiled input; the step calls: "
            f"{called})"
        )
    print(f"{total + inputs:6d}  total with the compiled inputs")


if __name__ == "__main__":
    main()
