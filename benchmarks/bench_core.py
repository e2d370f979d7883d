"""Speed of the core model: full evaluation of F, incremental add/remove, trace loading.

Run: ``python benchmarks/bench_core.py``. Prints figures; asserts nothing.
Targets (issue 2): full F on 1,024 GPUs with 200 jobs <= 2 ms; incremental add or remove <= 0.2 ms;
loading ``cluster04`` <= 1 s.
"""

from __future__ import annotations

import time

import numpy as np

from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import PROFILES
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology

MODELS = ("resnet50", "vgg16", "bert", "gpt2", "inception3", "deepspeech2")


def populated(preset: str, n_jobs: int, seed: int = 0) -> tuple[ClusterState, list[Job]]:
    """A cluster with ``n_jobs`` jobs placed on compact candidates (mild abnormalities)."""
    rng = np.random.default_rng(seed)
    t = make_topology(preset)
    st = ClusterState(t, PROFILES["mild"].sample(t, rng))
    jobs = []
    sizes = [1, 2, 4, 8, 16]
    while len(jobs) < n_jobs:
        k = int(rng.choice(sizes, p=[0.55, 0.15, 0.15, 0.1, 0.05]))
        cands = candidate_placements(st, k)
        if len(cands) == 0:
            break
        j = Job(f"j{len(jobs)}", MODELS[len(jobs) % len(MODELS)], k, 128)
        st.add(j, cands.gpus[rng.integers(len(cands))])
        jobs.append(j)
    return st, jobs


def timeit(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def main() -> None:
    st, jobs = populated("n128g8", 200)
    print(f"cluster: {st}")
    full = timeit(st.evaluate, 500)
    print(
        f"full evaluation of F, 1,024 GPUs, {len(jobs)} jobs: {full * 1e3:.3f} ms (target <= 2 ms)"
    )

    rem, add = [], []
    for j in jobs:
        gpus = st.placement(j.job_id)
        facts = st.facts_for(gpus)
        t0 = time.perf_counter()
        st.remove(j.job_id)
        t1 = time.perf_counter()
        st.add(j, gpus, facts=facts)
        t2 = time.perf_counter()
        rem.append(t1 - t0)
        add.append(t2 - t1)
    print(
        f"incremental remove: mean {np.mean(rem) * 1e3:.3f} ms, p95 {np.percentile(rem, 95) * 1e3:.3f} ms (target <= 0.2 ms)"
    )
    print(
        f"incremental add (facts given): mean {np.mean(add) * 1e3:.3f} ms, p95 {np.percentile(add, 95) * 1e3:.3f} ms"
    )
    add_full = []
    for j in jobs:
        gpus = st.placement(j.job_id)
        st.remove(j.job_id)
        t0 = time.perf_counter()
        st.add(j, gpus)
        add_full.append(time.perf_counter() - t0)
    print(
        f"incremental add (incl. placement facts): mean {np.mean(add_full) * 1e3:.3f} ms (target <= 0.2 ms)"
    )
    gains = [timeit(lambda j=j: st.gain(j, st.placement(j.job_id)), 20) for j in jobs[:50]]
    print(f"gain (ΔF without mutation): mean {np.mean(gains) * 1e3:.3f} ms")
    assert abs(st.F - st.copy().evaluate()) < 1e-6

    try:
        from crop_gym.workloads import load_workload
    except ImportError:  # pragma: no cover
        return
    load_workload("elasticflow:cluster04")  # warm the import
    t = time.perf_counter()
    w = load_workload("elasticflow:cluster04")
    print(
        f"load elasticflow:cluster04 ({len(w.jobs)} jobs): {time.perf_counter() - t:.3f} s (target <= 1 s)"
    )


if __name__ == "__main__":
    main()
