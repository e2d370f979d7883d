"""What batching across environments would buy: per-row cost of the step's array calls by batch size.

The step of a placement environment is a few dozen numpy calls on small arrays (a 64-GPU cluster
offers a few dozen candidate rows per step), so its time is mostly the fixed cost of each call, not
the work per row. This script measures, in one run, how the cost per environment falls when the
rows of ``N`` environments go through one call, for the two row-wise calls of the action table:

* ``placement_facts``: the facts of the candidates of ``N`` states (each state's own rows,
  concatenated; one health for all, as a batched backend would gather per-row device tables);
* ``ClusterState.row_gains``: each row's own value under the current link loads;

and the step rate of a cluster 16 times larger, which is what one step of 16 environments held
as one state of 16 disjoint clusters would cost at most per call (``Placement-1024-v0`` has 16 ×
the GPUs of ``Placement-v0`` and the same view). Figures are ratios within this run.

Usage::

    PYTHONPATH=. python benchmarks/bench_batching.py            # ~30 s
    PYTHONPATH=. python benchmarks/bench_batching.py --repeat 500
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import crop_gym  # noqa: F401  (registers the environments)
from crop_gym.model.facts import PlacementFacts, placement_facts

BATCHES = (1, 4, 16, 64)


def _per_call(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t) / repeat)
    return float(best)


def _step_rate(env_id: str, steps: int, seed: int) -> float:
    env = gym.make(env_id).unwrapped
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    total = 0.0
    for _ in range(steps):
        action = rng.choice(np.flatnonzero(info["action_mask"]))
        t = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        total += time.perf_counter() - t
        if term or trunc:
            _, info = env.reset()
    return steps / total


def main() -> None:
    """Print the per-environment cost of each call by batch size, and the step-rate ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200, help="calls per timing block")
    ap.add_argument("--steps", type=int, default=1500, help="steps per step-rate measurement")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    env = gym.make("crop_gym/Placement-v0").unwrapped
    env.reset(seed=args.seed)
    state, table = env.state, env.table
    rows = [cs.gpus for cs in table.distinct]
    const, facts = table.const[table.row_slot], table.facts
    print(
        f"Placement-v0, seed {args.seed}: {sum(len(r) for r in rows)} distinct candidates (facts), "
        f"{len(table.row_slot)} action rows (gains)"
    )
    print(f"{'N envs':>7}  {'facts us/env':>13}  {'x N=1':>6}  {'gains us/env':>13}  {'x N=1':>6}")
    base: tuple[float, float] | None = None
    for n in BATCHES:
        # One block per job size (rows of equal size stacked), as a batched caller would pass.
        by_k: dict[int, list[np.ndarray]] = {}
        for r in rows * n:
            by_k.setdefault(r.shape[1], []).append(r)
        blocks = [np.concatenate(b) for b in by_k.values()]
        f_n = PlacementFacts(np.tile(facts.values, (n, 1)), np.tile(facts.inter_links, (n, 1)))
        c_n = np.tile(const, (n, 1))
        t_f = _per_call(
            lambda b=blocks: placement_facts(state.topology, state.health, b), args.repeat
        )
        t_g = _per_call(lambda c=c_n, f=f_n: state.row_gains(c, f, interference=False), args.repeat)
        per = (1e6 * t_f / n, 1e6 * t_g / n)
        base = base or per
        print(
            f"{n:>7}  {per[0]:>13.1f}  {base[0] / per[0]:>6.2f}  {per[1]:>13.1f}  "
            f"{base[1] / per[1]:>6.2f}"
        )
    small = _step_rate("crop_gym/Placement-v0", args.steps, args.seed)
    large = _step_rate("crop_gym/Placement-1024-v0", args.steps, args.seed)
    print(
        f"step rate: Placement-v0 {small:,.0f}/s, Placement-1024-v0 (16 x the GPUs) "
        f"{large:,.0f}/s = {large / small:.2f} x; 16 envs in one state would step at up to "
        f"{16 * large / small:.1f} x the env-steps per second of one env"
    )


if __name__ == "__main__":
    main()
