"""Placement policies: the one interface, its answer record, and the registry of policies by name.

A placement policy looks at a :class:`~crop_gym.model.state.ClusterState` and a queue of pending
jobs and returns :class:`Placement` s, in the order in which it accepted them. The contract every
policy keeps (the simulator, the comparisons and the tests rely on it):

* the given state is never mutated (policies work on ``state.copy()``);
* each job is placed all-or-nothing, on exactly ``job.num_gpus`` distinct GPUs;
* only GPUs that are free and usable (not failed) in the given state are used, and no GPU twice;
* jobs that are not placed are simply absent from the answer (they wait).

:meth:`ClusterState.check_placements <crop_gym.model.state.ClusterState.check_placements>` checks an
answer against the state; :func:`apply` places it; :func:`pending_jobs` validates a queue.

**The registry.** ``crop_gym`` defines the interface but ships no policy: the policies live in
packages above the core, which plug in through the package entry-point group
:data:`ENTRY_POINT_GROUP` (as networkx finds its backends). Each entry point loads to a callable
that takes no argument and returns the provider's :class:`PolicySpec` s; the installed providers are
loaded once, in the order of their entry-point names, the first time the registry is read. A
provider declares itself in its ``pyproject.toml``::

    [project.entry-points."crop_gym.policies"]
    my-policies = "my_package.registry:policy_specs"

A provider that cannot be loaded (its module, or one it needs, is missing or fails on import) is
left out and remembered: :func:`provider_errors` lists it, and looking up a name that is not
registered raises one line naming the provider and the cause. :func:`register_policy` adds a policy
at run time (user code, plug-ins, tests).

Example:
    >>> from crop_gym.policy import make_policy, policy_names
    >>> "crop" in policy_names()
    True
    >>> policy = make_policy("first-fit")
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState

__all__ = [
    "ENTRY_POINT_GROUP",
    "Placement",
    "PlacementPolicy",
    "PolicySpec",
    "apply",
    "make_policy",
    "pending_jobs",
    "policy_description",
    "policy_names",
    "provider_errors",
    "register_policy",
    "unregister_policy",
]

#: The entry-point group in which packages declare the policies they provide.
ENTRY_POINT_GROUP = "crop_gym.policies"


# ----------------------------------------------------------------------------- the interface
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


@runtime_checkable
class PlacementPolicy(Protocol):
    """A placement policy: given the cluster and the queue, the placements to make now.

    Structural: any object with a ``name`` and a matching ``place`` works (the simulator needs
    nothing else); policies may also subclass it. Policies are cheap, reusable objects; any
    randomness comes from the ``rng`` argument or a seed given at construction, never from the
    global RNG.

    Attributes:
        name: Registry name of the policy (e.g. ``"crop"``); results are labelled with it.
    """

    name: str

    @abstractmethod
    def place(
        self,
        state: ClusterState,
        queue: Sequence[Job],
        rng: np.random.Generator | None = None,
    ) -> Sequence[Placement]:
        """Decide where to place pending jobs (see the module docstring for the contract).

        Args:
            state: The cluster (never mutated).
            queue: Pending jobs in queue order; ids must be distinct and not placed in ``state``.
            rng: Random generator for randomised policies (deterministic policies ignore it).

        Returns:
            Placements in acceptance order (jobs left out wait).

        Raises:
            ConfigError: If the queue repeats a job id or holds a job that is already placed.
        """


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


def apply(state: ClusterState, placements: Iterable[Placement]) -> float:
    """Place ``placements`` on ``state`` (in order) and return the total change of F.

    Raises:
        ConfigError: If a placement is invalid on ``state`` (busy or failed GPU, wrong size, ...).
    """
    total = 0.0
    for p in placements:
        total += state.add(p.job, p.gpus)
    return total


# ----------------------------------------------------------------------------- the registry
_NAME = re.compile(r"[a-z0-9][a-z0-9_.+-]*\Z")


@dataclass(frozen=True)
class PolicySpec:
    """A policy the registry can build by name.

    Attributes:
        name: Registry name (lower case letters, digits and ``_.+-``; no spaces or commas).
        factory: Builds the policy; takes the keyword arguments given to :func:`make_policy`.
        description: One line for tables and ``--help``.
    """

    name: str
    factory: Callable[..., PlacementPolicy]
    description: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"policy name {self.name!r}: use lower case letters, digits and _.+- "
                "(starting with a letter or digit)"
            )
        if not callable(self.factory):
            raise ConfigError(f"policy {self.name!r}: factory {self.factory!r} is not callable")
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigError(f"policy {self.name!r}: description must be a non-empty string")
        if "\n" in self.description:
            raise ConfigError(f"policy {self.name!r}: description must be one line")


@dataclass
class _Registry:
    """The registered policies and the outcome of loading the providers (loaded once)."""

    specs: dict[str, PolicySpec]
    errors: dict[str, str]
    loaded: bool = False


_REGISTRY = _Registry({}, {})


def _add(spec: PolicySpec, replace: bool) -> None:
    old = _REGISTRY.specs.get(spec.name)
    if old is not None and old.factory is not spec.factory and not replace:
        raise ConfigError(f"policy {spec.name!r} is already registered (by {old.factory!r})")
    _REGISTRY.specs[spec.name] = spec


def _load_provider(ep: EntryPoint) -> None:
    """Register the policies of one provider, all or none."""
    specs = list(ep.load()())
    for spec in specs:
        if not isinstance(spec, PolicySpec):
            raise ConfigError(f"it returned {spec!r}, not a PolicySpec")
        old = _REGISTRY.specs.get(spec.name)
        if old is not None and old.factory is not spec.factory:
            raise ConfigError(f"policy {spec.name!r} is already registered (by {old.factory!r})")
    for spec in specs:
        _add(spec, replace=False)


def _load_providers() -> None:
    if _REGISTRY.loaded:
        return
    _REGISTRY.loaded = True
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # the same distribution seen twice on the path: once
    for name in sorted(found):
        ep = found[name]
        try:
            _load_provider(ep)
        except Exception as exc:  # a provider that fails must not take the others down
            cause = " ".join(str(exc).split()) or type(exc).__name__
            _REGISTRY.errors[name] = (
                f"policy provider {name!r} ({ep.value}) could not be loaded: "
                f"{type(exc).__name__}: {cause}"
            )


def provider_errors() -> dict[str, str]:
    """Providers of :data:`ENTRY_POINT_GROUP` that could not be loaded: name → one-line reason."""
    _load_providers()
    return dict(_REGISTRY.errors)


def register_policy(
    name: str,
    factory: Callable[..., PlacementPolicy],
    *,
    description: str,
    replace: bool = False,
) -> None:
    """Register a policy under ``name`` (after the installed providers' policies).

    Registering the same name with the same factory again is a no-op.

    Args:
        name: Registry name (lower case letters, digits and ``_.+-``).
        factory: Called with :func:`make_policy`'s keyword arguments; returns the policy.
        description: One line for tables and ``--help``.
        replace: Allow replacing a different factory already registered under ``name``.

    Raises:
        ConfigError: On a malformed name or description, a non-callable factory, or a name already
            registered with another factory (unless ``replace``).
    """
    _load_providers()
    _add(PolicySpec(name, factory, description), replace)


def unregister_policy(name: str) -> None:
    """Remove policy ``name`` (a no-op when it is not registered); for plug-ins and tests."""
    _load_providers()
    _REGISTRY.specs.pop(name, None)


def _spec(name: str) -> PolicySpec:
    _load_providers()
    spec = _REGISTRY.specs.get(name)
    if spec is None:
        known = ", ".join(_REGISTRY.specs) or "none registered"
        problems = "".join(f"; {e}" for e in _REGISTRY.errors.values())
        if not _REGISTRY.specs and not _REGISTRY.errors:
            problems = (
                f"; no package declares policies in the entry-point group {ENTRY_POINT_GROUP}"
            )
        raise ConfigError(f"unknown policy {name!r}; policies: {known}{problems}")
    return spec


def make_policy(name: str, **kwargs: object) -> PlacementPolicy:
    """Build the policy registered as ``name``.

    Args:
        name: A name of :func:`policy_names`.
        **kwargs: Passed to the factory (e.g. ``seed=3`` for ``random``, ``max_candidates=16`` for
            ``crop``).

    Raises:
        ConfigError: For an unknown name (the message lists the known ones, and any provider that
            could not be loaded) or an argument the policy does not take.
    """
    spec = _spec(name)
    try:
        return spec.factory(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"policy {name!r}: {exc}") from None


def policy_description(name: str) -> str:
    """The one-line description of policy ``name``.

    Raises:
        ConfigError: For an unknown name.
    """
    return _spec(name).description


def policy_names() -> tuple[str, ...]:
    """Every registered name: the providers' policies (in provider order), then those registered
    at run time."""
    _load_providers()
    return tuple(_REGISTRY.specs)
