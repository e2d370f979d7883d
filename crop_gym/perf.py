"""Iteration-time model of a placed data-parallel job (DESIGN §2.4).

For a placement ``P`` (``k`` GPUs on ``s`` servers, at most ``g`` of them on one server):

* *spanned links*: the tree links whose subtree holds some but not all of ``P`` (a DFS-ordered ring
  crosses each exactly once per direction). GPU links are *intra* links; the others *inter* links.
* Contention: ``n_e`` jobs span link ``e``; each gets ``ρ_e B_e / n_e``. ``b_intra`` and ``b_inter``
  are the minima of that share over the job's spanned intra and inter links (``inf`` if none).
* Communication, ring all-reduce (DESIGN's reference)::

      C = 2(k-1)/k · M / min(b_intra, b_inter) + 2(k-1) · max(a_intra, a_inter)

* Communication, hierarchical all-reduce (intra-server reduce-scatter, inter-server ring of the
  server shards, intra-server all-gather)::

      C = 2(g-1)/g · M / b_intra + 2(s-1)/s · M / b_inter + 2(g-1) · a_intra + 2(s-1) · a_inter

  where ``a_intra`` / ``a_inter`` are the largest latencies among the spanned intra / inter links.
  Both reduce to the same ring when the job is on one server or has one GPU per server.
* Compute: ``t = max_{g in P} σ_g · t_c / speed_g``.
* Iteration time with overlap φ: ``T = (1-φ)(t + C) + φ · max(t, C)``.

Every function here is vectorised over jobs (numpy arrays of equal shape).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from crop_gym.devices import Health
from crop_gym.errors import ConfigError, check_range
from crop_gym.jobs import calibration_data
from crop_gym.topology import Topology

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "PerfConfig",
    "PlacementStats",
    "comm_time",
    "comm_time_scalar",
    "iteration_time",
    "placement_stats",
]

AllReduce = Literal["ring", "hierarchical"]
ALLREDUCE_ALGORITHMS: tuple[str, ...] = ("ring", "hierarchical")
FloatLike = Any  # float or NDArray[np.float64]
_NO_LINKS: NDArray[np.int32] = np.empty(0, dtype=np.int32)
_NO_LINKS.setflags(write=False)


def _default_allreduce() -> AllReduce:
    algo = calibration_data().get("allreduce", "ring")
    return "hierarchical" if algo == "hierarchical" else "ring"


@dataclass(frozen=True)
class PerfConfig:
    """Options of the iteration-time model.

    Attributes:
        allreduce: ``"ring"`` or ``"hierarchical"``; the default is the calibrated choice
            (docs/MODEL.md says why).
        overlap: φ in [0, 1], the fraction of communication hidden behind compute.
    """

    allreduce: str = ""
    overlap: float = 0.0

    def __post_init__(self) -> None:
        if self.allreduce == "":
            object.__setattr__(self, "allreduce", _default_allreduce())
        if self.allreduce not in ALLREDUCE_ALGORITHMS:
            raise ConfigError(
                f"allreduce={self.allreduce!r} is not one of {', '.join(ALLREDUCE_ALGORITHMS)}"
            )
        check_range("overlap", self.overlap, 0.0, 1.0)


def comm_time(
    allreduce: str,
    grad_bytes: FloatLike,
    k: FloatLike,
    g: FloatLike,
    s: FloatLike,
    b_intra: FloatLike,
    b_inter: FloatLike,
    a_intra: FloatLike,
    a_inter: FloatLike,
) -> Any:
    """All-reduce time of ``grad_bytes`` (vectorised over jobs).

    Args:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        grad_bytes: Gradient size ``M`` in bytes.
        k: GPUs of the job.
        g: Most GPUs of the job on one server.
        s: Servers spanned.
        b_intra: Bottleneck bandwidth over the spanned intra-server links (``inf`` if none).
        b_inter: Bottleneck bandwidth over the spanned inter-server links (``inf`` if none).
        a_intra: Largest latency over the spanned intra-server links (0 if none).
        a_inter: Largest latency over the spanned inter-server links (0 if none).

    Returns:
        Seconds per iteration spent in the all-reduce.
    """
    # No branch is needed: a term whose step count is 0 has an infinite bandwidth (no link spanned),
    # and 0 * (M / inf) = 0. Bandwidths are > 0 by construction.
    if allreduce == "ring":
        steps = 2.0 * (np.asarray(k, dtype=np.float64) - 1.0)
        return steps / k * (grad_bytes / np.minimum(b_intra, b_inter)) + steps * np.maximum(
            a_intra, a_inter
        )
    gf = np.asarray(g, dtype=np.float64)
    sf = np.asarray(s, dtype=np.float64)
    intra = (2.0 * (gf - 1.0) / gf) * (grad_bytes / b_intra) + 2.0 * (gf - 1.0) * a_intra
    inter = (2.0 * (sf - 1.0) / sf) * (grad_bytes / b_inter) + 2.0 * (sf - 1.0) * a_inter
    return intra + inter


def comm_time_scalar(
    allreduce: str,
    grad_bytes: float,
    k: int,
    g: int,
    s: int,
    b_intra: float,
    b_inter: float,
    a_intra: float,
    a_inter: float,
) -> float:
    """:func:`comm_time` for one job, in plain Python (no numpy overhead on the hot path)."""
    if allreduce == "ring":
        if k <= 1:
            return 0.0
        steps = 2.0 * (k - 1)
        return steps / k * grad_bytes / min(b_intra, b_inter) + steps * max(a_intra, a_inter)
    out = 0.0
    if g > 1:
        out += 2.0 * (g - 1) / g * grad_bytes / b_intra + 2.0 * (g - 1) * a_intra
    if s > 1:
        out += 2.0 * (s - 1) / s * grad_bytes / b_inter + 2.0 * (s - 1) * a_inter
    return out


def iteration_time(compute: FloatLike, comm: FloatLike, overlap: float = 0.0) -> Any:
    """``T = (1-φ)(t + C) + φ·max(t, C)`` (vectorised)."""
    if overlap == 0.0:
        return compute + comm
    return (1.0 - overlap) * (compute + comm) + overlap * np.maximum(compute, comm)


@dataclass(frozen=True, slots=True, eq=False)
class PlacementStats:
    """Contention-independent facts of one placement, computed once when it is made.

    Attributes:
        gpus: Sorted GPU indices (the DFS ring order).
        inter_links: Spanned inter-server links (their bandwidth share depends on contention).
        k: GPUs.
        g: Most GPUs on one server.
        s: Servers spanned.
        b_intra: Bottleneck ``ρ·B`` over the spanned GPU links (``inf`` if none; never shared).
        a_intra: Largest latency over spanned GPU links.
        a_inter: Largest latency over spanned inter-server links.
        slowdown: ``max σ_g / speed_g`` over the placement (multiplies the reference compute time).
        survival: Probability that no GPU or spanned link of the placement fails.
    """

    gpus: NDArray[np.int32]
    inter_links: NDArray[np.int32]
    k: int
    g: int
    s: int
    b_intra: float
    a_intra: float
    a_inter: float
    slowdown: float
    survival: float


# The slot setters of PlacementStats, in field order. The frozen dataclass's __init__ sets each
# field with object.__setattr__; calling the slot descriptors directly does the same in half
# the time (PlacementStats has no __post_init__ to run).
_STATS_FIELDS = (
    "gpus",
    "inter_links",
    "k",
    "g",
    "s",
    "b_intra",
    "a_intra",
    "a_inter",
    "slowdown",
    "survival",
)
assert tuple(f.name for f in fields(PlacementStats)) == _STATS_FIELDS
(
    _set_gpus,
    _set_inter_links,
    _set_k,
    _set_g,
    _set_s,
    _set_b_intra,
    _set_a_intra,
    _set_a_inter,
    _set_slowdown,
    _set_survival,
) = (PlacementStats.__dict__[f].__set__ for f in _STATS_FIELDS)
_new_object = object.__new__


def _make_stats(
    gpus: NDArray[np.int32],
    inter_links: NDArray[np.int32],
    k: int,
    g: int,
    s: int,
    b_intra: float,
    a_intra: float,
    a_inter: float,
    slowdown: float,
    survival: float,
) -> PlacementStats:
    """``PlacementStats(gpus, inter_links, ...)``, faster (see ``_STATS_FIELDS``)."""
    st = _new_object(PlacementStats)
    _set_gpus(st, gpus)
    _set_inter_links(st, inter_links)
    _set_k(st, k)
    _set_g(st, g)
    _set_s(st, s)
    _set_b_intra(st, b_intra)
    _set_a_intra(st, a_intra)
    _set_a_inter(st, a_inter)
    _set_slowdown(st, slowdown)
    _set_survival(st, survival)
    return st


#: Placements of at most this many GPUs get their facts in plain Python (numpy's per-call
#: overhead dominates for small ``k``); larger ones use numpy. Both give identical facts.
SMALL_PLACEMENT = 64


class _TopoLists:
    """Per-topology lists for :func:`placement_stats`'s plain-Python path."""

    __slots__ = ("gpu_links", "gpu_server", "is_intra", "link_lat", "uniform_depth")

    def __init__(self, topology: Topology) -> None:
        self.gpu_links: list[tuple[int, ...]] = [tuple(r) for r in topology.gpu_links.tolist()]
        self.gpu_server: list[int] = topology.gpu_server.tolist()
        self.is_intra: list[bool] = topology.is_intra.tolist()
        self.link_lat: list[float] = topology.link_lat.tolist()
        self.uniform_depth = topology.uniform_depth


class _HealthLists:
    """Per-(topology, health) lists for :func:`placement_stats`'s plain-Python path."""

    __slots__ = ("bw_eff", "gpu_ok", "link_ok", "slowdown", "topology")

    def __init__(self, topology: Topology, health: Health) -> None:
        self.topology = topology
        self.slowdown: list[float] = (health.gpu_slowdown / topology.gpu_speed).tolist()
        self.gpu_ok: list[float] = (1.0 - health.gpu_fail_prob).tolist()
        self.link_ok: list[float] = (1.0 - health.link_fail_prob).tolist()
        self.bw_eff: list[float] = (topology.link_bw * health.link_degradation).tolist()


_TOPO_LISTS: weakref.WeakKeyDictionary[Topology, _TopoLists] = weakref.WeakKeyDictionary()
_HEALTH_LISTS: weakref.WeakKeyDictionary[Health, _HealthLists] = weakref.WeakKeyDictionary()


def _lists(topology: Topology, health: Health) -> tuple[_TopoLists, _HealthLists]:
    """The plain-Python lists of ``topology`` and of ``health`` on it (cached per object)."""
    tl = _TOPO_LISTS.get(topology)
    if tl is None:
        tl = _TOPO_LISTS[topology] = _TopoLists(topology)
    hl = _HEALTH_LISTS.get(health)
    if hl is None or hl.topology is not topology:
        hl = _HEALTH_LISTS[health] = _HealthLists(topology, health)
    return tl, hl


def placement_stats(
    topology: Topology, health: Health, gpus: NDArray[np.integer[Any]]
) -> PlacementStats:
    """Compute the contention-independent facts of placing a job on ``gpus``.

    Args:
        topology: The cluster.
        health: Device health (σ, ρ, π).
        gpus: GPU indices (any order, distinct).
    """
    return sorted_placement_stats(topology, health, np.sort(np.asarray(gpus, dtype=np.int32)))


def sorted_placement_stats(
    topology: Topology,
    health: Health,
    p: NDArray[np.int32],
    lists: tuple[_TopoLists, _HealthLists] | None = None,
) -> PlacementStats:
    """:func:`placement_stats` of an already sorted placement without repeats (not checked).

    Args:
        topology: The cluster.
        health: Device health.
        p: Sorted, distinct GPU indices as ``int32`` (stored in the result: pass an array the
            caller will not modify).
        lists: ``_lists(topology, health)`` if the caller keeps it (saves two lookups).
    """
    k = len(p)
    if k <= SMALL_PLACEMENT or k == 1:
        tl, hl = lists if lists is not None else _lists(topology, health)
        pl: list[int] = p.tolist()
        if k == 1:
            # The lists hold the same quotient and difference as the arrays, elementwise.
            g0 = pl[0]
            return _make_stats(
                p, _NO_LINKS, 1, 1, 1, np.inf, 0.0, 0.0, hl.slowdown[g0], hl.gpu_ok[g0]
            )
        return _placement_stats_py(tl, hl, p, pl)
    links = topology.spanned_links(p)
    intra_mask = topology.is_intra[links]
    intra, inter = links[intra_mask], links[~intra_mask]
    srv = topology.gpu_server[p]  # sorted, since GPUs are numbered in DFS order
    cuts = np.flatnonzero(srv[1:] != srv[:-1]) + 1
    s_count = len(cuts) + 1
    g_max = int(np.diff(cuts, prepend=0, append=k).max()) if s_count > 1 else k
    b_intra = (
        float((topology.link_bw[intra] * health.link_degradation[intra]).min())
        if len(intra)
        else np.inf
    )
    a_intra = float(topology.link_lat[intra].max()) if len(intra) else 0.0
    a_inter = float(topology.link_lat[inter].max()) if len(inter) else 0.0
    slowdown = float((health.gpu_slowdown[p] / topology.gpu_speed[p]).max())
    survival = float(
        np.prod(1.0 - health.gpu_fail_prob[p]) * np.prod(1.0 - health.link_fail_prob[links])
    )
    return PlacementStats(
        gpus=p,
        inter_links=inter,
        k=k,
        g=g_max,
        s=s_count,
        b_intra=b_intra,
        a_intra=a_intra,
        a_inter=a_inter,
        slowdown=slowdown,
        survival=survival,
    )


def _placement_stats_py(
    tl: _TopoLists, hl: _HealthLists, p: NDArray[np.int32], pl: list[int]
) -> PlacementStats:
    """:func:`placement_stats` of a sorted placement of ``k >= 2`` GPUs, in plain Python.

    The same floating-point operations as the numpy path, in the same order (products are
    sequential, as ``np.prod``'s), so the facts are bit-identical.

    Args:
        tl: The topology's lists.
        hl: The health's lists.
        p: The sorted GPU indices (``int32``; stored in the result).
        pl: ``p`` as a list.
    """
    k = len(pl)
    gl = tl.gpu_links
    links: list[int] = []
    if tl.uniform_depth:
        # Each level's links are sorted along the placement (DFS order); a level holding more
        # than one link spans all of them.
        first, last = gl[pl[0]], gl[pl[-1]]
        for d in range(len(first)):
            if first[d] != last[d]:
                prev = -1
                for g in pl:
                    v = gl[g][d]
                    if v != prev:
                        links.append(v)
                        prev = v
        links.sort()
    else:
        counts: dict[int, int] = {}
        for g in pl:
            for v in gl[g]:
                counts[v] = counts.get(v, 0) + 1
        links = sorted(v for v, c in counts.items() if c < k and v > 0)
    is_intra, lat = tl.is_intra, tl.link_lat
    intra = [e for e in links if is_intra[e]]
    inter = [e for e in links if not is_intra[e]]
    gs = tl.gpu_server
    s_count, run, g_max = 1, 1, 1
    prev_s = gs[pl[0]]
    for g in pl[1:]:
        sv = gs[g]
        if sv == prev_s:
            run += 1
        else:
            s_count += 1
            if run > g_max:
                g_max = run
            run = 1
            prev_s = sv
    g_max = max(g_max, run) if s_count > 1 else k
    bw = hl.bw_eff
    b_intra = min([bw[e] for e in intra]) if intra else np.inf
    a_intra = max([lat[e] for e in intra]) if intra else 0.0
    a_inter = max([lat[e] for e in inter]) if inter else 0.0
    sd = hl.slowdown
    slowdown = max([sd[g] for g in pl])
    ok_g, ok_l = hl.gpu_ok, hl.link_ok
    surv_g = 1.0
    for g in pl:
        surv_g *= ok_g[g]
    surv_l = 1.0
    for e in links:
        surv_l *= ok_l[e]
    return _make_stats(
        p,
        np.array(inter, dtype=np.int32) if inter else _NO_LINKS,
        k,
        g_max,
        s_count,
        b_intra,
        a_intra,
        a_inter,
        slowdown,
        surv_g * surv_l,
    )
