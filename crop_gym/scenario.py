"""Scenarios: typed, validated descriptions of a static placement problem, and their seeded sampler.

A :class:`Scenario` names a topology preset, an abnormality profile, a workload source, the size of the
pending queue and the background load. :class:`ScenarioSampler` turns it into a
:class:`PlacementInstance` (a :class:`~crop_gym.model.state.ClusterState` with background jobs already
placed, plus a queue of pending jobs) from a ``numpy.random.Generator`` — the environment passes its
``np_random``; nothing here touches the global RNG.

Scenarios load from TOML, YAML or JSON files with the same field names, e.g.::

    name = "my-scenario"
    cluster = "leafspine-64"
    workload = "elasticflow:cluster04"
    queue_size = 16
    background_load = 0.3
    hardware = "a100-elasticflow"   # or a profile file, or "dgx-a100+azure-v100" (mixed GPUs)

    [abnormal]
    profile = "mild"
    slow_gpu_frac = 0.1

Every field is typed and range-checked (:data:`INT_FIELDS`, :data:`FLOAT_FIELDS`): an integer field
takes an integer only (``true``, ``4.0`` and ``"4"`` are refused, even when integral), a number field
takes an integer or a finite float (not a boolean), a text field a string; a value outside its range,
an unknown field, a table where a value is expected (or the reverse) is refused with one line naming
the file and the field. Files are read with :func:`crop_gym.io.read_mapping` (no duplicate keys, no
YAML aliases, at most 1 MiB, regular files only).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.io import read_mapping
from crop_gym.model.candidates import generate
from crop_gym.model.conditions import Conditions
from crop_gym.model.hardware import (
    DEFAULT_HARDWARE,
    ClusterHardware,
    bundled_hardware,
    resolve_hardware,
    spec_parts,
)
from crop_gym.model.health import PROFILES, AbnormalityProfile, Health, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import PRESETS, Topology

__all__ = [
    "FLOAT_FIELDS",
    "INT_FIELDS",
    "SCENARIOS",
    "PlacementInstance",
    "Scenario",
    "ScenarioSampler",
    "get_scenario",
    "with_hardware",
]


#: Integer fields of a scenario and their allowed ranges (inclusive).
INT_FIELDS: dict[str, tuple[int, int]] = {
    "queue_size": (1, 100_000),
    "max_job_gpus": (0, 1 << 20),
    "background_max_gpus": (0, 1 << 20),
    "queue_min_gpus": (1, 1 << 20),
    "max_candidates": (1, 10_000),
}
#: Number fields of a scenario and their allowed ranges (inclusive).
FLOAT_FIELDS: dict[str, tuple[float, float]] = {
    "background_load": (0.0, 0.95),
    "overlap": (0.0, 1.0),
    "observation_noise": (0.0, 10.0),
}
_STR_FIELDS = ("name", "cluster", "workload", "allreduce", "hardware")
#: Typed fields of an ``abnormal`` table (ranges beyond these are checked by the profile itself).
_AB_FLOATS = (
    "slow_gpu_frac",
    "failed_gpu_frac",
    "failprone_gpu_frac",
    "degraded_link_frac",
    "failprone_link_frac",
    "onset_rate_per_gpu_hour",
    "mean_abnormal_duration_s",
)
_AB_PAIRS = ("slow_factor", "gpu_fail_prob", "degradation", "link_fail_prob")
_AB_MAX_GPUS = 1 << 20
#: Every field an ``abnormal`` table may set besides ``profile`` (the profile's own fields).
_AB_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AbnormalityProfile))


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:36] + "..."


def _check_int(name: str, v: Any, lo: int, hi: int) -> int:
    """``v`` if it is an ``int`` (not a ``bool``) in ``[lo, hi]``, else a one-line ConfigError."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ConfigError(
            f"{name}={_show(v)} must be an integer in [{lo}, {hi}] (got {type(v).__name__})"
        )
    if not lo <= v <= hi:
        raise ConfigError(f"{name}={_show(v)} is outside its allowed range [{lo}, {hi}]")
    return int(v)


def _check_number(name: str, v: Any, lo: float | None = None, hi: float | None = None) -> float:
    """``v`` if it is a finite ``int``/``float`` (not a ``bool``) in ``[lo, hi]``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{name}={_show(v)} must be a number (got {type(v).__name__})")
    try:
        x = float(v)
    except OverflowError:  # an int beyond float range
        x = math.inf
    if not math.isfinite(x):
        raise ConfigError(f"{name}={_show(v)} must be a finite number")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        lo_s = "-inf" if lo is None else f"{lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        raise ConfigError(f"{name}={_show(v)} is outside its allowed range [{lo_s}, {hi_s}]")
    return x


def _abnormal_overrides(table: Mapping[Any, Any]) -> tuple[str, dict[str, Any]]:
    """The base profile name and the typed overrides of an ``abnormal`` table."""
    ab = dict(table)
    base = ab.pop("profile", "none")
    if not isinstance(base, str):
        raise ConfigError(f"abnormal.profile={_show(base)} must be a profile name (a string)")
    for key, v in ab.items():
        where = f"abnormal.{key}"
        if key == "name":
            if not isinstance(v, str):
                raise ConfigError(f"{where}={_show(v)} must be a string")
        elif key in _AB_FLOATS:
            ab[key] = _check_number(where, v)
        elif key in _AB_PAIRS:
            if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, (list, tuple)):
                raise ConfigError(f"{where}={_show(v)} must be a [low, high] pair of numbers")
            if len(v) != 2:
                raise ConfigError(f"{where} must be a [low, high] pair, got {len(v)} values")
            ab[key] = (_check_number(f"{where}[0]", v[0]), _check_number(f"{where}[1]", v[1]))
        elif key == "abnormal_gpus" and v is not None:
            ab[key] = _check_int(where, v, 0, _AB_MAX_GPUS)
        elif key not in _AB_FIELDS:
            raise ConfigError(f"{where}: unknown field; fields: profile, {', '.join(_AB_FIELDS)}")
    return base, ab


@dataclass(frozen=True)
class Scenario:
    """A static placement problem family.

    Attributes:
        name: Scenario name.
        cluster: Topology preset name (see :data:`crop_gym.model.topology.PRESETS`).
        abnormal: Abnormality profile (a preset from :data:`crop_gym.model.health.PROFILES`, possibly with
            overridden fields).
        workload: Where jobs come from: a bundled trace (``"elasticflow:cluster10"``), a file path,
            or ``"synthetic"`` (the seeded synthetic generator's defaults).
        workload_format: Format of a workload file (``elasticflow``, ``pollux``, ``csv``) or ``None``
            to infer it.
        queue_size: Pending jobs ``K`` in each instance (>= 1).
        background_load: Fraction of GPUs held by already-running background jobs, in [0, 0.95].
        max_job_gpus: Largest job drawn into the queue or the background (0 = half the cluster).
        background_max_gpus: Largest background job (0 = ``max_job_gpus``'s limit): with small
            background jobs on random compact candidates, the free GPUs are scattered in pieces
            (a fragmented cluster).
        queue_min_gpus: Smallest queued job (1 = any): large jobs only, which must span pieces.
        allreduce: All-reduce algorithm (``""`` = the hardware profile's).
        overlap: Communication/compute overlap φ in [0, 1] (``None`` = the hardware profile's).
        max_candidates: Candidate placements per job size (>= 1).
        observation_noise: Noise of the health signal agents observe (0 = true state).
        hardware: Hardware profile: a bundled name, a profile file (relative to the scenario file)
            or profiles joined by ``+`` for mixed GPU types
            (:mod:`crop_gym.model.hardware`). It sets the links, the model options and
            jobs' compute; the default, :data:`DEFAULT_HARDWARE`, is the package calibration.
    """

    name: str = "custom"
    cluster: str = "leafspine-64"
    abnormal: AbnormalityProfile = field(default_factory=lambda: PROFILES["mild"])
    workload: str = "elasticflow:cluster04"
    workload_format: str | None = None
    queue_size: int = 16
    background_load: float = 0.3
    max_job_gpus: int = 0
    background_max_gpus: int = 0
    queue_min_gpus: int = 1
    allreduce: str = ""
    overlap: float | None = None
    max_candidates: int = 8
    observation_noise: float = 0.0
    hardware: str = DEFAULT_HARDWARE

    def __post_init__(self) -> None:
        label = f"scenario {_show(self.name) if not isinstance(self.name, str) else self.name}"
        try:
            for name in _STR_FIELDS:
                v = getattr(self, name)
                if not isinstance(v, str):
                    raise ConfigError(f"{name}={_show(v)} must be a string")
            if not self.workload:
                raise ConfigError("workload='' must name a trace, a file or 'synthetic'")
            if self.workload_format is not None:
                from crop_gym.workloads.loader import FORMATS

                if not isinstance(self.workload_format, str) or self.workload_format not in FORMATS:
                    raise ConfigError(
                        f"workload_format={_show(self.workload_format)} must be one of "
                        f"{', '.join(FORMATS)} (or absent)"
                    )
            if self.cluster not in PRESETS:
                raise ConfigError(
                    f"cluster={self.cluster!r} is not a preset ({', '.join(PRESETS)})"
                )
            if not isinstance(self.abnormal, AbnormalityProfile):
                raise ConfigError("abnormal must be an AbnormalityProfile")
            if self.abnormal.abnormal_gpus is not None:
                _check_int("abnormal.abnormal_gpus", self.abnormal.abnormal_gpus, 0, _AB_MAX_GPUS)
            for name, (lo, hi) in INT_FIELDS.items():
                object.__setattr__(self, name, _check_int(name, getattr(self, name), lo, hi))
            for name, (flo, fhi) in FLOAT_FIELDS.items():
                if name == "overlap" and self.overlap is None:
                    continue
                object.__setattr__(self, name, _check_number(name, getattr(self, name), flo, fhi))
            try:
                hw = resolve_hardware(self.hardware)
            except ConfigError as exc:
                raise ConfigError(f"hardware={_show(self.hardware)}: {exc}") from None
            # The resolved profile, read once (a file is not read again by every property).
            object.__setattr__(self, "_cluster_hardware", hw)
            hw.perf(self.allreduce, self.overlap)  # validates both against the profile
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None

    @property
    def cluster_hardware(self) -> ClusterHardware:
        """The resolved :attr:`hardware` spec."""
        hw: ClusterHardware = self.__dict__["_cluster_hardware"]
        return hw

    @property
    def perf(self) -> PerfConfig:
        """The iteration-time options: the hardware profile's, ``allreduce`` and ``overlap``
        overriding its own when given."""
        return self.cluster_hardware.perf(self.allreduce, self.overlap)

    @property
    def topology(self) -> Topology:
        """The compiled topology on the scenario's hardware (cached per preset and hardware)."""
        return self.cluster_hardware.topology(self.cluster)

    @property
    def job_size_limit(self) -> int:
        """Largest job size drawn (``max_job_gpus`` or half the cluster).

        Raises:
            ConfigError: If a job-size field is larger than the cluster (:meth:`check_sizes`).
        """
        self.check_sizes()
        return self.max_job_gpus or max(1, self.topology.num_gpus // 2)

    def check_sizes(self) -> None:
        """Refuse job-size fields larger than the cluster (rather than drawing smaller jobs).

        Needs the compiled topology, so it runs when a file is read (:meth:`from_dict`) and when
        instances are drawn, not when the built-in scenarios are defined at import.

        Raises:
            ConfigError: Naming the scenario, the field, its value and the cluster's GPUs.
        """
        n_gpus = self.topology.num_gpus
        for name in ("max_job_gpus", "background_max_gpus", "queue_min_gpus"):
            if getattr(self, name) > n_gpus:
                raise ConfigError(
                    f"scenario {self.name}: {name}={getattr(self, name)} is larger than the "
                    f"cluster ({self.cluster}: {n_gpus} GPUs)"
                )

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ files
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> Scenario:
        """Build from a mapping with the field names; ``abnormal`` is a profile name or a table
        ``{"profile": name, field: value, ...}``.

        Raises:
            ConfigError: Naming ``source`` and the field for an unknown or invalid field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a scenario must be a table, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(map(str, data)) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {unknown}; fields: {sorted(known)}")
        kwargs = dict(data)
        try:
            for key, v in kwargs.items():
                if key != "abnormal" and isinstance(v, (Mapping, list, tuple)):
                    raise ConfigError(
                        f"{key} must be a single value, got a {'table' if isinstance(v, Mapping) else 'list'}"
                    )
            if "abnormal" in kwargs:
                ab = kwargs["abnormal"]
                if isinstance(ab, str):
                    kwargs["abnormal"] = get_profile(ab)
                elif isinstance(ab, Mapping):
                    base, overrides = _abnormal_overrides(ab)
                    # replace(), not get_profile(base, **overrides): a field such as ``name``
                    # would collide with get_profile's own parameter.
                    kwargs["abnormal"] = dataclasses.replace(get_profile(base), **overrides)
                elif not isinstance(ab, AbnormalityProfile):
                    raise ConfigError(
                        f"abnormal={_show(ab)} must be a profile name or a table "
                        f"(got {type(ab).__name__})"
                    )
            scenario = cls(**kwargs)
            scenario.check_sizes()
            return scenario
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        """Load a scenario from a ``.toml``, ``.yaml``/``.yml`` or ``.json`` file.

        Raises:
            ConfigError: For an unreadable or non-regular file, a syntax error (with the parser's
                line), a duplicate key, a YAML alias, or an invalid field (naming the file and the
                field).
        """
        p = Path(path)
        data = read_mapping(p, what="scenario")
        data.setdefault("name", p.stem)
        if isinstance(data.get("hardware"), str):
            data["hardware"] = _beside(p, data["hardware"])
        return cls.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        """A plain mapping that :meth:`from_dict` reads back (``overlap`` omitted when it is the
        hardware's)."""
        d = dataclasses.asdict(self)
        if d["overlap"] is None:
            del d["overlap"]
        ab = dataclasses.asdict(self.abnormal)
        ab["profile"] = ab.pop("name")
        base = dataclasses.asdict(PROFILES.get(ab["profile"], AbnormalityProfile()))
        d["abnormal"] = {"profile": ab["profile"]} | {
            k: v for k, v in ab.items() if k != "profile" and base.get(k) != v
        }
        if ab["profile"] not in PROFILES:
            d["abnormal"]["profile"] = "none"
        return d


def _beside(scenario_file: Path, spec: str) -> str:
    """``spec`` with each relative profile path that exists beside the scenario file made so."""
    out = []
    for part in spec_parts(spec):
        near = scenario_file.parent / part
        local = part in bundled_hardware() or os.path.isabs(part) or os.path.exists(part)
        out.append(str(near) if not local and near.is_file() else part)
    return "+".join(out)


#: Built-in scenarios.
SCENARIOS: dict[str, Scenario] = {
    "default": Scenario(
        name="default"
    ),  # leafspine-64, mild, 16 jobs from cluster04 (<= 32 GPUs), 30% background
    "testbed-8": Scenario(
        name="testbed-8",
        cluster="testbed-8",
        abnormal=PROFILES["testbed"],
        workload="elasticflow:195job",
        queue_size=4,
        background_load=0.0,
        max_job_gpus=4,
    ),
    "default-none": Scenario(name="default-none", abnormal=PROFILES["none"]),
    "default-severe": Scenario(name="default-severe", abnormal=PROFILES["severe"]),
    "n64g8": Scenario(
        name="n64g8",
        cluster="n64g8",
        workload="elasticflow:cluster01",
        queue_size=64,
        max_job_gpus=64,
    ),
    "n128g8": Scenario(
        name="n128g8",
        cluster="n128g8",
        workload="elasticflow:cluster04",
        queue_size=200,
        max_job_gpus=64,
    ),
    "pollux-16x4": Scenario(
        name="pollux-16x4", cluster="pollux-16x4", queue_size=16, max_job_gpus=16
    ),
    # Large jobs on a fragmented cluster: half the GPUs held by 1-2-GPU background jobs scattered
    # over the servers, 8 queued jobs of 16-32 GPUs, of which one or two fit.
    "fragmented": Scenario(
        name="fragmented",
        background_load=0.5,
        background_max_gpus=2,
        queue_size=8,
        queue_min_gpus=16,
    ),
}


def get_scenario(name_or_path: str | Path | Scenario) -> Scenario:
    """A built-in scenario by name, or one loaded from a file.

    Raises:
        ConfigError: If it is neither a built-in name nor an existing file.
    """
    if isinstance(name_or_path, Scenario):
        return name_or_path
    key = str(name_or_path)
    if key in SCENARIOS:
        return SCENARIOS[key]
    if Path(key).is_file():
        return Scenario.from_file(key)
    raise ConfigError(
        f"unknown scenario {key!r}: not a built-in ({', '.join(SCENARIOS)}) nor a file"
    )


def with_hardware(scenario: Scenario | str | Path, hardware: str | None) -> Scenario | str | Path:
    """``scenario`` on ``hardware`` (a spec of :attr:`Scenario.hardware`); ``None``: unchanged."""
    if hardware is None:
        return scenario
    return get_scenario(scenario).replace(hardware=hardware)


@cache
def _workload_jobs(spec: str, fmt: str | None) -> tuple[Job, ...]:
    from crop_gym.workloads import load_workload

    if spec == "synthetic":
        from crop_gym.workloads import SyntheticConfig, generate_synthetic

        return tuple(generate_synthetic(SyntheticConfig(), np.random.default_rng(0)).jobs)
    return tuple(load_workload(spec, format=fmt).jobs)


def _static_copy(job: Job, job_id: str) -> Job:
    """``job`` as a static job: id ``job_id``, arrival 0, no deadline (no validation run again)."""
    return job.unchecked(job_id=job_id, arrival=0.0, deadline=None)


@dataclass(eq=False)
class PlacementInstance:
    """One static placement problem.

    Attributes:
        state: The cluster, with background jobs placed.
        queue: Pending jobs, in queue order.
        scenario: The scenario it was drawn from.
    """

    state: ClusterState
    queue: tuple[Job, ...]
    scenario: Scenario

    @property
    def initial_F(self) -> float:
        """F of the background jobs alone."""
        return self.state.F


@dataclass(frozen=True, eq=False)
class Draw:
    """One drawn instance before it is placed anywhere: what :meth:`ScenarioSampler.draw` gives.

    Attributes:
        health: The cluster's device health.
        background: The background jobs.
        placements: Their GPUs (sorted ``int32``, in the cluster's own numbering).
        queue: The pending jobs, in queue order.
    """

    health: Health
    background: tuple[Job, ...]
    placements: tuple[NDArray[np.int32], ...]
    queue: tuple[Job, ...]


@lru_cache(maxsize=16)
def _blind_layout(layout: Topology) -> Conditions:
    """Every device of ``layout`` healthy: the background placements are drawn health-blind, so
    the generator reads nothing but the free GPUs."""
    return Conditions(layout)


class ScenarioSampler:
    """Seeded generator of :class:`PlacementInstance` for a :class:`Scenario`.

    The topology and workload are loaded once; each draw picks the health, background jobs
    (placed on random compact candidates) and a queue of pending jobs.

    Args:
        scenario: The scenario (or its name / file path).
    """

    def __init__(self, scenario: Scenario | str | Path) -> None:
        self.scenario = get_scenario(scenario)
        self.topology = self.scenario.topology
        jobs = _workload_jobs(self.scenario.workload, self.scenario.workload_format)
        limit = self.scenario.job_size_limit
        sc = self.scenario
        self._pool = tuple(j for j in jobs if sc.queue_min_gpus <= j.num_gpus <= limit)
        bg_limit = min(limit, sc.background_max_gpus or limit)
        self._background = tuple(j for j in jobs if j.num_gpus <= bg_limit)
        if not self._pool:
            raise ConfigError(
                f"scenario {sc.name}: no job of workload {sc.workload!r} has between "
                f"queue_min_gpus={sc.queue_min_gpus} and max_job_gpus={limit} GPUs"
            )
        if not self._background and sc.background_load > 0:
            raise ConfigError(
                f"scenario {sc.name}: no job of workload {sc.workload!r} fits "
                f"background_max_gpus={bg_limit}"
            )

    @property
    def pool(self) -> tuple[Job, ...]:
        """The jobs queues are drawn from (the workload's jobs of at most ``job_size_limit`` GPUs)."""
        return self._pool

    def _draw(self, rng: np.random.Generator, n: int, prefix: str) -> list[Job]:
        idx = rng.integers(0, len(self._pool), size=n).tolist()
        pool = self._pool
        return [_static_copy(pool[i], f"{prefix}{t}") for t, i in enumerate(idx)]

    def sample(self, rng: np.random.Generator) -> PlacementInstance:
        """Draw one instance.

        Args:
            rng: Random generator (e.g. the environment's ``np_random``).
        """
        return self.instance(self.draw([rng])[0])

    def instance(self, draw: Draw) -> PlacementInstance:
        """The :class:`PlacementInstance` of a draw: a new state with its background placed."""
        state = ClusterState(self.topology, draw.health, self.scenario.perf)
        state.place(draw.background, draw.placements, checked=True)
        return PlacementInstance(state=state, queue=draw.queue, scenario=self.scenario)

    def draw(
        self,
        rngs: Sequence[np.random.Generator],
        *,
        layout: Topology | None = None,
        regions: Sequence[int] | None = None,
    ) -> list[Draw]:
        """Draw one instance from each generator: exactly what each would draw alone (the same
        numbers in the same order), with the background placements of all of them chosen in
        lockstep, one candidate generation per round for all of them.

        An instance's health comes first, then its background jobs: each drawn from the workload
        and, if it fits, placed on one of its candidates (robustness off) chosen at random, until
        the background load is reached or 20 draws missed; then its queue.

        Args:
            rngs: One generator per instance.
            layout: Where the instances are drawn side by side: a replication of the scenario's
                topology (:meth:`~crop_gym.model.topology.Topology.replicated`); default: the
                scenario's topology itself (then one generator only).
            regions: The region of ``layout`` each instance is drawn in (default ``0, 1, ...``).
        """
        sc, n = self.scenario, len(rngs)
        topo = self.topology
        layout = topo if layout is None else layout
        where = list(range(n)) if regions is None else [int(r) for r in regions]
        if layout.region_topology is not topo or len(where) != n:
            raise ConfigError("draw: the layout must replicate the scenario's topology")
        G = topo.num_gpus
        healths = [sc.abnormal.sample(topo, rng) for rng in rngs]
        target = round(sc.background_load * G)
        busy, drawn, misses = [0] * n, [0] * n, [0] * n
        free = np.zeros(layout.num_gpus, dtype=bool)
        for r, h in zip(where, healths, strict=True):
            free[r * G : (r + 1) * G] = h.usable
        jobs: list[list[Job]] = [[] for _ in range(n)]
        placements: list[list[NDArray[np.int32]]] = [[] for _ in range(n)]
        active = [i for i in range(n) if target > 0]
        cond = _blind_layout(layout)
        while active:
            sizes: list[list[int]] = [[] for _ in range(layout.regions)]
            asks: list[tuple[int, Job]] = []  # this round's draws that fit the load left
            for i in active:
                # A scalar draw: the same stream as ``size=1``, at a third of its cost.
                proto = self._background[int(rngs[i].integers(0, len(self._background)))]
                name = f"bg{drawn[i]}"
                drawn[i] += 1
                if proto.num_gpus > target - busy[i]:
                    misses[i] += 1
                else:
                    job = _static_copy(proto, name)  # copied only once it fits the load left
                    asks.append((i, job))
                    sizes[where[i]] = [job.num_gpus]
            cands = generate(cond, free, sizes, sc.max_candidates, robust=False)
            for i, job in asks:
                r = where[i]
                (cs,) = cands[r]
                if len(cs) == 0:
                    misses[i] += 1
                    continue
                gpus = cs.gpus[rngs[i].integers(len(cs))]
                free[gpus] = False
                jobs[i].append(job)
                placements[i].append(gpus - np.int32(r * G))
                busy[i] += job.num_gpus
            active = [i for i in active if busy[i] < target and misses[i] < 20]
        return [
            Draw(
                health=healths[i],
                background=tuple(jobs[i]),
                placements=tuple(placements[i]),
                queue=tuple(self._draw(rng, sc.queue_size, "q")),
            )
            for i, rng in enumerate(rngs)
        ]
