"""The policies this package provides to :mod:`crop_gym.policy`'s registry: CROP and every baseline.

``pyproject.toml`` declares :func:`policy_specs` in the entry-point group ``crop_gym.policies``, so
``crop_gym.policy.make_policy("crop")`` finds them without the core naming this package.
"""

from __future__ import annotations

from typing import Any

from crop_gym.baselines.crop import CropPolicy
from crop_gym.baselines.heuristics import (
    BestFitPolicy,
    CommGreedyPolicy,
    FirstFitPolicy,
    HivedPolicy,
    RandomPolicy,
    SpreadPolicy,
)
from crop_gym.policy import PlacementPolicy, PolicySpec

__all__ = ["POLICIES", "policy_specs"]


class _Factory:
    """Builds ``cls(**defaults, **kwargs)`` and names it ``name`` (one registered policy)."""

    def __init__(self, name: str, cls: type[PlacementPolicy], defaults: dict[str, Any]) -> None:
        self.name, self.cls, self.defaults = name, cls, defaults

    def __call__(self, **kwargs: Any) -> PlacementPolicy:
        policy = self.cls(**{**self.defaults, **kwargs})
        policy.name = self.name
        return policy

    def __repr__(self) -> str:
        return f"{self.cls.__name__}(**{self.defaults!r})"


def _spec(name: str, cls: type[PlacementPolicy], description: str, **defaults: Any) -> PolicySpec:
    return PolicySpec(name, _Factory(name, cls, defaults), description)


#: The provided policies, in the order tables list them.
POLICIES: tuple[PolicySpec, ...] = (
    _spec("crop", CropPolicy, "CROP: lazy submodular greedy on the true ΔF, health-aware"),
    _spec(
        "crop-plain",
        CropPolicy,
        "CROP with plain greedy (all gains recomputed each round)",
        lazy=False,
    ),
    _spec(
        "crop-nonrobust",
        CropPolicy,
        "CROP ablation: device health ignored when choosing",
        robust=False,
    ),
    _spec("random", RandomPolicy, "FIFO, k free GPUs drawn uniformly at random"),
    _spec("first-fit", FirstFitPolicy, "FIFO, the k lowest-numbered free GPUs"),
    _spec(
        "best-fit",
        BestFitPolicy,
        "FIFO, consolidate on the fewest servers, tightest fit (Tiresias-style)",
    ),
    _spec(
        "spread",
        SpreadPolicy,
        "FIFO, one GPU at a time on the least-loaded server (load balancing)",
    ),
    _spec(
        "hived",
        HivedPolicy,
        "FIFO, buddy cells: aligned power-of-two cells, whole servers (HiveD-style)",
    ),
    _spec(
        "comm-greedy",
        CommGreedyPolicy,
        "FIFO, the candidate with the least all-reduce time, health ignored",
    ),
)


def policy_specs() -> tuple[PolicySpec, ...]:
    """The entry point: every policy of :data:`POLICIES`."""
    return POLICIES
