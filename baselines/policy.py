"""The placement-policy interface shared by CROP, the heuristics, the exact solver and the simulator.

A policy looks at a :class:`~crop_gym.model.state.ClusterState` and a queue of pending jobs and returns
:class:`Placement` s, in the order in which it accepted them. The contract every policy keeps:

* the given state is never mutated (policies work on ``state.copy()``);
* each job is placed all-or-nothing, on exactly ``job.num_gpus`` distinct GPUs;
* only GPUs that are free and usable (not failed) in the given state are used, and no GPU twice;
* jobs that are not placed are simply absent from the result (they wait).

:func:`apply` places a policy's answer on a state; :data:`POLICIES` / :func:`make_policy` build the
registered policies by name.

Example:
    >>> import numpy as np
    >>> from crop_gym.scenario import ScenarioSampler
    >>> inst = ScenarioSampler("testbed-8").sample(np.random.default_rng(0))
    >>> policy = make_policy("crop")
    >>> placements = policy.place(inst.state, inst.queue)
    >>> state = inst.state.copy()
    >>> gain = apply(state, placements)
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState

__all__ = [
    "POLICIES",
    "Placement",
    "PlacementPolicy",
    "PolicyInfo",
    "apply",
    "check_placements",
    "make_policy",
    "pending_jobs",
]


@dataclass(frozen=True, eq=False)
class Placement:
    """One accepted placement: a job and its GPUs.

    Attributes:
        job: The job.
        gpus: Sorted, read-only ``int32`` GPU indices (the DFS ring order), ``len == job.num_gpus``.
    """

    job: Job
    gpus: NDArray[np.int32]

    def __post_init__(self) -> None:
        g = np.sort(np.asarray(self.gpus, dtype=np.int32))
        g.setflags(write=False)
        object.__setattr__(self, "gpus", g)

    @property
    def job_id(self) -> str:
        """The job's id."""
        return self.job.job_id

    def key(self) -> tuple[str, tuple[int, ...]]:
        """A hashable identity: ``(job_id, gpu tuple)``."""
        return self.job.job_id, tuple(int(g) for g in self.gpus)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Placement({self.job.job_id!r}, gpus={self.gpus.tolist()})"


class PlacementPolicy(ABC):
    """Base class of every placement policy.

    Subclasses set :attr:`name` and implement :meth:`place`. Policies are cheap, reusable objects;
    any randomness comes from the ``rng`` argument or a seed given at construction, never from the
    global RNG.

    Attributes:
        name: Registry name of the policy (e.g. ``"crop"``).
    """

    name: str = "policy"

    @abstractmethod
    def place(
        self,
        state: ClusterState,
        queue: Sequence[Job],
        rng: np.random.Generator | None = None,
    ) -> list[Placement]:
        """Decide where to place pending jobs.

        Args:
            state: The cluster (never mutated).
            queue: Pending jobs in queue order; ids must be distinct and not placed in ``state``.
            rng: Random generator for randomised policies (deterministic policies ignore it).

        Returns:
            Placements in acceptance order (jobs left out wait).

        Raises:
            ConfigError: If the queue repeats a job id or holds a job that is already placed.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def pending_jobs(state: ClusterState, queue: Iterable[Job]) -> list[Job]:
    """Validate a queue against a state and return it as a list.

    Raises:
        ConfigError: If a job id repeats or a job is already placed in ``state``.
    """
    jobs = list(queue)
    seen: set[str] = set()
    for job in jobs:
        if job.job_id in seen:
            raise ConfigError(f"job id {job.job_id!r} appears twice in the queue")
        if job.job_id in state.jobs:
            raise ConfigError(f"job {job.job_id!r} is already placed in the cluster state")
        seen.add(job.job_id)
    return jobs


def check_placements(
    state: ClusterState, placements: Sequence[Placement], queue: Sequence[Job] | None = None
) -> None:
    """Check a policy's answer against the contract (without changing ``state``).

    Args:
        state: The state the policy was given.
        placements: Its answer.
        queue: The queue it was given (if set, every placed job must come from it).

    Raises:
        ConfigError: If a job is placed twice or is not in the queue, a placement has the wrong
            number of GPUs or repeats one, or a GPU is busy, failed or used twice.
    """
    free = state.free_mask.copy()
    ids = {j.job_id for j in queue} if queue is not None else None
    placed: set[str] = set()
    for p in placements:
        jid = p.job.job_id
        if jid in placed:
            raise ConfigError(f"job {jid!r} is placed twice")
        if ids is not None and jid not in ids:
            raise ConfigError(f"job {jid!r} is not in the queue")
        g = p.gpus
        if len(g) != p.job.num_gpus or len(np.unique(g)) != len(g):
            raise ConfigError(f"job {jid!r} needs {p.job.num_gpus} distinct GPUs, got {g.tolist()}")
        if len(g) and (g[0] < 0 or g[-1] >= len(free)):
            raise ConfigError(f"job {jid!r}: GPU index out of range in {g.tolist()}")
        if not free[g].all():
            raise ConfigError(
                f"job {jid!r}: GPUs {g[~free[g]].tolist()} are busy, failed or taken twice"
            )
        free[g] = False
        placed.add(jid)


def apply(state: ClusterState, placements: Iterable[Placement]) -> float:
    """Place ``placements`` on ``state`` (in order) and return the total change of F.

    Raises:
        ConfigError: If a placement is invalid on ``state`` (busy or failed GPU, wrong size, ...).
    """
    total = 0.0
    for p in placements:
        total += state.add(p.job, p.gpus)
    return total


@dataclass(frozen=True)
class PolicyInfo:
    """A registered policy.

    Attributes:
        name: Registry name.
        target: ``"module:Class"`` of the implementation (imported on first use).
        description: One line for tables and ``--help``.
        kwargs: Default constructor arguments.
    """

    name: str
    target: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def factory(self) -> Callable[..., PlacementPolicy]:
        """The policy class."""
        module, cls = self.target.split(":")
        factory: Callable[..., PlacementPolicy] = getattr(importlib.import_module(module), cls)
        return factory


def _info(name: str, target: str, description: str, **kwargs: Any) -> tuple[str, PolicyInfo]:
    return name, PolicyInfo(name, target, description, kwargs)


#: Registered policies, by name, in the order tables list them.
POLICIES: dict[str, PolicyInfo] = dict(
    [
        _info(
            "crop",
            "crop_gym.baselines.crop:CropPolicy",
            "CROP: lazy submodular greedy on the true ΔF, health-aware",
        ),
        _info(
            "crop-plain",
            "crop_gym.baselines.crop:CropPolicy",
            "CROP with plain greedy (all gains recomputed each round)",
            lazy=False,
        ),
        _info(
            "crop-nonrobust",
            "crop_gym.baselines.crop:CropPolicy",
            "CROP ablation: device health ignored when choosing",
            robust=False,
        ),
        _info(
            "random",
            "crop_gym.baselines.heuristics:RandomPolicy",
            "FIFO, k free GPUs drawn uniformly at random",
        ),
        _info(
            "first-fit",
            "crop_gym.baselines.heuristics:FirstFitPolicy",
            "FIFO, the k lowest-numbered free GPUs",
        ),
        _info(
            "best-fit",
            "crop_gym.baselines.heuristics:BestFitPolicy",
            "FIFO, consolidate on the fewest servers, tightest fit (Tiresias-style)",
        ),
        _info(
            "spread",
            "crop_gym.baselines.heuristics:SpreadPolicy",
            "FIFO, one GPU at a time on the least-loaded server (load balancing)",
        ),
        _info(
            "hived",
            "crop_gym.baselines.heuristics:HivedPolicy",
            "FIFO, buddy cells: aligned power-of-two cells, whole servers (HiveD-style)",
        ),
        _info(
            "comm-greedy",
            "crop_gym.baselines.heuristics:CommGreedyPolicy",
            "FIFO, the candidate with the least all-reduce time, health ignored",
        ),
    ]
)


def make_policy(name: str, **kwargs: Any) -> PlacementPolicy:
    """Build a registered policy.

    Args:
        name: A key of :data:`POLICIES`.
        **kwargs: Constructor arguments overriding the registered defaults (e.g. ``seed=3`` for
            ``random``, ``max_candidates=16`` for ``crop``).

    Raises:
        ConfigError: For an unknown name (the message lists the policies) or a bad argument.
    """
    try:
        info = POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}") from None
    try:
        policy = info.factory()(**{**info.kwargs, **kwargs})
    except TypeError as exc:
        raise ConfigError(f"policy {name!r}: {exc}") from None
    policy.name = name
    return policy
