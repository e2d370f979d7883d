"""The rewards of the placement environments, as named terms computed in one place.

Static environments (candidate and GPU mode) reward a placement with its change of the objective
``ΔF``, split into two terms that sum to it (:func:`placement_terms`):

* ``own_value``: the new job's value ``w·k·s·η`` (with its rings added to the link loads);
* ``interference``: the change of the placed jobs' values (``≤ 0``: sharing a link only slows them).

Stop, defer and invalid actions give both terms 0. The reward is :func:`total` of the terms, and the
environment reports the terms in ``info["reward_terms"]``.

The online environment's rewards are rates over the simulated interval a step advanced over: named
terms (:func:`online_terms`, in the style of HighwayEnv's ``_rewards``) weighed by the version's
weights (:data:`ONLINE_WEIGHTS` for v1, one term of :data:`REWARD_PRESETS` for v0); the reward
is :func:`weighted` of them.
"""

from __future__ import annotations

__all__ = [
    "HOUR",
    "NO_TERMS",
    "ONLINE_TERMS",
    "ONLINE_WEIGHTS",
    "REWARD_PRESETS",
    "online_terms",
    "placement_terms",
    "total",
    "weighted",
]

#: Seconds per hour (the online rewards' time unit).
HOUR = 3600.0

#: The terms of a step that places nothing.
NO_TERMS: dict[str, float] = {"own_value": 0.0, "interference": 0.0}


def placement_terms(own: float, delta: float) -> dict[str, float]:
    """The reward terms of a placement whose new job is worth ``own`` and that changed F by
    ``delta`` (what :meth:`~crop_gym.model.state.ClusterState.add` returns): the interference is
    the rest of the change."""
    return {"own_value": own, "interference": delta - own}


def total(terms: dict[str, float]) -> float:
    """The reward: the sum of the terms (for the static environments, ``ΔF``)."""
    return terms["own_value"] + terms["interference"]


#: The names of :func:`online_terms`.
ONLINE_TERMS: tuple[str, ...] = ("effective", "waiting", "in_system")

#: Default weights of :func:`online_terms` (``OnlinePlacement-v1``).
ONLINE_WEIGHTS: dict[str, float] = {"effective": 1.0, "waiting": 1.0}

#: One-term weights by name (the online environment's ``reward`` shorthand, ``OnlinePlacement-v0``'s
#: two reward modes): ``jct`` makes the undiscounted return minus the mean JCT in hours.
REWARD_PRESETS: dict[str, dict[str, float]] = {
    "effective": {"effective": 1.0},
    "jct": {"in_system": 1.0},
}


def online_terms(
    *, area: float, queued: float, in_system: float, num_gpus: int, window_jobs: int
) -> dict[str, float]:
    """The named reward terms of one online step (over the interval it advanced).

    * ``effective``: effective GPU-hours gained, ``∫ F dt`` per cluster GPU and hour (cluster-hours
      of fully effective use; ``>= 0``);
    * ``waiting``: minus the job-hours spent *queued*, per window job (``<= 0``; its sum over an
      episode is minus the mean queueing time in hours);
    * ``in_system``: minus the job-hours spent in the system (queued or running), per window job
      (``<= 0``; its sum over a finished episode is minus the mean JCT in hours, Little's law).

    Args:
        area: ``∫ F dt`` over the interval (GPU-seconds).
        queued: ``∫ queued jobs dt`` over the interval (job-seconds).
        in_system: ``∫ (queued + running) dt`` over the interval (job-seconds).
        num_gpus: GPUs of the cluster.
        window_jobs: Jobs of the episode.
    """
    return {
        "effective": area / (num_gpus * HOUR),
        "waiting": -queued / (HOUR * window_jobs),
        "in_system": -in_system / HOUR / window_jobs,
    }


def weighted(terms: dict[str, float], weights: dict[str, float]) -> float:
    """``Σ weights[name] · terms[name]`` (a term without a weight counts 0)."""
    return float(sum(weights.get(name, 0.0) * value for name, value in terms.items()))
