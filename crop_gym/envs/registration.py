"""Registration of the ``crop_gym/`` environment IDs with Gymnasium (run on ``import crop_gym``).

Entry points are strings, so registering imports no environment module: ``import crop_gym`` stays
cheap and ``gym.make`` imports the class on first use. Every ID accepts the constructor's keyword
arguments, e.g. ``gym.make("crop_gym/Placement-v0", scenario="default-severe", privileged=True)``.

To add an ID, append an :class:`EnvSpec`-like entry to :data:`ENV_IDS` (one line of description
each: docs/ENVS.md and the README list them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_IDS", "EPISODE_CAPS", "is_online_id", "register_envs", "with_split"]

NAMESPACE = "crop_gym"

_STATIC = "crop_gym.envs.placement:PlacementEnv"
_GPU = "crop_gym.envs.gpu_placement:GPUPlacementEnv"
_ONLINE = "crop_gym.envs.online:OnlinePlacementEnv"
#: The batched environment of every candidate-mode ID (``gymnasium.make_vec``).
_STATIC_VECTOR = "crop_gym.envs.vector:PlacementVectorEnv"

#: The train/eval split of the v2 online IDs: windows of the training traces' first 70 % (by
#: submission time) with ``split="train"``; their last 30 % and the whole held-out trace with
#: ``split="eval"`` (:class:`crop_gym.envs.online_common.TraceSplit`).
_ONLINE_SPLIT: dict[str, Any] = {
    "trace": ("elasticflow:cluster04", "elasticflow:cluster03"),
    "held_out_traces": ("elasticflow:cluster06",),
    "split": "train",
    "train_fraction": 0.7,
}

#: ID → (entry point, default kwargs, one-line description).
ENV_IDS: dict[str, tuple[str, dict[str, Any], str]] = {
    f"{NAMESPACE}/Placement-v0": (
        _STATIC,
        {"scenario": "default"},
        "64-GPU leaf-spine (8x8, 2 ToRs), mild abnormalities, 30% background, 16 jobs from ElasticFlow cluster04 (scarce GPUs); candidate actions",
    ),
    f"{NAMESPACE}/Placement-Testbed8-v0": (
        _STATIC,
        {"scenario": "testbed-8"},
        "the CROP paper's 8-GPU testbed (2x4, one slow GPU), 4 jobs; candidate actions",
    ),
    f"{NAMESPACE}/Placement-Healthy-v0": (
        _STATIC,
        {"scenario": "default-none"},
        "Placement-v0 without abnormal devices",
    ),
    f"{NAMESPACE}/Placement-Severe-v0": (
        _STATIC,
        {"scenario": "default-severe"},
        "Placement-v0 with severe abnormalities (slow, failed, failure-prone GPUs and links)",
    ),
    f"{NAMESPACE}/Placement-Pollux64-v0": (
        _STATIC,
        {"scenario": "pollux-16x4"},
        "Pollux-like 16x4 GPUs under one switch, 16 jobs; candidate actions",
    ),
    f"{NAMESPACE}/Placement-512-v0": (
        _STATIC,
        {"scenario": "n64g8"},
        "ElasticFlow n64g8 (512 GPUs, 2 switches), 64 jobs, view of 64; candidate actions",
    ),
    f"{NAMESPACE}/Placement-1024-v0": (
        _STATIC,
        {"scenario": "n128g8"},
        "ElasticFlow n128g8 (1,024 GPUs), 200 jobs, view of 64 job classes; candidate actions",
    ),
    f"{NAMESPACE}/Placement-RTX-v0": (
        _STATIC,
        {"scenario": "default", "hardware": "rtx-2080ti"},
        "Placement-v0 on the fitted RTX 2080 Ti profile (commodity PCIe nodes and network: communication is ~21% of time under CROP vs 8% on the default A100s, and random placement reaches 0.84 × CROP)",
    ),
    f"{NAMESPACE}/Placement-Mixed-v0": (
        _STATIC,
        {"scenario": "default", "hardware": "dgx-a100+rtx-2080ti"},
        "Placement-v0 on a heterogeneous cluster: DGX-A100 servers and RTX 2080 Ti servers in one tree (the slowest GPU sets a job's pace)",
    ),
    f"{NAMESPACE}/Placement-Fragmented-v0": (
        _STATIC,
        {"scenario": "fragmented"},
        "Large jobs on a fragmented cluster: half the 64 GPUs held by scattered 1-2-GPU background jobs, 8 queued jobs of 16-32 GPUs (one or two fit: which, and where, decides F)",
    ),
    f"{NAMESPACE}/PlacementGPU-v0": (
        _GPU,
        {"scenario": "default"},
        "Placement-v0 in GPU mode: pick the head job's GPUs one at a time, or defer it",
    ),
    f"{NAMESPACE}/PlacementGPU-Testbed8-v0": (
        _GPU,
        {"scenario": "testbed-8"},
        "the 8-GPU testbed in GPU mode (small enough to teach with)",
    ),
    f"{NAMESPACE}/OnlinePlacement-v0": (
        _ONLINE,
        {
            "trace": "elasticflow:cluster10",
            "window_jobs": 32,
            "horizon_hours": 24.0,
            "onset_rate_per_gpu_hour": None,
            "mean_abnormal_duration_s": None,
            "group_identical": True,
            "observe_queue": False,
            "reward": "effective",
        },
        "online: 32-job windows of ElasticFlow cluster10 (10x arrival rate) on leafspine-64, mild abnormalities; stop advances time",
    ),
    f"{NAMESPACE}/OnlinePlacement-v1": (
        _ONLINE,
        {},
        "online v1: 48-job windows of ElasticFlow cluster04 (10x arrival rate, queues form) on leafspine-64, changing health; pick the job, its GPUs, or wait",
    ),
    f"{NAMESPACE}/OnlinePlacement-Bursty-v1": (
        _ONLINE,
        {"arrival_scale": 0.25, "burst_s": 1800.0},
        "OnlinePlacement-v1 with arrivals in bursts (4x arrival rate, batched every 30 simulated minutes)",
    ),
    f"{NAMESPACE}/OnlinePlacement-v2": (
        _ONLINE,
        dict(_ONLINE_SPLIT),
        "online v2: OnlinePlacement-v1 with honest splits: split='train' (default) draws windows from the first 70% (by submission time) of ElasticFlow cluster04 and cluster03, split='eval' from their last 30% and from held-out cluster06",
    ),
    f"{NAMESPACE}/OnlinePlacement-Bursty-v2": (
        _ONLINE,
        {**_ONLINE_SPLIT, "arrival_scale": 0.25, "burst_s": 1800.0},
        "OnlinePlacement-v2 with arrivals in bursts (4x arrival rate, batched every 30 simulated minutes)",
    ),
}


#: ID → its ``spec.max_episode_steps``: the environment's own step cap in the ID's configuration
#: (``max_steps``: ``2 K`` in candidate mode, ``2 K (max job GPUs + 1)`` in GPU mode, ``20 x
#: window_jobs`` online), so that wrappers, SB3 and rl-zoo3 see it. The environment truncates
#: itself at that step, so Gymnasium's TimeLimit never changes an episode of the ID as registered
#: (tests/test_episode_caps.py checks both). Arguments that raise the environment's own cap (a larger
#: ``scenario``, ``max_steps``, ``window_jobs``) need ``gym.make(..., max_episode_steps=N)``, as
#: with any Gymnasium ID.
EPISODE_CAPS: dict[str, int] = {
    f"{NAMESPACE}/Placement-v0": 32,
    f"{NAMESPACE}/Placement-Testbed8-v0": 8,
    f"{NAMESPACE}/Placement-Healthy-v0": 32,
    f"{NAMESPACE}/Placement-Severe-v0": 32,
    f"{NAMESPACE}/Placement-Pollux64-v0": 32,
    f"{NAMESPACE}/Placement-512-v0": 128,
    f"{NAMESPACE}/Placement-1024-v0": 400,
    f"{NAMESPACE}/Placement-RTX-v0": 32,
    f"{NAMESPACE}/Placement-Mixed-v0": 32,
    f"{NAMESPACE}/Placement-Fragmented-v0": 16,
    f"{NAMESPACE}/PlacementGPU-v0": 1056,
    f"{NAMESPACE}/PlacementGPU-Testbed8-v0": 40,
    f"{NAMESPACE}/OnlinePlacement-v0": 640,
    f"{NAMESPACE}/OnlinePlacement-v1": 960,
    f"{NAMESPACE}/OnlinePlacement-Bursty-v1": 960,
    f"{NAMESPACE}/OnlinePlacement-v2": 960,
    f"{NAMESPACE}/OnlinePlacement-Bursty-v2": 960,
}


def register_envs() -> None:
    """Register every ID of :data:`ENV_IDS` that is not registered yet (idempotent)."""
    from gymnasium.envs.registration import register, registry

    for env_id, (entry_point, kwargs, _) in ENV_IDS.items():
        if env_id not in registry:
            register(
                id=env_id,
                entry_point=entry_point,
                vector_entry_point=_STATIC_VECTOR if entry_point == _STATIC else None,
                kwargs=dict(kwargs),
                max_episode_steps=EPISODE_CAPS[env_id],
                disable_env_checker=False,
            )


def is_online_id(env_id: str) -> bool:
    """Whether the registered ``env_id`` makes the online placement environment (nothing built).

    Raises:
        gymnasium.error.Error: For an unregistered ID (Gymnasium's own message).
    """
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    from crop_gym.envs.online import OnlinePlacementEnv

    entry = gym.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return isinstance(creator, type) and issubclass(creator, OnlinePlacementEnv)


def with_split(
    env_id: str, env_kwargs: Mapping[str, Any] | None, part: str | None
) -> dict[str, Any]:
    """``env_kwargs`` with ``split=part`` for an online ID (others, and ``part=None``, unchanged).

    Training plays the train part of the traces (``"train"``, validation included), evaluation
    and the held-out tables the eval part (``"eval"``):
    :class:`crop_gym.envs.online_common.TraceSplit`.
    """
    kwargs = dict(env_kwargs or {})
    if part is not None and is_online_id(env_id):
        kwargs["split"] = part
    return kwargs
