"""Teachers for imitation: whose action a demonstration records in an environment's state.

Static placement environments are taught by CROP (:class:`crop_gym.baselines.expert.CropExpert`, which
reproduces CROP's run action by action) or by ``crop-rollout``, CROP with one step of lookahead
(:class:`crop_gym.baselines.rollout_expert.CropRolloutExpert`: each of the best rows is tried and CROP
completes the episode from it), which beats CROP where CROP's greedy order is costly (1.04 × CROP
on ``Placement-Severe-v0``). The online environments (``OnlinePlacement*``) are
taught by a policy of :mod:`crop_gym.baselines.online` acting through the same action interface: ``crop``
(CROP's first placement on the view, wait when it places nothing) or ``sjf-crop`` (the placeable
job with the least remaining work first, on its row of the largest ΔF), whose mean JCT is far
below CROP's on the v1 tasks (docs/BENCHMARK.md), or ``srsf-crop-rollout``, one step of lookahead
on srsf-crop (:mod:`crop_gym.baselines.online_rollout`: clairvoyant about the window's arrivals and
health, never worse than srsf-crop on a window, and slow: tens of completions per decision). A policy cloned from a teacher is compared to
CROP and to its teacher (docs/AGENTS.md).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["teacher_of"]


def teacher_of(env: gym.Env[Any, Any], teacher: str = "crop", rule: str = "best") -> Any:
    """``() -> action`` of the teacher in ``env``'s current state.

    Static environments: CROP's expert (:class:`crop_gym.baselines.expert.CropExpert`, ``rule``) for
    ``"crop"``, or the lookahead on CROP for ``"crop-rollout"``; online
    environments (``OnlinePlacement*``): the :mod:`crop_gym.baselines.online` policy named ``teacher``.

    Raises:
        ValueError: For a teacher the environment has not.
    """
    u: Any = env.unwrapped
    if hasattr(u, "sim"):
        from crop_gym.baselines.online import make_online_policy

        try:
            policy = make_online_policy(teacher)
        except KeyError as e:
            raise ValueError(str(e).strip("'\"")) from None
        return lambda: policy(u)
    if teacher == "crop-rollout":
        from crop_gym.baselines.rollout_expert import CropRolloutExpert

        return CropRolloutExpert(env).action
    if teacher != "crop":
        raise ValueError(
            f"teacher={teacher!r}: static environments are taught by crop or crop-rollout"
        )
    from crop_gym.baselines.expert import CropExpert

    return CropExpert(env, rule=rule).action
