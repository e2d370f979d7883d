"""The iteration-time model of a placed data-parallel job, as one family of array functions.

For a placement ``P`` (``k`` GPUs on ``s`` servers, at most ``g`` of them on one server):

* *spanned links*: the tree links whose subtree holds some but not all of ``P`` (a DFS-ordered ring
  crosses each exactly once per direction). A GPU's own link is an *intra* link; the others are
  *inter* links.
* Contention: ``n_e`` jobs span link ``e``; each gets ``ρ_e B_e / n_e``. ``b_intra`` and ``b_inter``
  are the minima of that share over the job's spanned intra and inter links (``inf`` if none). GPU
  links are never shared, so ``b_intra`` is a fact of the placement; ``b_inter`` depends on the
  other jobs (:func:`inter_bandwidth`).
* Node fabric and network card (off by default). A node's GPUs share its fabric of bandwidth ``F``
  (PCIe switch / host bridge / NVSwitch), so a GPU's intra-node bandwidth is
  ``b_i = min(b_intra, F / g)``; and the job's ``g`` co-located GPUs share the node's network card, so
  its inter-node bandwidth is ``b_e = b_inter / g^ν`` (``ν = nic_sharing``; ``ν = 0`` is today's
  model, ``ν = 1`` one card carrying the traffic of every co-located GPU).
* Communication, ring all-reduce::

      C = 2(k-1)/k · M / min(b_i, b_e) + 2(k-1) · max(a_intra, a_inter) + λ·[k > 1]

* Communication, hierarchical all-reduce (intra-server reduce-scatter, inter-server ring of the
  server shards, intra-server all-gather)::

      C = 2(g-1)/g · M / b_i + 2(s-1)/s · M / b_e + 2(g-1) · a_intra + 2(s-1) · a_inter + λ·[k > 1]

  where ``a_intra`` / ``a_inter`` are the largest latencies among the spanned intra / inter links
  and ``λ`` a fixed per-step synchronisation cost (``step_latency``, 0 by default).
  Both reduce to the same ring when the job is on one server or has one GPU per server.
* Ring latency over its hops (``latency="hops"``, ring only; off by default). A chunk travels
  every hop of the ring, and the pipelined ring's critical path is ``2(k-1)`` consecutive hops, so
  the latency term is ``2(k-1)/k · Σ_h α_h`` over the ring's ``k`` hops instead of
  ``2(k-1) · max α``. The ring has ``g_i - 1`` intra-node hops on node ``i`` and one hop out of
  each node (``s >= 2``; on one node all ``k`` hops are intra-node), and a hop is slowed by its
  node's co-located GPUs, ``α_h = a · (1 + χ (g_i - 1))`` (``χ = latency_inflation``: the GPUs'
  data loaders and the collective's proxy threads share the node's CPUs), so with
  ``Σ_i g_i² = sum_g2``::

      Σ_h α_h = a_intra · [(k - s·[s>1]) + χ (Σ g_i² - k - [s>1](k - s))]
              + a_inter · [s>1] · (s + χ (k - s))

  Every node's count enters, so placements that differ beyond node order get different times
  (3311 and 3221 differ in ``Σ g_i²``); with ``χ = 0`` and equal hop latencies it is today's
  ``2(k-1)·α``.
* Compute: ``t = (t_c - δ·[k > 1]) · max_{g in P} σ_g / speed_g · (1 + min(κ (g - 1), κ_max))``
  (the slowest worker sets the pace; ``κ = compute_sharing`` is the slowdown each co-located GPU
  of the job adds through the node's shared CPU, memory and PCIe, 0 by default; ``κ_max =
  compute_saturation`` the most that sharing can slow it, reached once the shared resource is
  saturated, ``inf`` by default: no saturation, ``1 + κ (g - 1)``). ``t_c`` comes from the model's
  compute curve (:func:`compute_curve`); when the curve is the measured 1-GPU step time,
  ``δ = replica_overhead`` is the per-step work a single replica does that a data-parallel job
  does not (AdaptDL's gradient-noise estimate on one GPU clones and re-reduces the gradients
  each step; with several replicas it comes out of the all-reduce), 0 by default.
* Iteration time with overlap: backward compute hides up to ``φ_t · t`` of the all-reduce, and at
  most ``φ_c · C`` of it::

      T = t + C - min(φ_t · t, φ_c · C)

  ``PerfConfig(overlap=φ)`` is ``φ_t = φ_c = φ``, i.e. ``T = (1-φ)(t + C) + φ · max(t, C)``.
  With a gradient bucket ``bucket_bytes = β > 0`` (off by default), the all-reduce of the last
  bucket cannot start before backward ends, so at most ``1 - min(1, β / M)`` of ``C`` hides:
  ``φ_c`` becomes ``min(φ_c, 1 - min(1, β / M))`` per job (PyTorch DDP's default bucket is 25 MB).
* Latency behind compute (``latency_overlap = ψ > 0``, ``latency="hops"`` only; off by default).
  The ring's summed hop latency ``L = 2(k-1)/k · Σ_h α_h`` is, once χ inflates it, mostly work
  of the node's CPUs (the collective's proxy threads, kernel launches, the data loaders they
  contend with); it runs while the GPU executes the step's queued kernels, so it hides behind
  compute, neither bounded by the backward share nor held back by the last bucket. With ψ the
  bandwidth part ``C_b = C - L`` overlaps as above, and ``L`` then overlaps the compute that part
  leaves exposed the way compute and communication do, ψ of that compute hiding at most
  ``LATENCY_HIDEABLE`` (0.999) of ``L``::

      G = t + C_b - min(φ_t · t, φ_c · C_b),
      T = C_b + (G - C_b) + L - min(ψ · (G - C_b), 0.999 · L)

  (a ring step also waits on the GPU for its neighbour's chunk; the 10⁻³ that never hides, like
  χ >= 0.001 in the fit, keeps placements that differ beyond node order from tying when the
  compute could hide all of ``L``). ``ψ = 0`` is the formula above, bit for bit (``L`` then
  counts in ``C``).
* Normalised throughput: ``η = min(1, T* / T)``, where ``T*`` (:func:`ideal_time`) is the same job
  alone on a compact placement of healthy GPUs.

Every function is vectorised: arguments are arrays of one shape (or broadcastable), one element per
job or per candidate. A single job is the call with one row. docs/MODEL.md gives the calibration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_range
from crop_gym.model.facts import PlacementFacts, placement_facts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job, ModelSpec, calibration_data, get_model
from crop_gym.model.topology import Topology

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "JOB_COLUMNS",
    "LATENCY_HIDEABLE",
    "LATENCY_MODELS",
    "JobTimes",
    "PerfConfig",
    "comm_time",
    "compute_curve",
    "ideal_time",
    "inter_bandwidth",
    "iteration_time",
    "job_class_memo_stats",
    "job_constants",
    "job_times",
    "model_constants",
    "sharing_factor",
    "times_arrays",
    "times_of",
]

ALLREDUCE_ALGORITHMS: tuple[str, ...] = ("ring", "hierarchical")
#: How the all-reduce's per-step latency adds up (see the module docstring).
LATENCY_MODELS: tuple[str, ...] = ("max", "hops")
#: The most of the ring's hop latency that can hide behind compute (``latency_overlap``): a ring
#: step also waits on the GPU for its neighbour's chunk, and this floor of 10⁻³ of it, like
#: χ >= 0.001 in the fit, keeps placements that differ beyond node order from ever tying.
LATENCY_HIDEABLE = 0.999
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def _default_allreduce() -> str:
    return "hierarchical" if calibration_data().get("allreduce") == "hierarchical" else "ring"


@dataclass(frozen=True)
class PerfConfig:
    """Options of the iteration-time model (every term beyond the all-reduce is off by default).

    Attributes:
        allreduce: ``"ring"`` or ``"hierarchical"``; the default is the calibrated choice
            (docs/MODEL.md says why).
        overlap: φ_t in [0, 1], the fraction of compute that hides communication.
        overlap_cap: φ_c in [0, 1], the largest hidden fraction of the all-reduce; ``None`` means
            ``overlap`` (the single-φ model ``T = (1-φ)(t + C) + φ·max(t, C)``).
        fabric_bandwidth: ``F`` (bytes/s, > 0), a node's fabric shared by its GPUs; ``inf`` = off.
        nic_sharing: ν in [0, 1]: the inter-node share is divided by ``g^ν``; 0 = off.
        compute_sharing: κ >= 0, compute slowdown per co-located GPU of the job; 0 = off.
        compute_saturation: κ_max >= 0, the largest slowdown compute sharing can add (the
            factor is ``1 + min(κ (g - 1), κ_max)``); ``inf`` = no saturation.
        step_latency: λ >= 0 seconds added to every step of a job of more than one GPU; 0 = off.
        latency: ``"max"`` (``2(k-1)·max α``, the default) or ``"hops"`` (the sum over the ring's
            hops, ring only).
        latency_inflation: χ >= 0, hop latency slowdown per co-located GPU of its node (``"hops"``).
        bucket_bytes: β >= 0 bytes of the last gradient bucket, which cannot overlap; 0 = off.
        replica_overhead: δ >= 0 seconds a 1-GPU step does and a multi-GPU step does not; 0 = off.
        latency_overlap: ψ in [0, 1], the share of the compute left after the bandwidth overlap
            behind which the ring's hop latency hides (``"hops"`` only); 0 = off.
    """

    allreduce: str = ""
    overlap: float = 0.0
    overlap_cap: float | None = None
    fabric_bandwidth: float = float("inf")
    nic_sharing: float = 0.0
    compute_sharing: float = 0.0
    compute_saturation: float = float("inf")
    step_latency: float = 0.0
    latency: str = "max"
    latency_inflation: float = 0.0
    bucket_bytes: float = 0.0
    replica_overhead: float = 0.0
    latency_overlap: float = 0.0

    def __post_init__(self) -> None:
        if self.allreduce == "":
            object.__setattr__(self, "allreduce", _default_allreduce())
        if self.allreduce not in ALLREDUCE_ALGORITHMS:
            raise ConfigError(
                f"allreduce={self.allreduce!r} is not one of {', '.join(ALLREDUCE_ALGORITHMS)}"
            )
        check_range("overlap", self.overlap, 0.0, 1.0)
        if self.overlap_cap is not None:
            check_range("overlap_cap", self.overlap_cap, 0.0, 1.0)
        check_range("fabric_bandwidth", self.fabric_bandwidth, 0.0, low_inclusive=False)
        check_range("nic_sharing", self.nic_sharing, 0.0, 1.0)
        check_range("compute_sharing", self.compute_sharing, 0.0, 1e3)
        check_range("compute_saturation", self.compute_saturation, 0.0)
        check_range("step_latency", self.step_latency, 0.0, 1e3)
        if self.latency not in LATENCY_MODELS:
            raise ConfigError(f"latency={self.latency!r} is not one of {', '.join(LATENCY_MODELS)}")
        if self.latency == "hops" and self.allreduce != "ring":
            raise ConfigError("latency='hops' sums the hops of a ring: it needs allreduce='ring'")
        check_range("latency_inflation", self.latency_inflation, 0.0, 1e4)
        check_range("bucket_bytes", self.bucket_bytes, 0.0, 1e15)
        check_range("replica_overhead", self.replica_overhead, 0.0, 1e3)
        check_range("latency_overlap", self.latency_overlap, 0.0, 1.0)
        if self.latency_overlap > 0.0 and self.latency != "hops":
            raise ConfigError(
                "latency_overlap > 0 hides the ring's summed hop latency: it needs latency='hops'"
            )


# ----------------------------------------------------------------------------- formulas
def comm_time(
    allreduce: str,
    grad_bytes: Any,
    k: Any,
    g: Any,
    s: Any,
    b_intra: Any,
    b_inter: Any,
    a_intra: Any,
    a_inter: Any,
    fabric_bandwidth: float = float("inf"),
    nic_sharing: float = 0.0,
    step_latency: float = 0.0,
    hops: Any = None,
) -> Any:
    """All-reduce time of ``grad_bytes`` per iteration (vectorised over jobs).

    Args:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        grad_bytes: Gradient size ``M`` in bytes.
        k: GPUs of the job.
        g: Most GPUs of the job on one server.
        s: Servers spanned.
        b_intra: Bottleneck bandwidth over the spanned intra-server links (``inf`` if none).
        b_inter: Bottleneck bandwidth share over the spanned inter-server links (``inf`` if none).
        a_intra: Largest latency over the spanned intra-server links (0 if none).
        a_inter: Largest latency over the spanned inter-server links (0 if none).
        fabric_bandwidth: ``F``, a node's fabric shared by its ``g`` GPUs (``inf``: off).
        nic_sharing: ν: the inter-server share is divided by ``g^ν`` (0: off).
        step_latency: λ, seconds added when ``k > 1`` (0: off).
        hops: Ring only: the latency of one ring step summed over its hops
            (:func:`ring_hop_latency`, ``latency="hops"``); ``None``: ``2(k-1) · max α``.

    Returns:
        Seconds per iteration spent in the all-reduce.
    """
    # No branch is needed: a term whose step count is 0 has an infinite bandwidth (no link spanned),
    # and 0 * (M / inf) = 0. Bandwidths are > 0 by construction.
    gf = np.asarray(g, dtype=np.float64)
    if fabric_bandwidth != np.inf:
        b_intra = np.minimum(b_intra, fabric_bandwidth / gf)
    if nic_sharing != 0.0:
        b_inter = b_inter / gf**nic_sharing
    if allreduce == "ring":
        steps = 2.0 * (np.asarray(k, dtype=np.float64) - 1.0)
        if hops is None:
            out = steps / k * (grad_bytes / np.minimum(b_intra, b_inter)) + steps * np.maximum(
                a_intra, a_inter
            )
        else:
            out = steps / k * (grad_bytes / np.minimum(b_intra, b_inter) + hops)
    else:
        sf = np.asarray(s, dtype=np.float64)
        intra = (2.0 * (gf - 1.0) / gf) * (grad_bytes / b_intra) + 2.0 * (gf - 1.0) * a_intra
        inter = (2.0 * (sf - 1.0) / sf) * (grad_bytes / b_inter) + 2.0 * (sf - 1.0) * a_inter
        out = intra + inter
    if step_latency != 0.0:
        out = out + step_latency * (np.asarray(k) > 1)
    return out


def iteration_time(compute: Any, comm: Any, overlap: float = 0.0, overlap_cap: Any = None) -> Any:
    """``T = t + C - min(φ_t·t, φ_c·C)`` with ``φ_t = overlap``, ``φ_c = overlap_cap`` (vectorised;
    ``φ_c`` may be one value per job).

    With ``overlap_cap=None`` this is ``(1-φ)(t + C) + φ·max(t, C)``, the same value.
    """
    if overlap_cap is None:
        if overlap == 0.0:
            return compute + comm
        return (1.0 - overlap) * (compute + comm) + overlap * np.maximum(compute, comm)
    return compute + comm - np.minimum(overlap * compute, overlap_cap * comm)


def compute_curve(knot_batch: Any, knot_time: Any, local_batch: Any) -> Any:
    """Per-GPU compute time of one iteration from a compute curve (vectorised over ``local_batch``).

    The curve is piecewise linear through the knots ``(knot_batch[i], knot_time[i])`` (batches
    increasing) and extends the first and last segments linearly beyond them; two knots are the
    affine ``t0 + per_sample · b``. The result is floored at 0.

    Args:
        knot_batch: ``float[n >= 2]`` increasing local batches.
        knot_time: ``float[n]`` seconds at those batches.
        local_batch: Local batch(es) to evaluate.
    """
    xb = np.asarray(knot_batch, dtype=np.float64)
    yt = np.asarray(knot_time, dtype=np.float64)
    b = np.asarray(local_batch, dtype=np.float64)
    seg = np.clip(np.searchsorted(xb, b, side="right") - 1, 0, len(xb) - 2)
    slope = (yt[seg + 1] - yt[seg]) / (xb[seg + 1] - xb[seg])
    return np.maximum(yt[seg] + slope * (b - xb[seg]), 0.0)


def inter_bandwidth(eff_bw: FloatArray, load: Any, links: NDArray[np.int32]) -> Any:
    """Bottleneck share ``min_e ρ_e B_e / max(n_e, 1)`` over each row of root-padded ``links``.

    Args:
        eff_bw: ``float64[N]`` effective bandwidth ``ρ·B`` per link (the root, node 0, is ``inf``,
            so padding never binds).
        load: Jobs crossing each link: ``int[N]``, or an array broadcastable to ``links``' shape
            (e.g. the current loads plus one on a candidate's links).
        links: ``int32[..., W]`` link indices per row, root-padded.

    Returns:
        ``float64[...]`` (``inf`` for a row of padding only).
    """
    n = load[links] if np.ndim(load) == 1 else load
    share = eff_bw[links] / np.maximum(n, 1)
    if share.shape[-1] == 0:
        return np.full(share.shape[:-1], np.inf)
    return share.min(axis=-1)


@dataclass(frozen=True, slots=True)
class JobTimes:
    """Times of jobs (or candidates) under one contention state, one element per row.

    Attributes:
        T: ``float64[R]`` iteration time (s).
        C: ``float64[R]`` all-reduce time (s).
        eta: ``float64[R]`` normalised throughput ``min(1, T*/T)``.
    """

    T: FloatArray
    C: FloatArray
    eta: FloatArray


def job_times(
    perf: PerfConfig,
    grad_bytes: Any,
    compute: Any,
    tstar: Any,
    facts: PlacementFacts,
    b_inter: Any,
    *,
    compute_sharing: Any = None,
    compute_saturation: Any = None,
    latency_inflation: Any = None,
    replica_overhead: Any = None,
) -> JobTimes:
    """The iteration-time model of rows of jobs: the one place ``T``, ``C`` and ``η`` are computed.

    Args:
        perf: Model options.
        grad_bytes: Gradient bytes ``M`` per row.
        compute: Reference compute time ``t_c`` per row (the job's, on a healthy reference GPU).
        tstar: Ideal time ``T*`` per row.
        facts: The rows' placement facts (``k``, ``g``, ``s``, bottlenecks, latencies, slowdown);
            any shape broadcastable against ``b_inter``.
        b_inter: Bottleneck inter-server bandwidth share per row (:func:`inter_bandwidth`).
        compute_sharing: κ per row (e.g. a hardware profile's per-model value), replacing
            ``perf.compute_sharing``; ``None`` (the default) uses ``perf.compute_sharing``.
        compute_saturation: κ_max per row, likewise replacing ``perf.compute_saturation``.
        latency_inflation: χ per row, likewise replacing ``perf.latency_inflation``.
        replica_overhead: δ per row, likewise replacing ``perf.replica_overhead``.
    """
    kappa = perf.compute_sharing if compute_sharing is None else compute_sharing
    kappa_max = perf.compute_saturation if compute_saturation is None else compute_saturation
    delta = perf.replica_overhead if replica_overhead is None else replica_overhead
    if replica_overhead is not None or delta != 0.0:
        # A 1-GPU step does work (δ) that a data-parallel step does not.
        compute = np.maximum(compute - delta * (facts.k > 1.0), 0.0)
    cap: Any = perf.overlap_cap
    if perf.bucket_bytes > 0.0:
        # The last gradient bucket is reduced after backward ends: it never overlaps.
        hideable = 1.0 - np.minimum(1.0, perf.bucket_bytes / np.asarray(grad_bytes, dtype=float))
        cap = np.minimum(perf.overlap if cap is None else cap, hideable)
    hops = None
    if perf.latency == "hops":
        if perf.allreduce != "ring":
            raise ConfigError("latency='hops' sums the hops of a ring: it needs allreduce='ring'")
        chi = perf.latency_inflation if latency_inflation is None else latency_inflation
        hops = ring_hop_latency(facts.k, facts.s, facts.a_intra, facts.a_inter, facts.sum_g2, chi)
    T, C, eta = times_arrays(
        perf.allreduce,
        perf.overlap,
        cap,
        perf.fabric_bandwidth,
        perf.nic_sharing,
        perf.step_latency,
        grad_bytes,
        compute,
        tstar,
        kappa,
        kappa_max,
        facts.k,
        facts.g,
        facts.s,
        facts.b_intra,
        b_inter,
        facts.a_intra,
        facts.a_inter,
        facts.slowdown,
        hops,
        perf.latency_overlap,
    )
    return JobTimes(T=T, C=C, eta=eta)


def ring_hop_latency(k: Any, s: Any, a_intra: Any, a_inter: Any, sum_g2: Any, chi: Any) -> Any:
    """The latency of one ring step summed over its hops, per job (``latency="hops"``).

    A DFS-ordered ring of ``k`` GPUs on ``s`` servers has ``k - s`` intra-server hops and ``s``
    inter-server hops when spread (``k - 1`` intra hops on one server). Each hop is slowed by the
    co-located GPUs of its node: ``χ`` per further GPU, which adds ``χ (Σ g_i² - k)`` over the
    intra-server hops and ``χ (k - s)`` over the inter-server ones (``sum_g2`` = ``Σ_i g_i²``).
    """
    kf = np.asarray(k, dtype=np.float64)
    sf = np.asarray(s, dtype=np.float64)
    spread = (sf > 1.0).astype(np.float64)
    chi = np.asarray(chi, dtype=np.float64)
    intra_hops = (kf - sf * spread) + chi * (np.asarray(sum_g2) - kf - spread * (kf - sf))
    inter_hops = spread * (sf + chi * (kf - sf))
    return np.asarray(a_intra) * intra_hops + np.where(spread > 0, a_inter, 0.0) * inter_hops


def sharing_factor(kappa: Any, kappa_max: Any, g: Any) -> Any:
    """``1 + min(κ (g - 1), κ_max)``: how much a job's compute slows with ``g`` of its GPUs on one
    node (κ per co-located GPU, through the node's shared CPU, memory and PCIe, up to κ_max once
    that shared resource is saturated). Non-decreasing in ``g``; 1 for ``g = 1`` or ``κ = 0``, and
    ``κ_max = inf`` leaves ``1 + κ (g - 1)`` exactly. Arrays broadcast."""
    return 1.0 + np.minimum(kappa * (g - 1.0), kappa_max)


def times_arrays(
    allreduce: str,
    overlap: float,
    overlap_cap: Any,
    fabric_bandwidth: float,
    nic_sharing: float,
    step_latency: float,
    grad_bytes: Any,
    compute: Any,
    tstar: Any,
    kappa: Any,
    kappa_max: Any,
    k: Any,
    g: Any,
    s: Any,
    b_intra: Any,
    b_inter: Any,
    a_intra: Any,
    a_inter: Any,
    slowdown: Any,
    hops: Any = None,
    latency_overlap: float = 0.0,
) -> tuple[Any, Any, Any]:
    """``(T, C, η)`` of rows given as plain arrays: the body of :func:`job_times` (the model
    options unpacked, the facts as columns, κ and κ_max per row; ``overlap_cap`` ``None``, one value or one
    per row; ``hops`` the ring's summed hop latencies, :func:`ring_hop_latency`, or ``None`` for
    the largest-latency form; ``latency_overlap`` ψ, which hides the hop latency behind compute,
    used only with ``hops``).

    Written in the part of numpy that numba compiles too: the compiled kernels
    (:mod:`crop_gym.model.kernels`) run this very function, so the formula exists once.
    """
    C = comm_time(  # (positional arguments only: numba compiles this call too)
        allreduce,
        grad_bytes,
        k,
        g,
        s,
        b_intra,
        b_inter,
        a_intra,
        a_inter,
        fabric_bandwidth,
        nic_sharing,
        step_latency,
        hops,
    )
    # A co-located GPU of the job slows its compute by κ, up to κ_max in all, once the node's
    # shared resource is saturated (1 + min(κ (g - 1), κ_max); κ = 0 leaves t as is, and so does
    # κ_max = inf: min(x, inf) is x exactly).
    t = compute * slowdown * sharing_factor(kappa, kappa_max, g)
    if hops is None or latency_overlap == 0.0:
        T = iteration_time(t, C, overlap, overlap_cap)
    else:
        # The hop latency L is CPU-side work that runs while the GPU computes: the bandwidth part
        # C_b overlaps as usual (G), and then L overlaps with the compute G leaves exposed, as
        # compute and communication do (ψ of that compute, at most LATENCY_HIDEABLE of L).
        L = 2.0 * (np.asarray(k, dtype=np.float64) - 1.0) / k * hops
        C_b = C - L
        G = iteration_time(t, C_b, overlap, overlap_cap)
        T = C_b + iteration_time(G - C_b, L, latency_overlap, LATENCY_HIDEABLE)
    return T, C, np.minimum(1.0, tstar / T)


@lru_cache(maxsize=256)
def whole_placement_terms(perf: PerfConfig, topology: Topology) -> bool:
    """Whether the model uses a term beyond :func:`times_arrays`' own inputs: the ring's summed hop
    latencies, a last gradient bucket that never overlaps, or a single-replica overhead (of the
    options or of the topology's hardware profile). :func:`job_times` then adjusts the inputs
    (compute, overlap cap, hop latencies) before calling :func:`times_arrays`."""
    hw = topology.region_topology.hardware
    per_model = hw is not None and any(
        v != 0.0 for v in getattr(hw, "model_replica_overhead", {}).values()
    )
    return (
        perf.latency != "max"
        or perf.bucket_bytes > 0.0
        or perf.replica_overhead != 0.0
        or per_model
    )


def times_of(perf: PerfConfig, const: FloatArray, facts: PlacementFacts, b_inter: Any) -> JobTimes:
    """:func:`job_times` of jobs given as rows ``const[..., :]`` of :func:`job_constants` (one per
    row of ``facts``, or any shape that broadcasts against ``b_inter``)."""
    return job_times(
        perf,
        const[..., 0],
        const[..., 1],
        const[..., 2],
        facts,
        b_inter,
        compute_sharing=const[..., 4],
        compute_saturation=const[..., 7],
        latency_inflation=const[..., 5] if perf.latency == "hops" else None,
        replica_overhead=const[..., 6] if perf.replica_overhead or const[..., 6].any() else None,
    )


# ----------------------------------------------------------------------------- ideal time
def model_constants(topology: Topology, job: Job) -> tuple[float, float]:
    """``(M, t_c)`` of ``job`` on ``topology``: its gradient bytes and per-GPU compute seconds at
    its local batch on the cluster's reference GPU (speed 1).

    The one place a job's constants are looked up: from the topology's hardware profile
    (:attr:`Topology.hardware <crop_gym.model.topology.Topology>`) when it has one, else from the
    model zoo (whose reference GPU is the ``a100-elasticflow`` profile's A100).
    """
    return _constants(topology.region_topology, get_model(job.model), job.local_batch)


def _constants(topology: Topology, spec: ModelSpec, local_batch: float) -> tuple[float, float]:
    hw = topology.hardware
    if hw is None:
        return spec.grad_bytes, spec.compute_time(local_batch)
    return hw.model_grad_bytes(spec.name), float(hw.compute_time(spec.name, local_batch))


#: The columns of :func:`job_constants`, in order.
JOB_COLUMNS: tuple[str, ...] = (
    "grad_bytes",
    "compute",
    "tstar",
    "weight",
    "compute_sharing",
    "latency_inflation",
    "replica_overhead",
    "compute_saturation",
)


def ideal_time(topology: Topology, job: Job, perf: PerfConfig) -> float:
    """``T*``: iteration time of ``job`` on a compact placement of healthy reference GPUs, alone.

    Memoised per (topology, model options, model spec, GPUs, batch): every input is immutable.
    """
    topo = topology.region_topology
    return _job_class(topo, perf, get_model(job.model), job.num_gpus, float(job.batch_size))[2]


def job_constants(topology: Topology, perf: PerfConfig, jobs: Sequence[Job]) -> FloatArray:
    """``float64[J, 8]``: per job its :data:`JOB_COLUMNS`, gradient bytes ``M``, reference compute
    time ``t_c``, ideal time ``T*`` (:func:`ideal_time`), weight ``w``, compute sharing κ, latency
    inflation χ, single-replica overhead δ and compute saturation κ_max (each the hardware
    profile's value for the job's model, else the ``perf`` value; the ``compute_sharing=``,
    ``latency_inflation=``, ``replica_overhead=`` and ``compute_saturation=`` columns of
    :func:`job_times`).

    One memoised look-up per job class: the constants are a pure function of immutable inputs.
    """
    rows = []
    topo = topology.region_topology  # (a job is placed inside one region: its cluster's T*)
    for j in jobs:
        grad_bytes, t_c, tstar, kappa, chi, delta, kappa_max = _job_class(
            topo, perf, get_model(j.model), j.num_gpus, float(j.batch_size)
        )
        rows.append((grad_bytes, t_c, tstar, j.weight, kappa, chi, delta, kappa_max))
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(JOB_COLUMNS))


def job_class_memo_stats() -> tuple[int, int]:
    """``(hits, misses)`` of the job-class memo behind :func:`job_constants` and
    :func:`ideal_time` so far, in this process (benchmarks print the hit rate)."""
    info = _job_class.cache_info()
    return info.hits, info.misses


@lru_cache(maxsize=1 << 16)
def _job_class(
    topology: Topology, perf: PerfConfig, spec: ModelSpec, k: int, batch: float
) -> tuple[float, float, float, float, float, float, float]:
    """``(M, t_c, T*, κ, χ, δ, κ_max)`` of a job class; ``T*`` is the job alone on a compact healthy
    placement."""
    facts = placement_facts(topology, Health.healthy(topology), [topology.compact_placement(k)])
    b_inter = inter_bandwidth(topology.link_bw, 1, facts.inter_links)
    grad_bytes, t_c = _constants(topology, spec, batch / k)
    hw = topology.hardware
    kappa, chi, delta = perf.compute_sharing, perf.latency_inflation, perf.replica_overhead
    kappa_max = perf.compute_saturation
    if hw is not None:
        kappa = float(hw.model_compute_sharing.get(spec.name, kappa))
        kappa_max = float(hw.model_compute_saturation.get(spec.name, kappa_max))
        chi = float(hw.model_latency_inflation.get(spec.name, chi))
        delta = float(hw.model_replica_overhead.get(spec.name, delta))
    times = job_times(
        perf,
        grad_bytes,
        t_c,
        np.inf,
        facts,
        np.asarray(b_inter),
        compute_sharing=kappa,
        compute_saturation=kappa_max,
        latency_inflation=chi,
        replica_overhead=delta,
    )
    return grad_bytes, t_c, float(times.T[0]), kappa, chi, delta, kappa_max
