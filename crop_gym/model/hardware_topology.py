"""Hardware profiles applied to topologies: link levels, GPU types and heterogeneous clusters.

A *hardware spec* is what scenario files, the environments' ``hardware=`` and ``--hardware`` take:

* a bundled profile name or a profile file (:func:`crop_gym.model.hardware.get_hardware`);
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
the added type's at the middle knot of a measured curve (local batch :data:`SPEED_LOCAL_BATCH` for an
affine one). A model whose speed ratio differs from
that mean is off by the difference on the added type's GPUs.

The default spec :data:`DEFAULT_HARDWARE` is the model zoo and the presets' own links (they were
fitted to the same data), so it returns the preset itself: every default stays bit-identical.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from crop_gym.errors import ConfigError
from crop_gym.model.hardware import HardwareProfile, bundled_hardware, get_hardware
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import Topology, make_topology

__all__ = [
    "DEFAULT_HARDWARE",
    "SPEED_LOCAL_BATCH",
    "ClusterHardware",
    "apply_hardware",
    "combine_profiles",
    "hardware_files",
    "resolve_hardware",
    "spec_parts",
]

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
