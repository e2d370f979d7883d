"""What a state with an environment axis would buy: N instances as one state, against N states.

The batched environment (``crop_gym/envs/vector.py``) keeps one
:class:`~crop_gym.model.state.ClusterState` per environment and shares the candidate generation
and the facts between them; the state update and the row gains stay per environment. This script
measures the premise of the next step: ``N`` instances of a scenario held as **one** state over
``N`` copies of the cluster under a new root (``tests/helpers.py::union_topology``; no job crosses
copies, and tests/test_locality.py checks that each copy behaves as its cluster alone). For each
``N`` it prints, per environment (best of ``--repeat`` rounds, microseconds):

* ``add``: placing one job in every instance: ``N`` separate ``ClusterState.add`` calls, against
  one ``add_many`` on the joined state (one check, one placement pass, one evaluation), and ``N``
  ``add`` calls one after another on the joined state;
* ``row gains``: ΔF of the first queued job on each of its candidates in every instance: ``N``
  separate ``row_gains`` calls, against one call on the joined state over all rows.

Usage::

    PYTHONPATH=. python benchmarks/bench_env_axis.py                       # ~10 s
    PYTHONPATH=. python benchmarks/bench_env_axis.py --num-envs 4 16 64 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the joined cluster is the one the tests check

from _common import write_rows  # noqa: E402
from helpers import joined_health, union_topology  # noqa: E402

from crop_gym.errors import ConfigError  # noqa: E402
from crop_gym.model.candidates import candidate_sets  # noqa: E402
from crop_gym.model.facts import memo_facts  # noqa: E402
from crop_gym.model.state import ClusterState  # noqa: E402
from crop_gym.model.timing import job_constants  # noqa: E402
from crop_gym.scenario import ScenarioSampler  # noqa: E402


def _best(fn: Callable[[], float], repeat: int) -> float:
    """Smallest of ``repeat`` timings (``fn`` returns the seconds of its timed part)."""
    return min(fn() for _ in range(repeat))


def measure(scenario: str, n: int, repeat: int, seed: int = 0) -> dict[str, Any]:
    """The per-environment costs (µs) of ``n`` instances of ``scenario``, both ways."""
    sampler = ScenarioSampler(scenario)
    rng = np.random.default_rng(seed)
    insts = [sampler.sample(rng) for _ in range(n)]
    topo, perf = sampler.topology, insts[0].state.perf
    G = topo.num_gpus
    union = union_topology(topo, n)
    joined = ClusterState(union, joined_health([i.state.health for i in insts]), perf=perf)
    background, where = [], []
    for i, inst in enumerate(insts):
        for job in inst.state.placed_jobs():
            background.append(dataclasses.replace(job, job_id=f"{i}/{job.job_id}"))
            where.append(inst.state.placement(job.job_id) + i * G)
    joined.add_many(background, where)
    # One move per instance: its first queued job on its best candidate.
    firsts = [inst.queue[0] for inst in insts]
    sets = [candidate_sets(inst.state, [j.num_gpus])[0] for inst, j in zip(insts, firsts)]
    moves = [(i, j, cs.gpus[0]) for i, (j, cs) in enumerate(zip(firsts, sets)) if len(cs)]
    jobs_u = [dataclasses.replace(j, job_id=f"{i}/new") for i, j, _ in moves]
    gpus_u = [g + i * G for i, _, g in moves]

    def add_apart() -> float:
        states = [inst.state.copy() for inst in insts]
        t = time.perf_counter()
        for i, job, gpus in moves:
            states[i].add(job, gpus)
        return time.perf_counter() - t

    def add_joined_many() -> float:
        st = joined.copy()
        t = time.perf_counter()
        st.add_many(jobs_u, gpus_u)
        return time.perf_counter() - t

    def add_joined_each() -> float:
        st = joined.copy()
        t = time.perf_counter()
        for job, gpus in zip(jobs_u, gpus_u, strict=True):
            st.add(job, gpus)
        return time.perf_counter() - t

    facts = [memo_facts(topo, inst.state.health, list(cs.keys)) for inst, cs in zip(insts, sets)]
    consts = [
        np.repeat(job_constants(topo, perf, [j]), len(cs), axis=0)
        for j, cs in zip(firsts, sets, strict=True)
    ]
    keys_u = [tuple(int(g) + i * G for g in key) for i, cs in enumerate(sets) for key in cs.keys]
    facts_u, consts_u = memo_facts(union, joined.health, keys_u), np.concatenate(consts)

    def gains_apart() -> float:
        t = time.perf_counter()
        for inst, c, f in zip(insts, consts, facts, strict=True):
            inst.state.row_gains(c, f, interference=False)
        return time.perf_counter() - t

    def gains_joined() -> float:
        t = time.perf_counter()
        joined.row_gains(consts_u, facts_u, interference=False)
        return time.perf_counter() - t

    per_env = 1e6 / n
    return {
        "scenario": scenario,
        "num_envs": n,
        "jobs_placed": len(joined.jobs),
        "rows": len(consts_u),
        "add_apart_us": _best(add_apart, repeat) * per_env,
        "add_joined_many_us": _best(add_joined_many, repeat) * per_env,
        "add_joined_each_us": _best(add_joined_each, repeat) * per_env,
        "gains_apart_us": _best(gains_apart, repeat) * per_env,
        "gains_joined_us": _best(gains_joined, repeat) * per_env,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the measurements and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--num-envs", nargs="+", type=int, default=[4, 16])
    ap.add_argument("--repeat", type=int, default=200, help="rounds; the best one counts")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if any(n < 1 for n in args.num_envs) or args.repeat < 1:
        ap.error("--num-envs and --repeat must be >= 1")
    try:
        rows = [measure(args.scenario, n, args.repeat) for n in args.num_envs]
    except ConfigError as exc:
        ap.error(str(exc))
    print(f"scenario {args.scenario}; microseconds per environment, best of {args.repeat} rounds")
    print(
        f"{'N':>4s} {'jobs':>5s} {'rows':>5s}   {'add: apart':>11s} {'joined, one call':>17s} "
        f"{'joined, one by one':>19s}   {'gains: apart':>13s} {'joined':>7s}"
    )
    for r in rows:
        print(
            f"{r['num_envs']:4d} {r['jobs_placed']:5d} {r['rows']:5d}   "
            f"{r['add_apart_us']:11.1f} {r['add_joined_many_us']:17.1f} "
            f"{r['add_joined_each_us']:19.1f}   {r['gains_apart_us']:13.1f} "
            f"{r['gains_joined_us']:7.1f}"
        )
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
