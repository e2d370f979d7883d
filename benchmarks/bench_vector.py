"""Per-environment step rate of the batched placement environment, beside CartPole, in one run.

Every row is random masked play (uniform over the valid actions) of ``N`` environments, timed
inside ``step`` only. The rate is environment-steps per second: ``N`` times the vector steps per
second. Two rates per row:

* ``with resets``: autoresets included (a vector environment resets inside ``step``; the single
  environments are reset the same way, inside the timed call, so every row counts the same work);
* ``step only``: the placement rows again with autoresets off (``autoreset_mode="Disabled"``), the
  ended environments reset outside the timed calls (``options["reset_mask"]``): the work of a step
  alone, what ``bench_envs.py``'s ``step/s`` counts for a single environment. Gymnasium's
  ``CartPoleVectorEnv`` resets only inside ``step`` (its resets cost microseconds), so its vector
  row has no such rate.

Rows, for each ID and ``N``:

* ``single``: one ``gymnasium.make(id)`` environment (``N = 1``);
* ``sync``: ``gymnasium.make_vec(id, N, vectorization_mode="sync")`` (``N`` single environments
  stepped one after another: the reference, and what a batch of one-at-a-time code costs);
* ``vector``: ``gymnasium.make_vec(id, N, vectorization_mode="vector_entry_point")``, the
  registered :class:`~crop_gym.envs.vector.PlacementVectorEnv` (the ``N`` episodes as one state
  over ``N`` regions, their action tables built together; Gymnasium's ``CartPoleVectorEnv`` for
  CartPole);

and CartPole-v1 the same three ways (its vector row is Gymnasium's ``CartPoleVectorEnv``). The
``x CartPole`` columns divide by the single CartPole-v1 of the same run, measured the same way (the
ratio issue 11 sets its targets in); ``x sync`` divides by the sync row of the same ``N``.

Usage::

    PYTHONPATH=. python benchmarks/bench_vector.py                      # N = 1, 16, 64: ~2 minutes
    PYTHONPATH=. python benchmarks/bench_vector.py --num-envs 1 4 16 64 --steps 400
    PYTHONPATH=. python benchmarks/bench_vector.py --json out.json      # also write the rows
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import Parser, write_rows
from gymnasium.vector import AutoresetMode

import crop_gym

DEFAULT_IDS = ("crop_gym/Placement-v0", "crop_gym/Placement-1024-v0")
CARTPOLE = "CartPole-v1"


def _masks(vec: Any, n: int) -> Any:
    """``bool[N, A]`` valid actions (all valid for CartPole)."""
    u = vec.unwrapped
    if hasattr(u, "action_masks"):
        return np.atleast_2d(u.action_masks())  # (a single environment: one row)
    envs = getattr(u, "envs", None)
    if envs is not None and hasattr(envs[0].unwrapped, "action_masks"):
        return np.stack([e.unwrapped.action_masks() for e in envs])
    return np.ones((n, int(vec.single_action_space.n)), dtype=bool)


class _Single:
    """One environment behind the vector interface: with ``autoreset``, reset inside ``step``
    when it ended (as ``NEXT_STEP``); without, :meth:`reset` with ``options["reset_mask"]``."""

    def __init__(self, env_id: str, autoreset: bool) -> None:
        self.env = gym.make(env_id)
        self.unwrapped = self.env.unwrapped
        self.single_action_space = self.env.action_space
        self.autoreset = autoreset
        self._done = False

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self.env.reset(seed=seed)

    def step(self, actions: Any) -> tuple[Any, ...]:
        if self._done and self.autoreset:
            self.env.reset()
            self._done = False
            return (None, 0.0, np.zeros(1, bool), np.zeros(1, bool), {})
        _, r, te, tr, info = self.env.step(actions[0])
        self._done = bool(te or tr)
        return (None, r, np.array([te]), np.array([tr]), info)

    def close(self) -> None:
        self.env.close()


def measure(
    env_id: str, kind: str, n: int, steps: int, seed: int = 0, *, autoreset: bool = True
) -> float:
    """Environment-steps per second of ``kind`` (single, sync, vector) with ``n`` environments;
    with ``autoreset=False`` the ended environments are reset outside the timed calls."""
    mode = AutoresetMode.NEXT_STEP if autoreset else AutoresetMode.DISABLED
    if kind == "single":
        vec: Any = _Single(env_id, autoreset)
    elif kind == "sync":
        kwargs = {"autoreset_mode": mode}
        vec = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync", vector_kwargs=kwargs)
    else:
        # (a custom vector environment takes its options as keyword arguments)
        extra = {} if autoreset else {"autoreset_mode": mode}
        vec = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **extra)
    vec.reset(seed=seed)
    rng = np.random.default_rng(seed)
    spent = 0.0
    for t in range(steps + 10):
        masks = _masks(vec, n)
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        t0 = time.perf_counter()
        _, _, term, trunc, _ = vec.step(acts)
        if t >= 10:  # the first steps warm the caches of pure functions
            spent += time.perf_counter() - t0
        done = np.asarray(term) | np.asarray(trunc)
        if not autoreset and done.any():
            vec.reset(options={"reset_mask": done})
    vec.close()
    return steps * n / spent


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    ap = Parser(__doc__)
    ap.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS))
    ap.add_argument("--num-envs", nargs="+", type=int, default=[1, 16, 64], help="each >= 1")
    ap.add_argument("--steps", type=int, default=150, help="vector steps per row (>= 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    bad = [n for n in args.num_envs if n < 1]
    if bad:
        ap.error(f"--num-envs {bad[0]}: must be >= 1")
    if args.steps < 1:
        ap.error(f"--steps {args.steps}: must be >= 1")
    unknown = [i for i in args.ids if i not in gym.registry]
    if unknown:
        ap.error(f"--ids: unknown environment ID {unknown[0]!r}")
    no_vector = [i for i in args.ids if gym.spec(i).vector_entry_point is None]
    if no_vector:
        ap.error(f"--ids: {no_vector[0]} has no vector entry point (candidate-mode IDs have)")
    print(
        f"crop_gym {crop_gym.__version__}, gymnasium {gym.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}"
    )
    rows: list[dict[str, Any]] = []

    def row(env_id: str, kind: str, n: int, steps: int, step_only: bool) -> None:
        rate = measure(env_id, kind, n, steps)
        alone = measure(env_id, kind, n, steps, autoreset=False) if step_only else None
        rows.append(
            {"id": env_id, "kind": kind, "num_envs": n, "rate": rate, "rate_step_only": alone}
        )

    row(CARTPOLE, "single", 1, 20 * args.steps, True)
    for n in args.num_envs:
        for kind in ("sync", "vector"):
            row(CARTPOLE, kind, n, 20 * args.steps, False)
    for env_id in args.ids:
        big = "512" in env_id or "1024" in env_id
        steps = max(args.steps // 3, 10) if big else args.steps
        row(env_id, "single", 1, steps * 4, True)
        for n in args.num_envs:
            for kind in ("sync", "vector"):
                row(env_id, kind, n, max(steps * 4 // n, 10), True)
    cart, cart_alone = rows[0]["rate"], rows[0]["rate_step_only"]
    sync = {(r["id"], r["num_envs"]): r for r in rows if r["kind"] == "sync"}
    for r in rows:
        alone = r["rate_step_only"]
        r["x_cartpole"] = r["rate"] / cart
        r["x_cartpole_step_only"] = alone / cart_alone if alone is not None else None
        ref = sync[(r["id"], r["num_envs"])] if r["kind"] == "vector" else None
        r["x_sync"] = r["rate"] / ref["rate"] if ref is not None else None
        r["x_sync_step_only"] = (
            alone / ref["rate_step_only"] if ref is not None and alone is not None else None
        )
    print()
    print(
        f"{'':45s} {'with resets':^32s}   {'step only':^32s}\n"
        f"{'env':30s} {'kind':7s} {'N':>4s}  "
        f"{'env-steps/s':>12s} {'x CartPole':>11s} {'x sync':>7s}   "
        f"{'env-steps/s':>12s} {'x CartPole':>11s} {'x sync':>7s}"
    )
    print("-" * 113)

    def cell(value: float | None, fmt: str, width: int) -> str:
        return format(value, fmt) if value is not None else " " * (width - 1) + "-"

    for r in rows:
        print(
            f"{r['id']:30s} {r['kind']:7s} {r['num_envs']:4d}  "
            f"{r['rate']:12,.0f} {r['x_cartpole']:11.4f} {cell(r['x_sync'], '7.2f', 7)}   "
            f"{cell(r['rate_step_only'], '12,.0f', 12)} "
            f"{cell(r['x_cartpole_step_only'], '11.4f', 11)} "
            f"{cell(r['x_sync_step_only'], '7.2f', 7)}"
        )
    print(
        "(x CartPole: / single CartPole-v1 of this run, measured the same way; step only: "
        "resets outside the timed steps)"
    )
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
