"""Transitional alias of :mod:`crop_gym.model.state` (removed at the end of the core rebuild)."""

from crop_gym.model.objective import ClusterMetrics
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import ideal_time

__all__ = ["ClusterMetrics", "ClusterState", "ideal_time"]
