"""Transitional alias of :mod:`crop_gym.model.timing` (removed at the end of the core rebuild)."""

from crop_gym.model.timing import (
    ALLREDUCE_ALGORITHMS,
    PerfConfig,
    PlacementFacts,
    comm_time,
    iteration_time,
    placement_facts,
)

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "PerfConfig",
    "PlacementFacts",
    "comm_time",
    "iteration_time",
    "placement_facts",
]
