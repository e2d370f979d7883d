"""Hardware profiles: the measured or fitted constants of one kind of cluster, in one typed record.

A profile says what a cluster's hardware does to the iteration-time model of
:mod:`crop_gym.model.timing`:

* the link levels from a GPU upwards (``gpu``: a GPU's link into its node's fabric, ``nic``: the
  node's network card into the first switch, then any upper switch levels), each with a bandwidth
  (bytes/s per direction) and a latency (s);
* the node fabric ``F`` shared by a node's GPUs, how far co-located GPUs share the network card
  (ν), the compute slowdown per co-located GPU (κ), a per-step latency (λ), the overlap of
  backward compute with the all-reduce (φ_t, φ_c), how the ring's latency adds up (``latency``:
  ``"max"`` or over its ``"hops"``, each slowed by its node's co-located GPUs, χ), the gradient
  bucket that cannot overlap (β) and the single-replica overhead of a 1-GPU step (δ) — every one
  "off" unless given (:class:`~crop_gym.model.timing.PerfConfig` has the formulas);
* per (model, GPU type) compute curves (affine ``t0 + per_sample · b`` or a knot table), per-model
  gradient bytes where a fit found the zoo's size wrong, per-model values of κ, χ and δ (a model
  without one takes the profile's shared value), and the relative speeds of GPU types;
* a citation (where the constants come from) and, for fitted profiles, the fit's figures.

Profiles are JSON or TOML files (``crop_gym/data/hardware/*.json`` are bundled); :func:`get_hardware`
takes a bundled name or a path. Bad input is refused with one line naming the file and the field.

**Profiles applied to topologies.** A *hardware spec* is what scenario files, the environments'
``hardware=`` and ``--hardware`` take (:func:`resolve_hardware`):

* a bundled profile name or a profile file (:func:`get_hardware`);
* several of them joined by ``+`` (``"dgx-a100+azure-v100"``): a **heterogeneous** cluster. The
  first profile is the reference: its links, model options (:class:`PerfConfig`), gradient sizes
  and GPU type (speed 1). Each later profile adds its GPU type, whose servers form the next equal
  contiguous block of the topology's servers (DFS order, so whole switches where the sizes allow).

:func:`apply_hardware` rebuilds a topology with a profile's links: a GPU's link gets the ``gpu``
level, a server's uplink the ``nic`` level, a switch's uplink the profile's next level if it has one,
else the topology's own bandwidth scaled by (profile NIC / the topology's fastest server uplink) —
the topology keeps its oversubscription — and the NIC latency. The shape (servers, GPUs per server)
is the topology's. The result carries the profile (:attr:`Topology.hardware`), from which
:func:`crop_gym.model.timing.model_constants` takes every job's gradient bytes and compute.

**Approximation on heterogeneous clusters.** The placement facts hold one model-independent slowdown
per placement (``max σ_g / speed_g``: the slowest GPU sets the pace). So a GPU type's speed is one
number relative to the reference type (:attr:`HardwareProfile.gpu_speeds`); for a ``+`` mix it is
the geometric mean, over the added profile's fitted models, of the reference's compute time over
the added type's at the middle knot of a measured curve (local batch :data:`SPEED_LOCAL_BATCH` for
an affine one). A model whose speed ratio differs from that mean is off by the difference on the
added type's GPUs.

The default spec :data:`DEFAULT_HARDWARE` is the model zoo and the presets' own links (they were
fitted to the same data), so it returns the preset itself: every default stays bit-identical.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from crop_gym.errors import ConfigError, check_int, check_real
from crop_gym.io import parse_mapping, read_mapping
from crop_gym.model.jobs import get_model
from crop_gym.model.timing import ALLREDUCE_ALGORITHMS, PerfConfig, compute_curve
from crop_gym.model.topology import Topology, build_tree, make_topology

__all__ = [
    "BUNDLED_DIR",
    "DEFAULT_HARDWARE",
    "HARDWARE_PROFILES",
    "SPEED_LOCAL_BATCH",
    "ClusterHardware",
    "ComputeCurve",
    "HardwareProfile",
    "LinkLevel",
    "apply_hardware",
    "bundled_hardware",
    "combine_profiles",
    "get_hardware",
    "hardware_files",
    "load_hardware",
    "resolve_hardware",
    "spec_parts",
]

#: Package folder of the bundled profiles (``<name>.json``).
BUNDLED_DIR = "data/hardware"
_KEYS = {
    "name",
    "citation",
    "gpus_per_node",
    "gpu_type",
    "gpu_speeds",
    "allreduce",
    "links",
    "fabric_bandwidth",
    "nic_sharing",
    "compute_sharing",
    "model_compute_sharing",
    "compute_saturation",
    "model_compute_saturation",
    "step_latency",
    "latency",
    "latency_inflation",
    "model_latency_inflation",
    "bucket_bytes",
    "replica_overhead",
    "model_replica_overhead",
    "latency_overlap",
    "overlap",
    "overlap_cap",
    "compute",
    "grad_bytes",
    "fit",
}


@dataclass(frozen=True, slots=True)
class LinkLevel:
    """One level of links, from a GPU upwards.

    Attributes:
        level: ``"gpu"`` (GPU into the node fabric), ``"nic"`` (node into the first switch) or the
            name of an upper switch level.
        bandwidth: Bytes/s per direction, > 0 and finite.
        latency: Seconds, >= 0.
    """

    level: str
    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True, slots=True)
class ComputeCurve:
    """Per-GPU compute time of one iteration as a function of the local batch ``b``.

    Either affine, ``t0 + per_sample · b`` (no knots), or piecewise linear through knots and
    extended linearly beyond them (:func:`crop_gym.model.timing.compute_curve`).

    Attributes:
        t0: Fixed seconds (affine curve).
        per_sample: Seconds per local sample (affine curve).
        local_batch: Increasing knot batches (empty, or >= 2 knots).
        time: Seconds at the knots (>= 0).
    """

    t0: float = 0.0
    per_sample: float = 0.0
    local_batch: tuple[float, ...] = ()
    time: tuple[float, ...] = ()

    @classmethod
    def affine(cls, t0: float, per_sample: float) -> ComputeCurve:
        """The curve ``t0 + per_sample · b``."""
        return cls(float(t0), float(per_sample))

    @property
    def is_affine(self) -> bool:
        """Whether the curve is ``t0 + per_sample · b`` (no knots)."""
        return not self.local_batch

    def __call__(self, local_batch: Any) -> Any:
        """Seconds at ``local_batch`` (scalar or array)."""
        if self.is_affine:
            return self.t0 + self.per_sample * np.asarray(local_batch, dtype=np.float64)
        return compute_curve(self.local_batch, self.time, local_batch)

    def to_mapping(self) -> dict[str, Any]:
        """``{"t0", "per_sample"}`` for an affine curve, else ``{"local_batch", "time"}``."""
        if self.is_affine:
            return {"t0": self.t0, "per_sample": self.per_sample}
        return {"local_batch": list(self.local_batch), "time": list(self.time)}


@dataclass(frozen=True, eq=False)
class HardwareProfile:
    """A cluster's hardware constants (see the module docstring). Build with :meth:`from_mapping`
    or :func:`get_hardware`; every field is validated.

    Attributes:
        name: Profile name.
        citation: Where the constants come from.
        gpus_per_node: GPUs per node (>= 1).
        gpu_type: The profile's GPU type (a key of ``gpu_speeds``).
        gpu_speeds: Relative speed per GPU type (> 0); used for models without a curve for a type.
        allreduce: ``"ring"`` or ``"hierarchical"``.
        links: Link levels from the GPU upwards; at least ``gpu`` and ``nic``.
        fabric_bandwidth: ``F`` bytes/s shared by a node's GPUs (``inf``: off).
        nic_sharing: ν in [0, 1].
        compute_sharing: κ >= 0 (every model without its own value).
        model_compute_sharing: ``{model: κ}`` overriding ``compute_sharing`` per model.
        compute_saturation: κ_max >= 0, the most compute sharing can slow a job (every model
            without its own value; ``inf``: no saturation).
        model_compute_saturation: ``{model: κ_max}``.
        step_latency: λ >= 0 s.
        latency: ``"max"`` or ``"hops"`` (ring only).
        latency_inflation: χ >= 0 (every model without its own value).
        model_latency_inflation: ``{model: χ}``.
        bucket_bytes: β >= 0 bytes (0: off).
        replica_overhead: δ >= 0 s (every model without its own value).
        model_replica_overhead: ``{model: δ}``.
        latency_overlap: ψ in [0, 1], the share of the compute left after the bandwidth overlap
            that hides the ring's hop latency (``latency="hops"`` only; 0: off).
        overlap: φ_t in [0, 1].
        overlap_cap: φ_c in [0, 1], or ``None`` (= ``overlap``).
        compute: ``{model: {gpu_type: ComputeCurve}}``.
        grad_bytes: ``{model: bytes}`` overriding the zoo's gradient size.
        fit: Free-form provenance of a fitted profile (errors, parameter counts).
    """

    name: str
    citation: str
    gpus_per_node: int
    gpu_type: str
    links: tuple[LinkLevel, ...]
    gpu_speeds: Mapping[str, float] = field(default_factory=dict)
    allreduce: str = "hierarchical"
    fabric_bandwidth: float = math.inf
    nic_sharing: float = 0.0
    compute_sharing: float = 0.0
    step_latency: float = 0.0
    overlap: float = 0.0
    overlap_cap: float | None = None
    model_compute_sharing: Mapping[str, float] = field(default_factory=dict)
    compute_saturation: float = math.inf
    model_compute_saturation: Mapping[str, float] = field(default_factory=dict)
    latency: str = "max"
    latency_inflation: float = 0.0
    model_latency_inflation: Mapping[str, float] = field(default_factory=dict)
    bucket_bytes: float = 0.0
    replica_overhead: float = 0.0
    model_replica_overhead: Mapping[str, float] = field(default_factory=dict)
    latency_overlap: float = 0.0
    compute: Mapping[str, Mapping[str, ComputeCurve]] = field(default_factory=dict)
    grad_bytes: Mapping[str, float] = field(default_factory=dict)
    fit: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        speeds = dict(self.gpu_speeds) or {self.gpu_type: 1.0}
        object.__setattr__(self, "gpu_speeds", MappingProxyType(speeds))
        object.__setattr__(
            self,
            "compute",
            MappingProxyType({m: MappingProxyType(dict(c)) for m, c in self.compute.items()}),
        )
        object.__setattr__(self, "grad_bytes", MappingProxyType(dict(self.grad_bytes)))
        for name in (
            "model_compute_sharing",
            "model_compute_saturation",
            "model_latency_inflation",
            "model_replica_overhead",
        ):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "fit", MappingProxyType(dict(self.fit)))
        object.__setattr__(self, "links", tuple(self.links))
        _validate(self, self.name or "hardware profile")

    # ------------------------------------------------------------------ use
    def perf(self) -> PerfConfig:
        """The model options of this hardware."""
        return PerfConfig(
            allreduce=self.allreduce,
            overlap=self.overlap,
            overlap_cap=self.overlap_cap,
            fabric_bandwidth=self.fabric_bandwidth,
            nic_sharing=self.nic_sharing,
            compute_sharing=self.compute_sharing,
            compute_saturation=self.compute_saturation,
            step_latency=self.step_latency,
            latency=self.latency,
            latency_inflation=self.latency_inflation,
            bucket_bytes=self.bucket_bytes,
            replica_overhead=self.replica_overhead,
            latency_overlap=self.latency_overlap,
        )

    def topology(self, fanouts: int | Sequence[int], *, name: str | None = None) -> Topology:
        """A regular tree of this hardware.

        Args:
            fanouts: Nodes under one switch (an int, for a profile of two link levels), or one
                fan-out per switch level above the nodes, root first, ending with nodes per switch
                (``len(links) - 1`` entries).
            name: Topology name (default the profile's).
        """
        fans = [int(fanouts)] if isinstance(fanouts, (int, np.integer)) else list(fanouts)
        if len(fans) != len(self.links) - 1:
            raise ConfigError(
                f"hardware {self.name}: fanouts needs {len(self.links) - 1} entries (one per "
                f"switch level above the nodes), got {len(fans)}"
            )
        upward = list(self.links)[::-1]  # root level first, the GPU's link last
        return build_tree(
            [*fans, self.gpus_per_node],
            [lv.bandwidth for lv in upward],
            [lv.latency for lv in upward],
            name=name or self.name,
        )

    def curve(self, model: str, gpu_type: str | None = None) -> ComputeCurve | None:
        """The compute curve of ``model`` on ``gpu_type`` (default the profile's), if the profile has one."""
        return self.compute.get(model, {}).get(gpu_type or self.gpu_type)

    def compute_time(self, model: str, local_batch: Any, gpu_type: str | None = None) -> Any:
        """Per-GPU compute seconds of ``model`` at ``local_batch`` on ``gpu_type``.

        A curve of that type is used as is; else a curve of the profile's own type scaled by the
        relative speeds; else the zoo's affine curve (reference GPU) divided by the type's speed.
        """
        gtype = gpu_type or self.gpu_type
        if gtype not in self.gpu_speeds:
            raise ConfigError(
                f"hardware {self.name}: unknown GPU type {gtype!r}; types: "
                + ", ".join(sorted(self.gpu_speeds))
            )
        own = self.curve(model, gtype)
        if own is not None:
            return own(local_batch)
        base = self.curve(model)
        if base is not None:
            return base(local_batch) * (self.gpu_speeds[self.gpu_type] / self.gpu_speeds[gtype])
        spec = get_model(model)
        zoo = ComputeCurve.affine(spec.t0, spec.per_sample)
        return zoo(local_batch) / self.gpu_speeds[gtype]

    def model_grad_bytes(self, model: str) -> float:
        """Gradient bytes of ``model`` on this hardware (the profile's override, else the zoo's)."""
        return float(self.grad_bytes.get(model, get_model(model).grad_bytes))

    def model_kappa(self, model: str) -> float:
        """Compute sharing κ of ``model`` (the profile's per-model value, else the shared one)."""
        return float(self.model_compute_sharing.get(model, self.compute_sharing))

    def model_kappa_max(self, model: str) -> float:
        """Compute saturation κ_max of ``model`` (the per-model value, else the shared one)."""
        return float(self.model_compute_saturation.get(model, self.compute_saturation))

    def model_chi(self, model: str) -> float:
        """Latency inflation χ of ``model`` (the profile's per-model value, else the shared one)."""
        return float(self.model_latency_inflation.get(model, self.latency_inflation))

    def model_delta(self, model: str) -> float:
        """Single-replica overhead δ of ``model`` (per-model value, else the shared one)."""
        return float(self.model_replica_overhead.get(model, self.replica_overhead))

    # ------------------------------------------------------------ serialise
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as :meth:`to_mapping` (the fields' read-only views do not pickle)."""
        return (_unpickle, (self.to_mapping(),))

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-able mapping that :meth:`from_mapping` reads back (``inf`` fabric omitted)."""
        out: dict[str, Any] = {
            "name": self.name,
            "citation": self.citation,
            "gpus_per_node": self.gpus_per_node,
            "gpu_type": self.gpu_type,
            "gpu_speeds": dict(self.gpu_speeds),
            "allreduce": self.allreduce,
            "links": [
                {"level": lv.level, "bandwidth": lv.bandwidth, "latency": lv.latency}
                for lv in self.links
            ],
            "nic_sharing": self.nic_sharing,
            "compute_sharing": self.compute_sharing,
            "step_latency": self.step_latency,
            "overlap": self.overlap,
        }
        if math.isfinite(self.fabric_bandwidth):
            out["fabric_bandwidth"] = self.fabric_bandwidth
        if self.overlap_cap is not None:
            out["overlap_cap"] = self.overlap_cap
        out["compute"] = {
            m: {t: c.to_mapping() for t, c in by.items()} for m, by in self.compute.items()
        }
        out["grad_bytes"] = dict(self.grad_bytes)
        if self.model_compute_sharing:
            out["model_compute_sharing"] = dict(self.model_compute_sharing)
        # The newer terms are written only when used, so older profiles round-trip unchanged.
        if self.latency != "max":
            out["latency"] = self.latency
        for name in ("latency_inflation", "bucket_bytes", "replica_overhead", "latency_overlap"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if math.isfinite(self.compute_saturation):
            out["compute_saturation"] = self.compute_saturation
        for name in (
            "model_compute_saturation",
            "model_latency_inflation",
            "model_replica_overhead",
        ):
            if getattr(self, name):
                out[name] = dict(getattr(self, name))
        if self.fit:
            out["fit"] = dict(self.fit)
        return out

    def to_json(self) -> str:
        """:meth:`to_mapping` as indented JSON text."""
        return json.dumps(self.to_mapping(), indent=2) + "\n"

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str = "hardware profile"
    ) -> HardwareProfile:
        """Build a profile from a parsed JSON/TOML table.

        Raises:
            ConfigError: One line naming ``source`` and the field, on an unknown or missing field
                or a value outside its range.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a hardware profile must be a table")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise ConfigError(
                f"{source}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_KEYS))})"
            )
        for key in ("name", "gpus_per_node", "gpu_type", "links"):
            if key not in data:
                raise ConfigError(f"{source}: missing field {key!r}")
        links_raw = data["links"]
        if not isinstance(links_raw, list):
            raise ConfigError(f"{source}: field 'links' must be a list of tables")
        links = []
        for i, lv in enumerate(links_raw):
            where = f"{source}: links[{i}]"
            if not isinstance(lv, Mapping) or set(lv) - {"level", "bandwidth", "latency"}:
                raise ConfigError(f"{where} must be a table of level, bandwidth, latency")
            if "bandwidth" not in lv:
                raise ConfigError(f"{where}: missing field 'bandwidth'")
            links.append(
                LinkLevel(
                    level=_text(lv.get("level", ""), f"{where}.level"),
                    bandwidth=check_real(
                        f"{where}.bandwidth",
                        lv["bandwidth"],
                        0,
                        math.inf,
                        low_inclusive=False,
                        high_inclusive=False,
                    ),
                    latency=check_real(f"{where}.latency", lv.get("latency", 0.0), 0, 1.0),
                )
            )
        compute: dict[str, dict[str, ComputeCurve]] = {}
        comp_raw = data.get("compute", {})
        if not isinstance(comp_raw, Mapping):
            raise ConfigError(
                f"{source}: field 'compute' must be a table {{model: {{gpu_type: curve}}}}"
            )
        for model, by_type in comp_raw.items():
            if not isinstance(by_type, Mapping):
                raise ConfigError(f"{source}: compute.{model} must be a table {{gpu_type: curve}}")
            compute[model] = {
                t: _curve(c, f"{source}: compute.{model}.{t}") for t, c in by_type.items()
            }
        grad_raw = data.get("grad_bytes", {})
        if not isinstance(grad_raw, Mapping):
            raise ConfigError(f"{source}: field 'grad_bytes' must be a table {{model: bytes}}")
        grad = {
            m: check_real(f"{source}: grad_bytes.{m}", v, 0, 1e15, low_inclusive=False)
            for m, v in grad_raw.items()
        }
        kappa_raw = data.get("model_compute_sharing", {})
        if not isinstance(kappa_raw, Mapping):
            raise ConfigError(
                f"{source}: field 'model_compute_sharing' must be a table {{model: kappa}}"
            )
        kappas = {
            m: check_real(f"{source}: model_compute_sharing.{m}", v, 0, 1e3)
            for m, v in kappa_raw.items()
        }
        per_model = {
            name: _per_model(data.get(name, {}), f"{source}: {name}", high)
            for name, high in (
                ("model_compute_saturation", 1e3),
                ("model_latency_inflation", 1e4),
                ("model_replica_overhead", 1e3),
            )
        }
        saturation = data.get("compute_saturation")
        speeds_raw = data.get("gpu_speeds", {})
        if not isinstance(speeds_raw, Mapping):
            raise ConfigError(f"{source}: field 'gpu_speeds' must be a table {{gpu_type: speed}}")
        speeds = {
            t: check_real(f"{source}: gpu_speeds.{t}", v, 0, 1e6, low_inclusive=False)
            for t, v in speeds_raw.items()
        }
        fabric = data.get("fabric_bandwidth")
        cap = data.get("overlap_cap")
        fit = data.get("fit", {})
        if not isinstance(fit, Mapping):
            raise ConfigError(f"{source}: field 'fit' must be a table")
        kwargs: dict[str, Any] = dict(
            name=_text(data["name"], f"{source}: name"),
            citation=_text(data.get("citation", ""), f"{source}: citation", empty=True),
            gpus_per_node=check_int(f"{source}: gpus_per_node", data["gpus_per_node"], 1, 4096),
            gpu_type=_text(data["gpu_type"], f"{source}: gpu_type"),
            gpu_speeds=speeds,
            allreduce=_text(data.get("allreduce", "hierarchical"), f"{source}: allreduce"),
            links=tuple(links),
            fabric_bandwidth=math.inf
            if fabric is None
            else check_real(
                f"{source}: fabric_bandwidth", fabric, 0, math.inf, low_inclusive=False
            ),
            nic_sharing=check_real(f"{source}: nic_sharing", data.get("nic_sharing", 0.0), 0, 1),
            compute_sharing=check_real(
                f"{source}: compute_sharing", data.get("compute_sharing", 0.0), 0, 1e3
            ),
            step_latency=check_real(
                f"{source}: step_latency", data.get("step_latency", 0.0), 0, 1e3
            ),
            overlap=check_real(f"{source}: overlap", data.get("overlap", 0.0), 0, 1),
            overlap_cap=None if cap is None else check_real(f"{source}: overlap_cap", cap, 0, 1),
            model_compute_sharing=kappas,
            compute_saturation=math.inf
            if saturation is None
            else check_real(f"{source}: compute_saturation", saturation, 0, 1e3),
            latency=_text(data.get("latency", "max"), f"{source}: latency"),
            latency_inflation=check_real(
                f"{source}: latency_inflation", data.get("latency_inflation", 0.0), 0, 1e4
            ),
            bucket_bytes=check_real(
                f"{source}: bucket_bytes", data.get("bucket_bytes", 0.0), 0, 1e15
            ),
            replica_overhead=check_real(
                f"{source}: replica_overhead", data.get("replica_overhead", 0.0), 0, 1e3
            ),
            latency_overlap=check_real(
                f"{source}: latency_overlap", data.get("latency_overlap", 0.0), 0, 1
            ),
            **per_model,
            compute=compute,
            grad_bytes=grad,
            fit=fit,
        )
        try:
            return cls(**kwargs)
        except ConfigError as e:  # a cross-field check: say which file
            raise ConfigError(f"{source}: {e}") from None


def _unpickle(data: Mapping[str, Any]) -> HardwareProfile:
    return HardwareProfile.from_mapping(data, f"hardware profile {data.get('name')!r}")


def _text(value: Any, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _per_model(raw: Any, where: str, high: float) -> dict[str, float]:
    """A ``{model: value}`` table of values in ``[0, high]``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a table {{model: value}}")
    return {m: check_real(f"{where}.{m}", v, 0, high) for m, v in raw.items()}


def _curve(raw: Any, where: str) -> ComputeCurve:
    """A curve from ``{t0, per_sample}`` or ``{local_batch: [...], time: [...]}``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a table {{t0, per_sample}} or {{local_batch, time}}")
    if set(raw) == {"t0", "per_sample"}:
        return ComputeCurve.affine(
            check_real(f"{where}.t0", raw["t0"], 0, 1e6),
            check_real(f"{where}.per_sample", raw["per_sample"], 0, 1e6),
        )
    if set(raw) == {"local_batch", "time"}:
        b, t = raw["local_batch"], raw["time"]
        if not isinstance(b, list) or not isinstance(t, list) or len(b) != len(t) or len(b) < 2:
            raise ConfigError(f"{where}: local_batch and time must be lists of equal length >= 2")
        bb = [check_real(f"{where}.local_batch[{i}]", v, 0, 1e9) for i, v in enumerate(b)]
        tt = [check_real(f"{where}.time[{i}]", v, 0, 1e6) for i, v in enumerate(t)]
        if any(y <= x for x, y in itertools.pairwise(bb)):
            raise ConfigError(f"{where}.local_batch must be strictly increasing")
        return ComputeCurve(local_batch=tuple(bb), time=tuple(tt))
    raise ConfigError(f"{where} must have fields t0, per_sample or local_batch, time")


def _validate(p: HardwareProfile, where: str) -> None:
    """Cross-field checks (the per-field ranges are checked when reading)."""
    if p.allreduce not in ALLREDUCE_ALGORITHMS:
        raise ConfigError(
            f"{where}: allreduce={p.allreduce!r} is not one of {', '.join(ALLREDUCE_ALGORITHMS)}"
        )
    if len(p.links) < 2 or p.links[0].level != "gpu" or p.links[1].level != "nic":
        raise ConfigError(f"{where}: links must start with levels 'gpu' then 'nic' (GPU upwards)")
    for lv in p.links:
        if not (lv.bandwidth > 0 and math.isfinite(lv.bandwidth)) or not lv.latency >= 0:
            raise ConfigError(f"{where}: link level {lv.level!r} needs bandwidth > 0, latency >= 0")
    if p.gpu_type not in p.gpu_speeds:
        raise ConfigError(f"{where}: gpu_type {p.gpu_type!r} is not a key of gpu_speeds")
    for model, by_type in p.compute.items():
        for t in by_type:
            if t not in p.gpu_speeds:
                raise ConfigError(f"{where}: compute.{model}.{t}: GPU type not in gpu_speeds")
    p.perf()  # the model options' own ranges


def load_hardware(path: str | os.PathLike[str]) -> HardwareProfile:
    """Read a profile from a ``.json`` or ``.toml`` file (one-line errors naming file and field)."""
    p = Path(path)
    if p.suffix.lower() not in (".json", ".toml"):
        raise ConfigError(f"{p}: hardware profile must be a .json or .toml file")
    return HardwareProfile.from_mapping(read_mapping(p, what="hardware profile"), str(p))


def bundled_hardware() -> tuple[str, ...]:
    """Names of the bundled profiles."""
    folder = resources.files("crop_gym").joinpath(BUNDLED_DIR)
    return tuple(sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".json")))


def get_hardware(name_or_path: str | os.PathLike[str]) -> HardwareProfile:
    """A bundled profile by name, or a profile file by path.

    Raises:
        ConfigError: If the name is neither bundled nor an existing file (the message lists the
            bundled names), or the file is malformed.
    """
    text = str(name_or_path)
    if text in bundled_hardware():
        source = f"crop_gym/{BUNDLED_DIR}/{text}.json"
        raw = resources.files("crop_gym").joinpath(f"{BUNDLED_DIR}/{text}.json").read_text()
        return HardwareProfile.from_mapping(parse_mapping(raw, "json", source), source)
    if os.path.exists(text) or text.endswith((".json", ".toml")):
        return load_hardware(text)
    raise ConfigError(
        f"unknown hardware {text!r}: not a file, and not a bundled profile "
        f"({', '.join(bundled_hardware())})"
    )


# ----------------------------------------------------------------------------- on topologies
#: The profile equal to the package's calibration (the model zoo and the presets' links).
DEFAULT_HARDWARE = "a100-elasticflow"
#: Local batch at which a ``+`` mix compares two profiles' compute curves.
SPEED_LOCAL_BATCH = 32.0


@dataclass(frozen=True, eq=False)
class ClusterHardware:
    """A resolved hardware spec (immutable).

    Attributes:
        spec: The spec as given.
        profile: The profile (for a ``+`` mix, the reference with every added GPU type).
        gpu_types: GPU type of each contiguous block of servers (one entry: homogeneous).
    """

    spec: str
    profile: HardwareProfile
    gpu_types: tuple[str, ...]

    @property
    def is_default(self) -> bool:
        """Whether this is :data:`DEFAULT_HARDWARE` (the zoo and the presets as they are)."""
        return self.spec == DEFAULT_HARDWARE

    def perf(self, allreduce: str = "", overlap: float | None = None) -> PerfConfig:
        """The profile's model options, with ``allreduce`` (if given) and ``overlap`` (if not
        ``None``) overriding its own."""
        perf = self.profile.perf()
        if allreduce:
            perf = dataclasses.replace(perf, allreduce=allreduce)
        if overlap is not None:
            perf = dataclasses.replace(perf, overlap=overlap)
        return perf

    def topology(self, cluster: str | Topology) -> Topology:
        """``cluster`` (a preset name or a topology) on this hardware (cached per preset)."""
        if isinstance(cluster, Topology):
            return cluster if self.is_default else apply_hardware(cluster, self)
        if self.is_default:
            return make_topology(cluster)
        return _preset_on(cluster, self)


@lru_cache(maxsize=64)
def _preset_on(cluster: str, hardware: ClusterHardware) -> Topology:
    """A preset on a resolved hardware: a pure function of two immutable inputs."""
    return apply_hardware(make_topology(cluster), hardware)


def resolve_hardware(spec: str | ClusterHardware | HardwareProfile) -> ClusterHardware:
    """Resolve a hardware spec (see the module docstring); bundled specs are resolved once.

    Raises:
        ConfigError: One line for an unknown name, a malformed profile file, a GPU type given
            twice in a mix, or an added profile without compute curves.
    """
    if isinstance(spec, ClusterHardware):
        return spec
    if isinstance(spec, HardwareProfile):
        return ClusterHardware(spec.name, spec, (spec.gpu_type,))
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"hardware={spec!r} must be a profile name or file (NAME|PATH[+...])")
    parts = spec_parts(spec)
    if all(p in bundled_hardware() for p in parts):
        return _bundled(spec)
    return _resolve(spec, parts)


def hardware_files(spec: str | None) -> list[str]:
    """The parts of a spec that are not bundled names (profile files: a command's inputs)."""
    return [p for p in spec_parts(spec or "") if p and p not in bundled_hardware()]


def spec_parts(spec: str) -> list[str]:
    """The profiles of a spec: split at ``+`` unless the whole spec is an existing file."""
    return [spec] if "+" not in spec or os.path.exists(spec) else spec.split("+")


@lru_cache(maxsize=32)
def _bundled(spec: str) -> ClusterHardware:
    return _resolve(spec, spec_parts(spec))


def _resolve(spec: str, parts: Sequence[str]) -> ClusterHardware:
    profiles = [get_hardware(p.strip()) for p in parts]
    if len(profiles) == 1:
        return ClusterHardware(spec, profiles[0], (profiles[0].gpu_type,))
    return ClusterHardware(
        spec, combine_profiles(profiles[0], *profiles[1:]), tuple(p.gpu_type for p in profiles)
    )


def combine_profiles(base: HardwareProfile, *others: HardwareProfile) -> HardwareProfile:
    """``base`` with the GPU types of ``others`` added (their curves and a relative speed).

    The speed of an added type is ``base``'s speed of its own type times the geometric mean, over
    the added profile's fitted models, of ``base.compute_time / other's curve`` at
    :data:`SPEED_LOCAL_BATCH` (``base`` falls back to the zoo for a model it has no curve of).

    Raises:
        ConfigError: If a GPU type comes twice or an added profile has no compute curve.
    """
    speeds = dict(base.gpu_speeds)
    compute = {m: dict(c) for m, c in base.compute.items()}
    for other in others:
        gtype = other.gpu_type
        if gtype in speeds:
            raise ConfigError(
                f"hardware {base.name}+{other.name}: GPU type {gtype!r} appears twice in the mix"
            )
        models = sorted(m for m in other.compute if other.curve(m) is not None)
        if not models:
            raise ConfigError(
                f"hardware {other.name}: no compute curve of its GPU type {gtype!r} to compare "
                f"its speed with {base.name}'s"
            )
        logs = []
        for m in models:
            # A measured curve is compared at its middle knot (inside the measured range).
            knots = other.curve(m).local_batch  # type: ignore[union-attr]
            b = knots[len(knots) // 2] if knots else SPEED_LOCAL_BATCH
            mine, theirs = float(base.compute_time(m, b)), float(other.compute_time(m, b))
            if mine > 0 and theirs > 0:
                logs.append(math.log(mine / theirs))
        if not logs:
            raise ConfigError(
                f"hardware {other.name}: no positive compute time to compare its speed with "
                f"{base.name}'s"
            )
        speeds[gtype] = speeds[base.gpu_type] * math.exp(sum(logs) / len(logs))
        for m in models:
            compute.setdefault(m, {})[gtype] = other.compute[m][gtype]
    names = "+".join(p.name for p in (base, *others))
    cites = " | ".join(p.citation for p in (base, *others) if p.citation)
    return dataclasses.replace(
        base, name=names, citation=cites, gpu_speeds=speeds, compute=compute, fit={}
    )


def apply_hardware(
    topology: Topology,
    hardware: ClusterHardware | HardwareProfile | str,
    gpu_types: Sequence[str] | None = None,
) -> Topology:
    """``topology`` rebuilt with a profile's links and GPU types (see the module docstring).

    Args:
        topology: The cluster's shape (its own GPU speeds, e.g. a preset's slower servers, are
            multiplied by the GPU types' relative speeds).
        hardware: A resolved spec, a profile or a spec string.
        gpu_types: GPU type of each contiguous block of servers (default the spec's; a profile:
            its own type everywhere). Types must be keys of the profile's ``gpu_speeds``.

    Raises:
        ConfigError: For an unknown GPU type or more blocks than servers.
    """
    hw = resolve_hardware(hardware)
    prof = hw.profile
    types = tuple(gpu_types) if gpu_types is not None else hw.gpu_types
    for t in types:
        if t not in prof.gpu_speeds:
            raise ConfigError(
                f"hardware {prof.name}: unknown GPU type {t!r}; types: {', '.join(prof.gpu_speeds)}"
            )
    if not 1 <= len(types) <= topology.num_servers:
        raise ConfigError(
            f"hardware {prof.name}: {len(types)} GPU type block(s) for {topology.num_servers} servers"
        )
    g = topology.graph.copy()
    names, parent = topology.node_names, topology.parent
    # Level of the link above each node: 0 for a GPU, 1 for a server, 1 + the highest child's
    # level for a switch (nodes are in preorder, so children come after their parent).
    level = np.zeros(topology.num_nodes, dtype=np.int64)
    for i in range(topology.num_nodes - 1, 0, -1):
        level[parent[i]] = max(level[parent[i]], level[i] + 1)
    nic = prof.links[1]
    scale = nic.bandwidth / float(topology.link_bw[topology.server_node].max())
    for i in range(1, topology.num_nodes):
        lv = int(level[i])
        if lv < len(prof.links):
            bw, lat = prof.links[lv].bandwidth, prof.links[lv].latency
        else:  # a switch level the profile does not describe: keep the topology's ratios
            bw, lat = float(topology.link_bw[i]) * scale, nic.latency
        edge = g.edges[names[parent[i]], names[i]]
        edge["bandwidth"], edge["latency"] = bw, lat
    ref = prof.gpu_speeds[prof.gpu_type]
    blocks = np.array_split(np.arange(topology.num_servers), len(types))
    for gtype, servers in zip(types, blocks):
        ratio = prof.gpu_speeds[gtype] / ref
        for s in servers:
            g.nodes[names[topology.server_node[s]]]["gpu_type"] = gtype
            if ratio == 1.0:
                continue
            for gpu in range(topology.server_gpu_lo[s], topology.server_gpu_hi[s]):
                g.nodes[names[topology.gpu_node[gpu]]]["speed"] = float(
                    topology.gpu_speed[gpu] * ratio
                )
    built = Topology.from_graph(g, root=names[0], name=topology.name)
    return dataclasses.replace(built, hardware=prof)


#: The hardware a study or a command may name: name → one-line description. ``default`` is the
#: simulator's own model (no override; equal to :data:`DEFAULT_HARDWARE`), the others the bundled
#: profiles (:func:`bundled_hardware`).
HARDWARE_PROFILES: dict[str, str] = {
    "default": f"the simulator's default hardware model (no override; = {DEFAULT_HARDWARE})",
    **{n: f"bundled profile crop_gym/{BUNDLED_DIR}/{n}.json" for n in bundled_hardware()},
}
