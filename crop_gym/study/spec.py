"""The study specification: which traces, clusters, hardware, policies, profiles and seeds to run.

A :class:`StudySpec` is given on the command line or as a study file (``.yaml``/``.yml``, ``.json``
or ``.toml``, read with :func:`crop_gym.io.read_mapping`)::

    # study.yaml
    traces: [elasticflow:cluster10, elasticflow:cluster04]
    clusters: [auto]            # auto: the cluster ElasticFlow simulated each trace on
    hardware: [default]
    policies: [crop, best-fit]  # or "all": every registered policy
    abnormal: [none, mild]
    seeds: 3                    # seeds 0, 1, 2; or a list such as [0, 7]
    jobs: 2000                  # first N jobs of each trace (omit for all)
    arrival_scale: 1.0
    sim: {checkpoint_interval_s: 1800}   # SimConfig fields for every run

Every error names the file and the field on one line (``study.yaml: policies: unknown policy ...``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crop_gym.errors import ConfigError, check_bool, check_int, check_real
from crop_gym.model.hardware import HARDWARE_PROFILES

__all__ = [
    "AUTO_CLUSTER",
    "HARDWARE_PROFILES",
    "MAX_RUNS",
    "SIM_FIELDS",
    "StudySpec",
    "hardware_names",
    "load_study",
]

#: Cluster value meaning "the cluster ElasticFlow simulated the trace on" (else ``n64g8``).
AUTO_CLUSTER = "auto"
#: Largest grid a study may expand to (a typo such as ``seeds: 100000`` is refused, not queued).
MAX_RUNS = 1_000_000
#: Largest seed count or seed value.
MAX_SEED = 2**32 - 1
#: :class:`~crop_gym.sim.SimConfig` fields a study's ``sim`` table may set (scalars only; the
#: timeline is never recorded in a study and the iteration-time options come with the hardware).
SIM_FIELDS: tuple[str, ...] = (
    "checkpoint_interval_s",
    "failure_horizon_s",
    "mean_repair_s",
    "transient_abnormalities",
    "chronic_abnormalities",
    "gpu_failures",
    "link_failures",
    "queue_view",
    "max_queue_view",
    "max_time_s",
    "skip_oversized",
    "stall_events",
    "events_per_job",
    "max_events",
)

#: What a study sets in :class:`~crop_gym.sim.SimConfig` unless its ``sim`` table says otherwise:
#: jobs larger than the cluster are skipped and reported (a trace's few giant jobs would otherwise
#: refuse the whole trace on a small cluster).
SIM_DEFAULTS: dict[str, Any] = {"skip_oversized": True}


def hardware_names() -> tuple[str, ...]:
    """The names a study's ``hardware`` axis accepts (:data:`HARDWARE_PROFILES`)."""
    return tuple(HARDWARE_PROFILES)


def _names(name: str, value: object) -> tuple[str, ...]:
    """A non-empty list of distinct non-empty strings (a single string is a list of one)."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, Sequence) or isinstance(value, (bytes, bytearray)):
        raise ConfigError(f"{name} must be a list of names, got {type(value).__name__}")
    out: list[str] = []
    for v in value:
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{name}: {v!r} is not a name (a non-empty string)")
        if v.strip() in out:
            raise ConfigError(f"{name}: {v.strip()!r} is given twice")
        out.append(v.strip())
    if not out:
        raise ConfigError(f"{name} must name at least one value")
    return tuple(out)


def _seeds(value: object) -> tuple[int, ...]:
    """``N`` means seeds ``0 .. N-1``; a list names the seeds."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        seeds = tuple(check_int("seeds[]", v, 0, MAX_SEED) for v in value)
        if not seeds:
            raise ConfigError("seeds must name at least one seed")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"seeds: {list(seeds)} names a seed twice")
        return seeds
    n = check_int("seeds", value, 1, 10_000)
    return tuple(range(n))


def _canonical_trace(trace: str) -> str:
    """A bundled trace's canonical name, or the path of an existing regular file."""
    from crop_gym.io import check_regular_input
    from crop_gym.workloads.registry import bundled_names, resolve_bundled

    if os.path.lexists(trace):
        check_regular_input(trace, what="trace")
        return trace
    bundled = resolve_bundled(trace)
    if bundled is None:
        raise ConfigError(
            f"{trace!r} is neither a file nor a bundled trace (bundled: {', '.join(bundled_names())})"
        )
    return bundled.name


@dataclass(frozen=True)
class StudySpec:
    """A study: the axes of its grid and what every run shares (validated; frozen).

    Attributes:
        traces: Bundled trace names (canonicalised to ``family:trace``) or trace files.
        policies: Registered policy names (:mod:`crop_gym.policy`); ``"all"`` = every one.
        clusters: Topology presets, or ``"auto"`` (ElasticFlow's cluster for each trace).
        hardware: Hardware profiles (:data:`HARDWARE_PROFILES`).
        abnormal: Abnormality profiles (``none``, ``mild``, ``severe``, ``testbed``).
        seeds: Seeds of the health timeline and the policy (a count ``N`` = ``0 .. N-1``).
        jobs: Simulate the first ``jobs`` jobs of each trace (``None`` = all).
        arrival_scale: Factor on every arrival time (< 1 compresses a trace and loads the cluster).
        sim: :class:`~crop_gym.sim.SimConfig` fields for every run (:data:`SIM_FIELDS`), as sorted
            ``(name, value)`` pairs; :data:`SIM_DEFAULTS` fills the ones not given.
    """

    traces: tuple[str, ...]
    policies: tuple[str, ...]
    clusters: tuple[str, ...] = (AUTO_CLUSTER,)
    hardware: tuple[str, ...] = ("default",)
    abnormal: tuple[str, ...] = ("none",)
    seeds: tuple[int, ...] = (0,)
    jobs: int | None = None
    arrival_scale: float = 1.0
    sim: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        from crop_gym.model.health import PROFILES
        from crop_gym.model.topology import PRESETS
        from crop_gym.policy import policy_names

        traces = tuple(_canonical_trace(t) for t in _names("traces", self.traces))
        if len(set(traces)) != len(traces):
            raise ConfigError(f"traces: {list(self.traces)} names a trace twice")
        policies = _names("policies", self.policies)
        known = policy_names()
        if policies == ("all",):
            policies = known
        for p in policies:
            if p not in known:
                raise ConfigError(f"policies: unknown policy {p!r}; policies: {', '.join(known)}")
        clusters = _names("clusters", self.clusters)
        for c in clusters:
            if c != AUTO_CLUSTER and c not in PRESETS:
                raise ConfigError(
                    f"clusters: unknown preset {c!r}; presets: {AUTO_CLUSTER}, {', '.join(PRESETS)}"
                )
        hardware = _names("hardware", self.hardware)
        for h in hardware:
            if h not in hardware_names():
                raise ConfigError(
                    f"hardware: unknown profile {h!r}; profiles: {', '.join(hardware_names())}"
                )
        abnormal = _names("abnormal", self.abnormal)
        for a in abnormal:
            if a not in PROFILES:
                raise ConfigError(
                    f"abnormal: unknown profile {a!r}; profiles: {', '.join(PROFILES)}"
                )
        jobs = None if self.jobs is None else check_int("jobs", self.jobs, 1, 10**9)
        scale = check_real("arrival_scale", self.arrival_scale, 0.0, 1e6, low_inclusive=False)
        sim = _sim_options(self.sim)
        object.__setattr__(self, "traces", traces)
        object.__setattr__(self, "policies", policies)
        object.__setattr__(self, "clusters", clusters)
        object.__setattr__(self, "hardware", hardware)
        object.__setattr__(self, "abnormal", abnormal)
        object.__setattr__(self, "seeds", _seeds(self.seeds))
        object.__setattr__(self, "jobs", jobs)
        object.__setattr__(self, "arrival_scale", scale)
        object.__setattr__(self, "sim", sim)
        size = self.size
        if size > MAX_RUNS:
            raise ConfigError(f"the grid has {size:,} runs, more than {MAX_RUNS:,}")

    @property
    def size(self) -> int:
        """Number of runs of the grid."""
        return math.prod(
            len(axis)
            for axis in (
                self.traces,
                self.clusters,
                self.hardware,
                self.policies,
                self.abnormal,
                self.seeds,
            )
        )

    def replace(self, **changes: Any) -> StudySpec:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ files
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<study>") -> StudySpec:
        """Build from a mapping with the field names (``sim`` a table).

        Raises:
            ConfigError: One line naming ``source`` and the field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a study must be a table, got {type(data).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(map(str, data)) - set(known))
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {unknown}; fields: {known}")
        for required in ("traces", "policies"):
            if required not in data:
                raise ConfigError(f"{source}: {required} is missing")
        kwargs = dict(data)
        if "sim" in kwargs:
            sim = kwargs["sim"]
            if not isinstance(sim, Mapping):
                raise ConfigError(f"{source}: sim must be a table, got {type(sim).__name__}")
            kwargs["sim"] = tuple(sim.items())
        try:
            return cls(**kwargs)
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-ready mapping that :meth:`from_dict` reads back."""
        return {
            "traces": list(self.traces),
            "policies": list(self.policies),
            "clusters": list(self.clusters),
            "hardware": list(self.hardware),
            "abnormal": list(self.abnormal),
            "seeds": list(self.seeds),
            "jobs": self.jobs,
            "arrival_scale": self.arrival_scale,
            "sim": dict(self.sim),
        }

    @property
    def trace_files(self) -> tuple[str, ...]:
        """The traces that are files (not bundled names): inputs of the study."""
        return tuple(t for t in self.traces if os.path.lexists(t))


def _sim_options(value: object) -> tuple[tuple[str, Any], ...]:
    """Validate ``sim`` overrides by building a :class:`SimConfig`; return sorted pairs."""
    from crop_gym.sim import SimConfig

    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (tuple, list)):
        pairs = list(value)
    else:
        raise ConfigError(f"sim must be a table of SimConfig fields, got {type(value).__name__}")
    options = dict(SIM_DEFAULTS)
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ConfigError(f"sim: {pair!r} is not a (field, value) pair")
        key, v = pair
        if key not in SIM_FIELDS:
            raise ConfigError(f"sim: unknown field {key!r}; fields: {', '.join(SIM_FIELDS)}")
        if isinstance(v, (Mapping, list, tuple)):
            raise ConfigError(f"sim.{key} must be a single value")
        options[key] = v
    if "skip_oversized" in options:
        options["skip_oversized"] = check_bool("sim.skip_oversized", options["skip_oversized"])
    try:
        config = SimConfig(**options)
    except ConfigError as exc:
        raise ConfigError(f"sim: {str(exc).replace('SimConfig.', '')}") from None
    # Normalised values (SimConfig turns 3600 into 3600.0), so equal studies have equal run ids.
    return tuple(sorted((k, getattr(config, k)) for k in options))


def load_study(path: str | os.PathLike[str]) -> StudySpec:
    """Read a study file (``.yaml``/``.yml``, ``.json`` or ``.toml``).

    Raises:
        ConfigError: One line naming the file (and the line or field).
    """
    from crop_gym.io import read_mapping

    p = Path(path)
    return StudySpec.from_dict(read_mapping(p, what="study"), source=str(p))
