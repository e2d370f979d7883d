"""CROP as an expert in the candidate action space of :class:`crop_gym.envs.placement.PlacementEnv`.

:class:`CropExpert` answers "what would CROP do now?" with an action index, so demonstrations can be
recorded for behaviour cloning or DAgger. It runs CROP (:func:`crop_gym.baselines.crop.crop_greedy`) on the
environment's current state and remaining queue and maps CROP's first placement to the action that
places that job on those GPUs; when CROP would place nothing it answers *stop*.

CROP regenerates candidates from the state after every acceptance, exactly like the environment
does, so each of its placements is one of the environment's candidate rows (a job identical to
CROP's — same model, size, batch and weight — may stand in for it: it changes F the same way). The expert therefore
plans once (the whole greedy run) and replays the plan while the environment follows it; if the
environment's history departs from the plan (the agent took another action, or a different episode
started), it re-plans from the current state. Following the expert from reset thus reproduces
CROP's run on the instance: same placements, same order, and a return equal to the F gain CROP
reports.

If CROP's next job is not in the environment's view (a queue longer than ``queue_view``, where the
view holds the first placeable jobs only), the expert falls back to CROP's decision among the jobs
of the view, which is always expressible.

Example:
    >>> import gymnasium as gym, crop_gym
    >>> from crop_gym.baselines.expert import CropExpert
    >>> env = gym.make("crop_gym/Placement-Testbed8-v0")
    >>> expert = CropExpert(env)
    >>> obs, info = env.reset(seed=0)
    >>> done, ret = False, 0.0
    >>> while not done:
    ...     obs, r, term, trunc, info = env.step(expert.action())
    ...     ret += r
    ...     done = term or trunc
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from crop_gym.baselines.crop import crop_greedy
from crop_gym.envs.actions import job_key
from crop_gym.envs.placement import PlacementEnv
from crop_gym.policy import Placement

__all__ = ["CropExpert", "Transition", "expert_rollouts"]


class CropExpert:
    """CROP's action for the current state of a candidate-mode placement environment.

    Args:
        env: A :class:`PlacementEnv`, possibly wrapped (e.g. by ``gym.make``).
        robust: CROP's robustness switch (``False``: the "without robustness" ablation). Defaults to
            the environment's ``robust_candidates``, so CROP sees the same candidate lists.
        lazy: Lazy (Minoux) or plain greedy; both give the same placements.
        min_gain: Smallest ΔF CROP accepts (GPU units).
        rule: CROP's ranking (``"best"`` of the ΔF and ΔF-per-GPU passes, the default; or one pass,
            ``"gain"`` / ``"density"``, whose next action depends on the current state alone).

    Attributes:
        fallbacks: How many times CROP's next job was outside the view and the expert answered with
            CROP's decision among the view's jobs instead.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        *,
        robust: bool | None = None,
        lazy: bool = True,
        min_gain: float = 1e-9,
        rule: str = "best",
    ) -> None:
        base = env.unwrapped
        if not isinstance(base, PlacementEnv):
            raise TypeError(
                f"CropExpert needs a PlacementEnv (candidate mode), got {type(base).__name__}"
            )
        self.env: PlacementEnv = base
        self.robust = base.robust_candidates if robust is None else bool(robust)
        self.lazy = lazy
        self.min_gain = min_gain
        self.rule = rule
        self.fallbacks = 0
        self._plan: list[Placement] = []
        self._plan_keys: list[tuple[str, int, float, float]] = []
        self._plan_state: object | None = None
        self._plan_start = 0

    def _crop(self, jobs: Any, max_rounds: int | None) -> list[Placement]:
        env = self.env
        return crop_greedy(
            env.state,
            jobs,
            robust=self.robust,
            lazy=self.lazy,
            max_candidates=env.max_candidates,
            min_gain=self.min_gain,
            max_rounds=max_rounds,
            rule=self.rule,
        ).placements

    def _next_from_plan(self) -> Placement | None:
        """The plan's next placement if the environment has followed the plan so far, else re-plan."""
        env = self.env
        done = env.placed[self._plan_start :]
        keys = self._plan_keys
        on_plan = (
            self._plan_state == (id(env.state), env.episode_id)
            and len(done) <= len(self._plan)
            and all(
                self._key_of(jid) == keys[i] and np.array_equal(g, self._plan[i].gpus)
                for i, (jid, g) in enumerate(done)
            )
        )
        if not on_plan:
            self._plan = self._crop(env.pending, None)
            self._plan_keys = [job_key(p.job) for p in self._plan]
            self._plan_state = (id(env.state), env.episode_id)
            self._plan_start = len(env.placed)
            done = []
        i = len(done)
        return self._plan[i] if i < len(self._plan) else None

    def _key_of(self, job_id: str) -> tuple[str, int, float, float] | None:
        inst = self.env.instance
        for job in inst.queue:
            if job.job_id == job_id:
                return job_key(job)
        return None

    def placement(self) -> Placement | None:
        """CROP's next placement in the current state (``None``: CROP would stop)."""
        return self._next_from_plan()

    def action(self) -> int:
        """CROP's action in the environment's current state (its stop action if CROP stops)."""
        env = self.env
        table = env.table
        nxt = self._next_from_plan()
        if nxt is None:
            return table.stop_action
        a = env.action_for(nxt.job_id, nxt.gpus, nxt.job)
        if a is not None:
            return a
        # CROP's job is outside the view: its best decision among the jobs the agent can place.
        self.fallbacks += 1
        self._plan_state = None  # the environment will leave the plan
        restricted = self._crop(table.jobs, 1)
        if not restricted:
            return table.stop_action
        a = env.action_for(restricted[0].job_id, restricted[0].gpus, restricted[0].job)
        return table.stop_action if a is None else a

    def __call__(self, obs: Any = None) -> int:
        """Same as :meth:`action` (the observation is not needed: the expert reads the state)."""
        return self.action()


@dataclass(frozen=True)
class Transition:
    """One expert step.

    Attributes:
        obs: Observation before the action.
        action: The expert's action.
        reward: Reward received.
        terminated: Whether the episode terminated.
        truncated: Whether it was truncated.
        action_mask: The valid actions before the action.
    """

    obs: dict[str, NDArray[np.float32]]
    action: int
    reward: float
    terminated: bool
    truncated: bool
    action_mask: NDArray[np.bool_]


def expert_rollouts(
    env: gym.Env[Any, Any], episodes: int, *, seed: int | None = None, **expert_kwargs: Any
) -> Iterator[Transition]:
    """Yield CROP's demonstration transitions for ``episodes`` episodes.

    Args:
        env: A candidate-mode placement environment (possibly wrapped).
        episodes: Number of episodes.
        seed: Seed of the first reset (later resets continue the environment's RNG).
        **expert_kwargs: Passed to :class:`CropExpert`.
    """
    expert = CropExpert(env, **expert_kwargs)
    for ep in range(episodes):
        obs, info = env.reset(seed=seed if ep == 0 else None)
        done = False
        while not done:
            a = expert.action()
            mask = np.asarray(info["action_mask"])
            nobs, r, term, trunc, info = env.step(a)
            yield Transition(obs, a, float(r), bool(term), bool(trunc), mask)
            obs, done = nobs, bool(term or trunc)
