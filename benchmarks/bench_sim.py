"""Speed of the discrete-event simulator and of the online environment.

Run from the repository root (after ``pip install -e .``, or with ``PYTHONPATH=.``)::

    python benchmarks/bench_sim.py                  # every case
    python benchmarks/bench_sim.py --quick          # cluster10 only
    python benchmarks/bench_sim.py --cases policy/  # the per-policy cases (a substring of names)
    python benchmarks/bench_sim.py --profile        # also print each case's top functions (cProfile)

Each simulator case runs in a child process so that its peak memory (max RSS, from ``wait4``) is its
own; it reports the wall time of the run and its CPU time (``time.process_time``: what other work
on the machine inflates least). Budgets (2-core machine): ``elasticflow:cluster10`` on ``n32g8``
with CROP <= 10 s; ``elasticflow:cluster04`` (15,802 jobs) on ``n128g8`` with CROP <= 20 s and
<= 2 GiB peak memory (issue 16: 56 s before the speed-ups). The ``policy/`` cases run every
registered policy on the first 3,000 jobs of cluster04 under the ``mild`` profile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from crop_gym.policy import policy_names

CASES: dict[str, dict[str, Any]] = {
    "cluster10/n32g8/crop/none": {
        "trace": "elasticflow:cluster10",
        "cluster": "n32g8",
        "policy": "crop",
        "profile": "none",
        "budget_s": 10.0,
    },
    "cluster10/n32g8/crop/severe": {
        "trace": "elasticflow:cluster10",
        "cluster": "n32g8",
        "policy": "crop",
        "profile": "severe",
    },
    "cluster04/n128g8/crop/none": {
        "trace": "elasticflow:cluster04",
        "cluster": "n128g8",
        "policy": "crop",
        "profile": "none",
        "budget_s": 20.0,
        "budget_mib": 2048.0,
    },
    "cluster04[:3000]/n128g8/crop/severe": {
        "trace": "elasticflow:cluster04",
        "jobs": 3000,
        "cluster": "n128g8",
        "policy": "crop",
        "profile": "severe",
    },
    "cluster04/n128g8/first-fit/none": {
        "trace": "elasticflow:cluster04",
        "cluster": "n128g8",
        "policy": "first-fit",
        "profile": "none",
    },
}
POLICIES = policy_names()  # every registered policy, in the registry's order
for _p in POLICIES:
    CASES[f"policy/cluster04[:3000]/{_p}/mild"] = {
        "trace": "elasticflow:cluster04",
        "jobs": 3000,
        "cluster": "n128g8",
        "policy": _p,
        "profile": "mild",
    }
QUICK = ("cluster10/n32g8/crop/none", "cluster10/n32g8/crop/severe")


def run_case(spec: dict[str, Any], profile: bool) -> dict[str, Any]:
    """Run one simulation in this process and return its figures."""
    from crop_gym.policy import make_policy
    from crop_gym.sim import Simulator
    from crop_gym.workloads import load_workload

    t0 = time.perf_counter()
    wl = load_workload(spec["trace"])
    jobs = wl.jobs[: spec["jobs"]] if spec.get("jobs") else wl.jobs
    sim = Simulator(jobs, spec["cluster"], profile=spec["profile"], seed=0)
    policy = make_policy(spec["policy"])
    setup = time.perf_counter() - t0
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    c0 = time.process_time()
    res = sim.run(policy)
    cpu = time.process_time() - c0
    top = ""
    if prof is not None:
        import io
        import pstats

        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
        top = buf.getvalue()
    m = res.metrics
    return {
        "jobs": len(jobs),
        "setup_s": setup,
        "run_s": m["wall_s"],
        "cpu_s": cpu,
        "policy_s": m["policy_wall_s"],
        "events": m["events"],
        "policy_calls": m["policy_calls"],
        "events_per_s": m["events_per_s"],
        "mean_jct_h": m["mean_jct_s"] / 3600.0,
        "mean_utilization": m["mean_utilization"],
        "profile": top,
    }


def online_env_rate(steps: int = 3000) -> dict[str, float]:
    """Steps/s of crop_gym/OnlinePlacement-v0 with random masked actions, beside CartPole."""
    import gymnasium as gym
    import numpy as np

    import crop_gym  # noqa: F401

    out: dict[str, float] = {}
    env = gym.make("crop_gym/OnlinePlacement-v0")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    _, info = env.reset(seed=0)
    out["online_reset_s"] = time.perf_counter() - t0
    resets = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        valid = np.flatnonzero(info["action_mask"])
        a = int(valid[-1]) if rng.random() < 0.3 else int(rng.choice(valid))
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            _, info = env.reset()
            resets += 1
    out["online_steps_per_s"] = steps / (time.perf_counter() - t0)
    out["online_episodes"] = resets
    cp = gym.make("CartPole-v1")
    cp.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = cp.step(cp.action_space.sample())
        if term or trunc:
            cp.reset()
    out["cartpole_steps_per_s"] = steps / (time.perf_counter() - t0)
    return out


def child(name: str, profile: bool) -> dict[str, Any]:
    """Run ``name`` in a child process; add its peak RSS (MiB)."""
    cmd = [sys.executable, __file__, "--child", name] + (["--profile"] if profile else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"case {name} failed with exit code {proc.returncode}")
    data: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    data["peak_mib"] = usage.ru_maxrss / 1024.0  # KiB on Linux
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="cluster10 cases only")
    ap.add_argument("--cases", default=None, help="only the cases whose name contains this")
    ap.add_argument(
        "--profile", action="store_true", help="print cProfile's top functions per case"
    )
    ap.add_argument("--json", default=None, help="also write the figures as JSON")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_case(CASES[args.child], args.profile)))
        return 0
    names = QUICK if args.quick else tuple(CASES)
    if args.cases:
        names = tuple(n for n in names if args.cases in n)
    results: dict[str, Any] = {}
    ok = True
    print(
        f"{'case':<42} {'jobs':>6} {'run s':>7} {'CPU s':>7} {'policy s':>9} {'events':>8} "
        f"{'ev/s':>7} {'peak MiB':>9}  budget"
    )
    for name in names:
        r = child(name, args.profile)
        spec = CASES[name]
        verdict = []
        if "budget_s" in spec:
            good = r["setup_s"] + r["run_s"] <= spec["budget_s"]
            ok &= good
            verdict.append(f"<= {spec['budget_s']:.0f} s {'ok' if good else 'OVER'}")
        if "budget_mib" in spec:
            good = r["peak_mib"] <= spec["budget_mib"]
            ok &= good
            verdict.append(f"<= {spec['budget_mib']:.0f} MiB {'ok' if good else 'OVER'}")
        print(
            f"{name:<42} {r['jobs']:>6} {r['run_s']:>7.1f} {r['cpu_s']:>7.1f} {r['policy_s']:>9.1f} "
            f"{r['events']:>8,} "
            f"{r['events_per_s']:>7,.0f} {r['peak_mib']:>9.0f}  {'; '.join(verdict)}",
            flush=True,
        )
        if args.profile:
            print(r["profile"])
        r.pop("profile")
        results[name] = r
    if not args.cases:
        env = online_env_rate()
        results["online_env"] = env
        print(
            f"\nOnlinePlacement-v0: {env['online_steps_per_s']:,.0f} steps/s with random masked "
            f"actions ({env['online_episodes']:.0f} episodes), reset "
            f"{env['online_reset_s'] * 1000:.1f} ms; CartPole-v1 "
            f"{env['cartpole_steps_per_s']:,.0f} steps/s in the same run"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
