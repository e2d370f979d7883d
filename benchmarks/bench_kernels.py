"""What the compiled kernels cost and buy: import, first call, each kernel beside its reference,
Python calls per step, and the hit rate of every memo.

Prints, in one run:

1. **Import**: ``import numpy, gymnasium`` and then ``import crop_gym`` in fresh processes (the
   fastest of ``--repeat``), and whether ``import crop_gym`` imports numba (it should not).
2. **First call**: in fresh processes, ``import numba`` with the kernels' module
   (:mod:`crop_gym.model.kernels_numba`), and ``gym.make("crop_gym/Placement-v0")`` + the first
   ``reset`` + one step with the kernels on and off (``CROP_GYM_KERNELS=numpy``): the difference is
   what loading the kernels from numba's cache costs. ``--cold`` also measures a cold compile
   (``NUMBA_CACHE_DIR`` set to an empty folder: 30–60 s).
3. **Per kernel**, on a typical ``Placement-v0`` step (after 5 random masked steps of seed 0):
   the time of each dispatched computation on the compiled path and on the numpy reference
   (forced with :func:`crop_gym.model.kernels.backend`), the fastest of several rounds of many
   calls: the candidate generator, the facts kernel, the action tables, the observation,
   ``ClusterState.place`` (on copies), ``gains`` and ``region_metrics``.
4. **Python calls per step** (``sys.setprofile``: Python function calls and C calls counted
   separately) of ``env.step`` with random masked actions, both paths.
5. **Memo hit rates** over ``--memo-steps`` random masked steps of ``Placement-v0`` and
   ``OnlinePlacement-v1``: the facts memo of every :class:`~crop_gym.model.conditions.Conditions`
   met (:attr:`~crop_gym.model.conditions.Conditions.facts_memo_stats`: key = GPU set, per
   conditions), and CROP's candidate pool (``conditions.cache["crop.candidate_pool"]``: key = GPU
   set, per conditions), with CROP asked for its placements every ``--crop-every`` steps (random
   play alone never runs CROP); the pool's hits are the candidates it already held when
   :meth:`CandidatePool.ids <crop_gym.baselines.crop_memo.CandidatePool.ids>` was asked (counted
   by a wrapper installed for this section only).

Usage::

    PYTHONPATH=. python benchmarks/bench_kernels.py                  # ~2 minutes
    PYTHONPATH=. python benchmarks/bench_kernels.py --cold --json kernels.json
    PYTHONPATH=. python benchmarks/bench_kernels.py --rounds 3 --memo-steps 200   # quick
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Parser, write_rows

import crop_gym
from crop_gym.envs.actions import build_action_tables
from crop_gym.envs.job_features import class_columns
from crop_gym.envs.observation import ObservedHealth
from crop_gym.model import kernels
from crop_gym.model.candidates import generate
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import padded_rows
from crop_gym.model.timing import job_class_memo_stats

ENV = "crop_gym/Placement-v0"
MEMO_IDS = ("crop_gym/Placement-v0", "crop_gym/OnlinePlacement-v1")
POOL_KEY = "crop.candidate_pool"
#: ``place`` calls timed per path (each on its own copy of the state).
PLACE_CALLS = 40


# ------------------------------------------------------------------------------------ processes
def _fresh(code: str, env: dict[str, str] | None = None) -> list[float]:
    """Run ``code`` in a fresh interpreter; its last output line, as floats."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        check=False,
    )
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"bench_kernels.py: a measuring process failed: {tail[0]}")
    return [float(x) for x in out.stdout.strip().splitlines()[-1].split()]


_IMPORT = """
import sys, time
t0 = time.perf_counter()
import numpy, gymnasium
t1 = time.perf_counter()
import crop_gym
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, float("numba" in sys.modules))
"""

_NUMBA = """
import time
import crop_gym
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
from crop_gym.model import kernels_numba
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

_FIRST = """
import time, numpy as np, gymnasium as gym, crop_gym
t0 = time.perf_counter()
env = gym.make("crop_gym/Placement-v0")
_, info = env.reset(seed=0)
env.step(int(np.flatnonzero(info["action_mask"])[0]))
t1 = time.perf_counter()
env2 = gym.make("crop_gym/Placement-v0")
_, info = env2.reset(seed=1)
env2.step(int(np.flatnonzero(info["action_mask"])[0]))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def import_costs(repeat: int) -> dict[str, Any]:
    runs = [_fresh(_IMPORT) for _ in range(repeat)]
    return {
        "numpy_gymnasium_s": min(r[0] for r in runs),
        "crop_gym_s": min(r[1] for r in runs),
        "numba_imported_by_crop_gym": bool(max(r[2] for r in runs)),
    }


def first_call_costs(repeat: int, cold: bool) -> dict[str, Any]:
    numba = [_fresh(_NUMBA) for _ in range(repeat)]
    on = [_fresh(_FIRST) for _ in range(repeat)]
    off = [_fresh(_FIRST, {"CROP_GYM_KERNELS": "numpy"}) for _ in range(repeat)]
    out: dict[str, Any] = {
        "import_numba_s": min(r[0] for r in numba),
        "import_kernels_module_s": min(r[1] for r in numba),
        "first_env_compiled_s": min(r[0] for r in on),
        "second_env_compiled_s": min(r[1] for r in on),
        "first_env_reference_s": min(r[0] for r in off),
        "second_env_reference_s": min(r[1] for r in off),
        "cold_first_env_compiled_s": None,
    }
    if cold:
        with tempfile.TemporaryDirectory() as tmp:
            out["cold_first_env_compiled_s"] = _fresh(_FIRST, {"NUMBA_CACHE_DIR": tmp})[0]
    return out


# ------------------------------------------------------------------------------------ per kernel
def _best(fn: Callable[[], Any], rounds: int, calls: int) -> float:
    """Fastest mean time of ``calls`` calls of ``fn`` over ``rounds`` rounds (seconds)."""
    fn()
    best = np.inf
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return float(best)


def _typical_env(seed: int = 0) -> Any:
    env = gym.make(ENV)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    for _ in range(5):
        valid = np.flatnonzero(info["action_mask"][:-1])  # (placements, not stop)
        if not len(valid):
            break
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    return env


def kernel_times(rounds: int, calls: int) -> list[dict[str, Any]]:
    """Compiled and reference time of each dispatched computation on a typical step."""
    env = _typical_env()
    u = env.unwrapped
    state, queue, table = u.state, u.pending_queue, u.table
    opts = u.table_options
    cond: Conditions = state.conditions
    free = state.free_mask
    sizes = [sorted({j.num_gpus for j in table.jobs})]
    keys = [key for cs in table.distinct for key in cs.keys]
    P, k = padded_rows(keys)
    seen = ObservedHealth.of(cond)
    builder = u.episodes.features
    steps = [int(u.steps)]
    max_steps = int(u.max_steps) if hasattr(u, "max_steps") else 64
    q, c = divmod(int(table.row_action[0]), table.max_candidates)
    job, gpus = table.jobs[q], table.gpus(q, c)
    row = table.row_of(q, c)
    facts_row = table.facts.take([row])
    const = table.const[[q]]
    copies = [state.copy() for _ in range(2 * PLACE_CALLS)]

    work: dict[str, Callable[[], Any]] = {
        "generator (candidates.generate)": lambda: generate(
            cond, free, sizes, table.max_candidates, robust=opts["robust"]
        ),
        "facts (Conditions.facts_of_rows)": lambda: cond.facts_of_rows(P, k),
        "action tables (build_action_tables)": lambda: build_action_tables(state, [queue], **opts),
        "observation (ObservationBuilder.build)": lambda: builder.build(
            state, seen, [table], [queue], steps, max_steps
        ),
        "gains (ClusterState.gains)": lambda: state.gains(const, table.facts),
        "region metrics (ClusterState.region_metrics)": state.region_metrics,
    }
    rows = []
    for name, fn in work.items():
        fast = _best(fn, rounds, calls)
        with kernels.backend("numpy"):
            ref = _best(fn, rounds, calls)
        rows.append({"kernel": name, "compiled_us": 1e6 * fast, "reference_us": 1e6 * ref})
    # place: each call on a fresh copy of the state (copies made above, not timed).
    n_place = PLACE_CALLS
    fast = _best_once(placing_from(copies[:n_place], job, gpus, facts_row, const))
    with kernels.backend("numpy"):
        ref = _best_once(placing_from(copies[n_place : 2 * n_place], job, gpus, facts_row, const))
    rows.append({"kernel": "place (ClusterState.place)", "compiled_us": fast, "reference_us": ref})
    env.close()
    for r in rows:
        r["speedup"] = r["reference_us"] / r["compiled_us"]
    return rows


def placing_from(states: list[Any], job: Any, gpus: Any, facts: Any, const: Any) -> list[Any]:
    """One ``place`` closure per state (each state placed on once)."""
    return [(lambda s=s: s.place([job], [gpus], facts, checked=True, const=const)) for s in states]


def _best_once(calls: list[Callable[[], Any]]) -> float:
    """Fastest of single calls, each on its own state, in microseconds (the first is a
    warm-up)."""
    times = []
    for fn in calls:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e6 * float(min(times[1:] or times))


# ------------------------------------------------------------------------------------ calls/step
def _counter(counts: dict[str, int]) -> Callable[[Any, str, Any], None]:
    """A ``sys.setprofile`` hook counting the events named in ``counts``."""

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event in counts:
            counts[event] += 1

    return prof


def calls_per_step(steps: int) -> list[dict[str, Any]]:
    """Python and C calls per ``env.step`` on both paths (random masked play, seed 0)."""
    out = []
    for name in ("numba", "numpy"):
        if name == "numba" and not kernels.enabled():
            continue
        with kernels.backend(name):
            env = gym.make(ENV)
            rng = np.random.default_rng(0)
            _, info = env.reset(seed=0)
            counts = {"call": 0, "c_call": 0}
            prof = _counter(counts)

            n = 0
            for _ in range(steps):
                valid = np.flatnonzero(info["action_mask"])
                a = int(valid[rng.integers(len(valid))])
                sys.setprofile(prof)
                _, _, term, trunc, info = env.step(a)
                sys.setprofile(None)
                n += 1
                if term or trunc:
                    _, info = env.reset()
            env.close()
        out.append(
            {
                "path": name,
                "python_calls_per_step": counts["call"] / n,
                "c_calls_per_step": counts["c_call"] / n,
            }
        )
    return out


# ------------------------------------------------------------------------------------ memos
def _state_and_queue(u: Any) -> tuple[Any, list[Any]]:
    """The cluster state and pending jobs of a static env or an online one (its simulator)."""
    sim = getattr(u, "sim", None)
    if sim is None:
        return u.state, u.pending
    pending = sim.pending
    return sim.state, list(pending() if callable(pending) else pending)


def memo_rates(env_id: str, steps: int, crop_every: int) -> dict[str, Any]:
    """Hit rates of the facts memos and of CROP's pool over ``steps`` random masked steps."""
    from crop_gym.baselines.crop_memo import CandidatePool
    from crop_gym.policy import make_policy

    crop = make_policy("crop")
    pool_counts = {"asked": 0, "new": 0}
    ids = CandidatePool.ids

    def counted(self: CandidatePool, conditions: Conditions, cs: Any) -> list[int]:
        before = len(self.gpus)
        got = ids(self, conditions, cs)
        pool_counts["asked"] += len(cs)
        pool_counts["new"] += len(self.gpus) - before
        return got

    seen: dict[int, Conditions] = {}
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    u = env.unwrapped
    class_hits0, class_misses0 = job_class_memo_stats()
    col0 = class_columns.cache_info()
    CandidatePool.ids = counted  # type: ignore[method-assign]
    try:
        for t in range(steps):
            state, pending = _state_and_queue(u)
            for cond in (state.conditions, state.conditions.blind):
                seen.setdefault(id(cond), cond)
            if crop_every and t % crop_every == 0:
                crop.place(state, pending)
            valid = np.flatnonzero(info["action_mask"])
            _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
            if term or trunc:
                _, info = env.reset()
    finally:
        CandidatePool.ids = ids  # type: ignore[method-assign]
    env.close()
    class_hits, class_misses = job_class_memo_stats()
    class_hits, class_misses = class_hits - class_hits0, class_misses - class_misses0
    col = class_columns.cache_info()
    col_hits, col_misses = col.hits - col0.hits, col.misses - col0.misses
    hits = sum(c.facts_memo_stats[0] for c in seen.values())
    misses = sum(c.facts_memo_stats[1] for c in seen.values())
    pools = [c.cache[POOL_KEY] for c in seen.values() if POOL_KEY in c.cache]
    asked, new = pool_counts["asked"], pool_counts["new"]
    return {
        "id": env_id,
        "steps": steps,
        "crop_every": crop_every,
        "conditions": len(seen),
        "facts_hits": hits,
        "facts_misses": misses,
        "facts_hit_rate": hits / (hits + misses) if hits + misses else None,
        "crop_calls": (steps + crop_every - 1) // crop_every if crop_every else 0,
        "pool_asked": asked,
        "pool_new": new,
        "pool_hit_rate": (asked - new) / asked if asked else None,
        "pool_candidates": sum(len(p.gpus) for p in pools),
        "pool_lists": sum(len(p.lists) for p in pools),
        "job_class_hits": class_hits,
        "job_class_misses": class_misses,
        "job_class_hit_rate": (
            class_hits / (class_hits + class_misses) if class_hits + class_misses else None
        ),
        "columns_hits": col_hits,
        "columns_misses": col_misses,
        "columns_hit_rate": col_hits / (col_hits + col_misses) if col_hits + col_misses else None,
    }


# ------------------------------------------------------------------------------------ main
def _pct(x: float | None) -> str:
    return "     -" if x is None else f"{100 * x:5.1f}%"


def main(argv: list[str] | None = None) -> None:
    """Print the tables (and write them as JSON with ``--json``)."""
    ap = Parser(__doc__)
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per cost (>= 1)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds per kernel timing (>= 1)")
    ap.add_argument("--calls", type=int, default=50, help="calls per round (>= 1)")
    ap.add_argument("--call-steps", type=int, default=200, help="steps profiled (>= 1)")
    ap.add_argument("--memo-steps", type=int, default=2000, help="steps per memo run (>= 1)")
    ap.add_argument("--crop-every", type=int, default=10, help="CROP every N steps (0: never)")
    ap.add_argument("--cold", action="store_true", help="also time a cold compile (30-60 s)")
    ap.add_argument("--json", type=Path, default=None, help="also write the tables as JSON here")
    args = ap.parse_args(argv)
    for name in ("repeat", "rounds", "calls", "call_steps", "memo_steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if args.crop_every < 0:
        ap.error(f"--crop-every {args.crop_every}: must be >= 0")
    print(
        f"crop_gym {crop_gym.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}; compiled kernels: "
        f"{'on' if kernels.enabled() else 'off (numba missing or CROP_GYM_KERNELS=numpy)'}\n"
    )
    imp = import_costs(args.repeat)
    print(
        f"import numpy, gymnasium: {1e3 * imp['numpy_gymnasium_s']:.0f} ms; then import "
        f"crop_gym: {1e3 * imp['crop_gym_s']:.0f} ms; numba imported by it: "
        f"{'yes' if imp['numba_imported_by_crop_gym'] else 'no'} (fastest of {args.repeat})"
    )
    first = first_call_costs(args.repeat, args.cold) if kernels.enabled() else {}
    if first:
        print(
            f"import numba: {1e3 * first['import_numba_s']:.0f} ms; import kernels_numba (njit "
            f"wrappers): {1e3 * first['import_kernels_module_s']:.0f} ms\n"
            f"make + reset + step of {ENV}: first env {first['first_env_compiled_s']:.2f} s "
            f"compiled (kernels loaded from the cache) vs {first['first_env_reference_s']:.2f} s "
            f"reference; second env {1e3 * first['second_env_compiled_s']:.0f} ms vs "
            f"{1e3 * first['second_env_reference_s']:.0f} ms"
        )
        if first["cold_first_env_compiled_s"] is not None:
            print(
                f"cold compile (empty cache): first env {first['cold_first_env_compiled_s']:.1f} s"
            )
    print()
    ktab: list[dict[str, Any]] = []
    if kernels.enabled():
        ktab = kernel_times(args.rounds, args.calls)
        print(f"per kernel on a typical {ENV} step (fastest of {args.rounds} rounds)")
        print(f"{'computation':46s} {'compiled us':>12s} {'reference us':>13s} {'speedup':>8s}")
        print("-" * 82)
        for r in ktab:
            print(
                f"{r['kernel']:46s} {r['compiled_us']:12.1f} {r['reference_us']:13.1f} "
                f"{r['speedup']:7.1f}x"
            )
        print()
    calls = calls_per_step(args.call_steps)
    print(f"calls per env.step of {ENV} ({args.call_steps} random masked steps)")
    print(f"{'path':8s} {'Python calls':>13s} {'C calls':>9s}")
    for r in calls:
        print(f"{r['path']:8s} {r['python_calls_per_step']:13.1f} {r['c_calls_per_step']:9.1f}")
    print()
    # Random play alone (the environment's own use of the memos), then with CROP asked too.
    every = [0, args.crop_every] if args.crop_every else [0]
    memos = [memo_rates(i, args.memo_steps, e) for i in MEMO_IDS for e in every]
    print(
        f"memo hit rates ({args.memo_steps} random masked steps; CROP asked every "
        f"{args.crop_every or '-'} steps)"
    )
    print(
        f"{'env':30s} {'CROP':>5s} {'conds':>5s} {'facts hits':>10s} {'misses':>7s} {'rate':>6s}   "
        f"{'CROP calls':>10s} {'pool asked':>10s} {'new':>6s} {'rate':>6s}   "
        f"{'class hits':>10s} {'misses':>6s} {'rate':>6s}   "
        f"{'cols hits':>9s} {'misses':>6s} {'rate':>6s}"
    )
    print("-" * 161)
    for m in memos:
        print(
            f"{m['id']:30s} {m['crop_every'] or '-':>5} {m['conditions']:5d} {m['facts_hits']:10d} {m['facts_misses']:7d} "
            f"{_pct(m['facts_hit_rate'])}   {m['crop_calls']:10d} {m['pool_asked']:10d} "
            f"{m['pool_new']:6d} {_pct(m['pool_hit_rate'])}   {m['job_class_hits']:10d} "
            f"{m['job_class_misses']:6d} {_pct(m['job_class_hit_rate'])}   "
            f"{m['columns_hits']:9d} {m['columns_misses']:6d} {_pct(m['columns_hit_rate'])}"
        )
    print(
        "(CROP: asked every N steps, - never; facts: Conditions.facts_memo_stats summed over "
        "every conditions met (true and blind); pool: candidates CROP's pool already held when "
        "asked; class: timing.job_class_memo_stats, the job-class constants (M, t_c, T*, kappa) "
        "looked up in this run, this process having run the rows above first; cols: "
        "job_features.class_columns, a job class's observation columns, counted the same way)"
    )
    if args.json is not None:
        payload = {
            "import": imp,
            "first_call": first,
            "kernels": ktab,
            "calls": calls,
            "memos": memos,
        }
        write_rows(args.json, [payload])


if __name__ == "__main__":
    main()
