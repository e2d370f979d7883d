"""A study's grid: traces × clusters × hardware × policies × abnormality profiles × seeds.

Each point is a :class:`Run` with a stable :attr:`Run.run_id`: a readable prefix (trace, cluster,
hardware, policy, profile, seed) and a hash of every coordinate, so the same run always gets the
same id, on any machine and in any order, and two runs that differ anywhere (the job limit, the
arrival scale, a ``sim`` option) never share one. Result files are named by the id, which is what
makes resuming and retrying safe (see :mod:`crop_gym.study.results`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crop_gym.errors import ConfigError
from crop_gym.model.hardware import HARDWARE_PROFILES, ClusterHardware, resolve_hardware
from crop_gym.study.spec import AUTO_CLUSTER, StudySpec

if TYPE_CHECKING:
    from crop_gym.model.topology import Topology
    from crop_gym.sim import SimConfig

__all__ = [
    "COORDINATES",
    "Run",
    "apply_hardware",
    "cluster_on",
    "expand",
    "setting_title",
]

#: Grid coordinates of a run, in the order of the id, the CSV columns and the tables.
COORDINATES: tuple[str, ...] = (
    "trace",
    "cluster",
    "hardware",
    "policy",
    "abnormal",
    "seed",
    "jobs",
    "arrival_scale",
    "sim",
)

_SLUG = re.compile(r"[^A-Za-z0-9_.+-]+")


def _hardware(hardware: str) -> ClusterHardware | None:
    """The resolved profile of an axis name (``None`` for ``default``)."""
    if hardware not in HARDWARE_PROFILES:
        raise ConfigError(
            f"unknown hardware profile {hardware!r}; profiles: {', '.join(HARDWARE_PROFILES)}"
        )
    return None if hardware == "default" else resolve_hardware(hardware)


def apply_hardware(config: SimConfig, hardware: str) -> SimConfig:
    """The simulator configuration of ``config`` on hardware profile ``hardware``: the profile's
    model options replace ``config.perf`` (``default``: ``config`` as it is).

    The hook where hardware profiles meet the simulator, with :func:`cluster_on`.

    Raises:
        ConfigError: For a name that is not in :data:`HARDWARE_PROFILES`.
    """
    hw = _hardware(hardware)
    return config if hw is None else dataclasses.replace(config, perf=hw.perf())


def cluster_on(cluster: str, hardware: str) -> str | Topology:
    """The topology of preset ``cluster`` on hardware profile ``hardware`` (``default``: the
    preset's name, which the simulator builds as it always has).

    Raises:
        ConfigError: For a name that is not in :data:`HARDWARE_PROFILES`.
    """
    hw = _hardware(hardware)
    return cluster if hw is None else hw.topology(cluster)


def setting_title(setting: Any) -> str:
    """A setting's title from its coordinates (a record, a setting or a mapping with ``trace``,
    ``cluster`` and optionally ``jobs``, ``hardware``, ``arrival_scale``): ``cluster03[:2000] on
    n64g8``, ``cluster10 on n32g8, arrivals ×0.005``, ... (tables and figures share it)."""
    trace = str(setting["trace"])
    name = trace.split(":", 1)[1] if ":" in trace else Path(trace).name
    if setting.get("jobs") is not None:
        name += f"[:{setting['jobs']}]"
    name += f" on {setting['cluster']}"
    if setting.get("hardware", "default") not in (None, "default"):
        name += f", hardware {setting['hardware']}"
    if setting.get("arrival_scale") not in (None, 1.0):
        name += f", arrivals ×{setting['arrival_scale']:g}"
    return name


def _slug(text: str) -> str:
    return _SLUG.sub("_", text).strip("_") or "x"


@dataclass(frozen=True)
class Run:
    """One simulation of a study.

    Attributes:
        trace: Canonical bundled name or trace file.
        cluster: Topology preset (``auto`` already resolved).
        hardware: Hardware profile name.
        policy: Registered policy name.
        abnormal: Abnormality profile name.
        seed: Seed of the health timeline and the policy.
        jobs: First ``jobs`` jobs of the trace (``None`` = all).
        arrival_scale: Factor on every arrival time.
        sim: Sorted ``(field, value)`` pairs of :class:`~crop_gym.sim.SimConfig`.
    """

    trace: str
    cluster: str
    hardware: str
    policy: str
    abnormal: str
    seed: int
    jobs: int | None
    arrival_scale: float
    sim: tuple[tuple[str, Any], ...]

    def coordinates(self) -> dict[str, Any]:
        """The run's grid coordinates as a JSON-ready mapping (``sim`` a table)."""
        out = {name: getattr(self, name) for name in COORDINATES}
        out["sim"] = {k: _finite_or_none(v) for k, v in self.sim}
        return out

    @property
    def setting(self) -> tuple[Any, ...]:
        """Every coordinate but the seed: the group a table's interval is taken over."""
        return tuple(
            json.dumps(v, sort_keys=True) if isinstance(v, dict) else v
            for k, v in self.coordinates().items()
            if k != "seed"
        )

    @property
    def run_id(self) -> str:
        """Stable id: a readable prefix and 10 hex digits of the SHA-256 of every coordinate."""
        canonical = json.dumps(self.coordinates(), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:10]
        trace = self.trace.split(":", 1)[1] if ":" in self.trace else Path(self.trace).stem
        parts = (trace, self.cluster, self.hardware, self.policy, self.abnormal, f"s{self.seed}")
        return "-".join(_slug(p) for p in parts) + f"-{digest}"


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and v in (float("inf"), float("-inf")) else v


def expand(spec: StudySpec) -> list[Run]:
    """Every run of ``spec``, trace-major (trace, cluster, hardware, abnormal, seed, policy).

    Policies vary fastest, so a partial study has compared every policy on the same settings.
    """
    from crop_gym.sim_cli import default_cluster

    runs = []
    for trace in spec.traces:
        clusters = list(
            dict.fromkeys(default_cluster(trace) if c == AUTO_CLUSTER else c for c in spec.clusters)
        )
        for cluster, hardware, abnormal, seed, policy in itertools.product(
            clusters, spec.hardware, spec.abnormal, spec.seeds, spec.policies
        ):
            runs.append(
                Run(
                    trace=trace,
                    cluster=cluster,
                    hardware=hardware,
                    policy=policy,
                    abnormal=abnormal,
                    seed=seed,
                    jobs=spec.jobs,
                    arrival_scale=spec.arrival_scale,
                    sim=spec.sim,
                )
            )
    return runs
