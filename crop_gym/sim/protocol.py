"""The placement-policy interface the simulator drives, as structural :class:`~typing.Protocol` types.

``crop_gym`` never imports ``baselines``: any object with a matching ``place`` method works, and the
CROP and baseline policies of ``crop_gym.baselines.policy`` satisfy these protocols structurally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState

__all__ = ["PlacementLike", "PlacementPolicy"]


@runtime_checkable
class PlacementLike(Protocol):
    """One decision: put ``job`` on ``gpus``."""

    @property
    def job(self) -> Job:
        """The queued job to place."""
        ...

    @property
    def gpus(self) -> NDArray[np.integer[Any]]:
        """Its GPUs (exactly ``job.num_gpus`` free, usable GPU indices)."""
        ...


@runtime_checkable
class PlacementPolicy(Protocol):
    """A policy: given the cluster and the queue, the placements to make now, in acceptance order.

    ``place`` must not mutate ``state``; the simulator applies the placements in order.
    """

    def place(
        self,
        state: ClusterState,
        queue: Sequence[Job],
        rng: np.random.Generator | None = None,
    ) -> Sequence[PlacementLike]:
        """Choose placements for some of ``queue`` (possibly none)."""
        ...
