"""The records of the cluster state: the placed jobs as one named array, a placed job's outputs,
and the marginal gains of candidate placements (:mod:`crop_gym.model.state` holds and updates
them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.facts import FACT_COLUMNS, PlacementFacts
from crop_gym.model.timing import JOB_COLUMNS

__all__ = [
    "CONST",
    "FACTS",
    "OUTPUTS",
    "OUTPUT_COLUMNS",
    "VALUE",
    "WEIGHT",
    "Gains",
    "JobRecord",
    "PlacedJobs",
]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class JobRecord:
    """Model outputs of one placed job.

    Attributes:
        T: Iteration time (s).
        C: All-reduce time (s).
        eta: Normalised throughput ``min(1, T*/T)``.
        survival: Probability that none of its GPUs and spanned links fails.
        value: ``w·k·s·η``.
        T_star: Ideal time (s).
    """

    T: float
    C: float
    eta: float
    survival: float
    value: float
    T_star: float


@dataclass(frozen=True)
class Gains:
    """ΔF of placing one job on each of ``R`` candidate placements (the state is not changed).

    Attributes:
        own: ``float64[R]`` the new job's own value ``w·k·s·η`` (its rings added to the loads).
        interference: ``float64[R]`` the change of the placed jobs' values (≤ 0: sharing a link
            only slows them); ``None`` if not evaluated (:meth:`~crop_gym.model.state.ClusterState.row_gains`).
        eta: ``float64[R]`` the new job's η.
        comm: ``float64[R]`` the new job's all-reduce time ``C`` (s).
        b_inter: ``float64[R]`` its bottleneck inter-server share (``inf`` on one server).
    """

    own: FloatArray
    interference: FloatArray | None
    eta: FloatArray
    comm: FloatArray
    b_inter: FloatArray

    @property
    def total(self) -> FloatArray:
        """``own + interference``: the change of F (the interference must have been evaluated)."""
        if self.interference is None:
            raise ValueError("these gains were evaluated without the interference")
        out: FloatArray = self.own + self.interference
        return out


#: The model outputs, the last columns of :attr:`PlacedJobs.data`.
OUTPUT_COLUMNS: tuple[str, ...] = ("T", "C", "eta", "value")
_NF = len(FACT_COLUMNS)
_OUT = _NF + len(JOB_COLUMNS)  # first output column
#: Column blocks of :attr:`PlacedJobs.data`: the placement facts, the job constants, the outputs;
#: and the single columns of the weight ``w`` and of the value.
FACTS, CONST, OUTPUTS = slice(0, _NF), slice(_NF, _OUT), slice(_OUT, None)
WEIGHT, VALUE = _NF + 3, _OUT + 3


@dataclass
class PlacedJobs:
    """The placed jobs as one named array per slot (``active`` marks the used rows).

    Attributes:
        active: ``bool[S]``.
        data: ``float64[S, 17]``: placement facts (:data:`FACT_COLUMNS`), the job's constants
            (:data:`JOB_COLUMNS`: ``M``, ``t_c``, ``T*``, ``w``, κ) and current outputs
            (:data:`OUTPUT_COLUMNS`: ``T``, ``C``, ``η``, value); free rows are stale but value 0.
        links: ``int32[S, W]`` each slot's inter-server links, root-padded (all padding when free).
    """

    active: NDArray[np.bool_]
    data: FloatArray
    links: NDArray[np.int32]

    @classmethod
    def empty(cls, slots: int, width: int) -> PlacedJobs:
        """A table of ``slots`` free rows whose link rows hold ``width`` links."""
        data = np.zeros((slots, _OUT + len(OUTPUT_COLUMNS)))
        return cls(np.zeros(slots, dtype=bool), data, np.zeros((slots, width), dtype=np.int32))

    @property
    def slots(self) -> int:
        return len(self.active)

    T = property(lambda self: self.data[:, _OUT], doc="``float64[S]`` iteration times.")
    C = property(lambda self: self.data[:, _OUT + 1], doc="``float64[S]`` all-reduce times.")
    eta = property(lambda self: self.data[:, _OUT + 2], doc="``float64[S]`` η.")
    value = property(lambda self: self.data[:, _OUT + 3], doc="``float64[S]`` values.")
    k = property(lambda self: self.data[:, 0], doc="``float64[S]`` GPUs.")
    survival = property(lambda self: self.data[:, 7], doc="``float64[S]`` survival.")
    tstar = property(lambda self: self.data[:, _NF + 2], doc="``float64[S]`` ideal times.")

    def resized(self, slots: int, width: int) -> PlacedJobs:
        """A copy with ``slots`` rows and ``width`` link columns (new rows free)."""
        new = PlacedJobs.empty(slots, width)
        n, w = self.links.shape
        new.active[:n] = self.active
        new.data[:n] = self.data
        new.links[:n, :w] = self.links
        return new

    def copy(self) -> PlacedJobs:
        """An independent copy."""
        return PlacedJobs(self.active.copy(), self.data.copy(), self.links.copy())

    def write(self, slots: NDArray[np.intp], facts: PlacementFacts, const: FloatArray) -> None:
        """Store jobs placed with the rows of ``facts`` in ``slots`` (the link rows must be wide
        enough); ``const`` holds their rows of :func:`~crop_gym.model.timing.job_constants`.
        Their outputs are computed by the caller."""
        self.data[slots, :_NF] = facts.values
        self.data[slots, _NF:_OUT] = const
        self.data[slots, _OUT + 3] = 0.0
        self.links[slots] = 0
        self.links[slots, : facts.inter_links.shape[1]] = facts.inter_links
