"""Abnormal devices: slow, failed and failure-prone GPUs; degraded and failure-prone links.

A :class:`Health` holds the per-device state as arrays aligned with a :class:`~crop_gym.model.topology.Topology`:

* ``gpu_slowdown`` σ ≥ 1: compute time is multiplied by σ (a straggler);
* ``gpu_failed``: the GPU is unusable;
* ``gpu_fail_prob`` π ∈ [0, 1): probability that the GPU fails within the scheduling horizon;
* ``link_degradation`` ρ ∈ (0, 1]: the link's bandwidth is multiplied by ρ;
* ``link_fail_prob`` π ∈ [0, 1): probability that the link fails within the horizon.

An :class:`AbnormalityProfile` is a seeded sampler of :class:`Health`; the presets ``none``, ``mild``,
``severe`` and ``testbed`` are in :data:`PROFILES`, and every field can be overridden with
:func:`get_profile`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_range, check_real
from crop_gym.model.topology import Topology

__all__ = [
    "MAX_ONSET_RATE_PER_GPU_HOUR",
    "MIN_ABNORMAL_DURATION_S",
    "PROFILES",
    "AbnormalityProfile",
    "Health",
    "get_profile",
]

#: Largest :attr:`AbnormalityProfile.onset_rate_per_gpu_hour`: one onset per device-minute.
MAX_ONSET_RATE_PER_GPU_HOUR = 60.0
#: Smallest :attr:`AbnormalityProfile.mean_abnormal_duration_s`.
MIN_ABNORMAL_DURATION_S = 1.0


@dataclass(frozen=True, eq=False)
class Health:
    """Per-device health of one cluster (arrays are read-only; make a new object to change it).

    Attributes:
        gpu_slowdown: ``float64[G]`` σ ≥ 1.
        gpu_failed: ``bool[G]``.
        gpu_fail_prob: ``float64[G]`` π in [0, 1).
        link_degradation: ``float64[N]`` ρ in (0, 1] per link (index = child node; root entry 1).
        link_fail_prob: ``float64[N]`` π in [0, 1) per link (root entry 0).
    """

    gpu_slowdown: NDArray[np.float64]
    gpu_failed: NDArray[np.bool_]
    gpu_fail_prob: NDArray[np.float64]
    link_degradation: NDArray[np.float64]
    link_fail_prob: NDArray[np.float64]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            a = np.array(
                getattr(self, f.name), dtype=bool if f.name == "gpu_failed" else np.float64
            )
            a.setflags(write=False)
            object.__setattr__(self, f.name, a)
        if len({len(self.gpu_slowdown), len(self.gpu_failed), len(self.gpu_fail_prob)}) != 1:
            raise ConfigError("Health: the per-GPU arrays have different lengths")
        if len(self.link_degradation) != len(self.link_fail_prob):
            raise ConfigError("Health: the per-link arrays have different lengths")
        if np.any(~(self.gpu_slowdown >= 1.0)):
            raise ConfigError("Health.gpu_slowdown must be >= 1 everywhere")
        if np.any(~((self.link_degradation > 0) & (self.link_degradation <= 1))):
            raise ConfigError("Health.link_degradation must be in (0, 1] everywhere")
        for name in ("gpu_fail_prob", "link_fail_prob"):
            a = getattr(self, name)
            if np.any(~((a >= 0) & (a < 1))):
                raise ConfigError(f"Health.{name} must be in [0, 1) everywhere")

    @classmethod
    def unchecked(cls, **arrays: NDArray[Any]) -> Health:
        """A Health from arrays the caller built valid (right dtypes, lengths and ranges),
        *without* running the checks again: for :meth:`AbnormalityProfile.sample`, whose ranges
        were checked when the profile was made. The arrays are made read-only, as the checked
        constructor does."""
        new = object.__new__(cls)
        for f in dataclasses.fields(cls):
            a = arrays[f.name]
            a.setflags(write=False)
            object.__setattr__(new, f.name, a)
        return new

    @classmethod
    def healthy(cls, topology: Topology) -> Health:
        """Every device healthy."""
        g, n = topology.num_gpus, topology.num_nodes
        return cls(np.ones(g), np.zeros(g, bool), np.zeros(g), np.ones(n), np.zeros(n))

    @property
    def usable(self) -> NDArray[np.bool_]:
        """``bool[G]``: GPUs that can be allocated (not failed)."""
        return ~self.gpu_failed

    @property
    def is_abnormal_gpu(self) -> NDArray[np.bool_]:
        """``bool[G]``: GPUs that are slow, failed or failure-prone."""
        return (self.gpu_slowdown > 1.0) | self.gpu_failed | (self.gpu_fail_prob > 0)

    def replace(self, **changes: Any) -> Health:
        """A copy with some arrays replaced."""
        return dataclasses.replace(self, **changes)

    def observe(self, rng: np.random.Generator, noise: float) -> Health:
        """A noisy health signal: what a monitoring system would report.

        Slowdowns are multiplied by a log-normal factor of standard deviation ``noise``; failure
        probabilities and degradations get additive Gaussian noise of scale ``noise`` (clipped to
        their ranges). Failed GPUs are always reported (a dead GPU is not ambiguous).

        Args:
            rng: Random generator (from the environment's ``np_random``).
            noise: Noise level >= 0; 0 returns ``self``.
        """
        check_range("noise", noise, 0.0)
        if noise == 0:
            return self
        g, n = len(self.gpu_slowdown), len(self.link_degradation)
        slow = np.maximum(1.0, self.gpu_slowdown * np.exp(rng.normal(0, noise, g)))
        pg = np.clip(self.gpu_fail_prob + rng.normal(0, noise, g) * 0.1, 0.0, 0.99)
        rho = np.clip(self.link_degradation + rng.normal(0, noise, n) * 0.1, 0.05, 1.0)
        pl = np.clip(self.link_fail_prob + rng.normal(0, noise, n) * 0.1, 0.0, 0.99)
        rho[0], pl[0] = 1.0, 0.0
        return Health(slow, self.gpu_failed, pg, rho, pl)


def _check_interval(name: str, lo_hi: tuple[float, float], low: float, high: float) -> None:
    lo, hi = lo_hi
    check_range(f"{name}[0]", lo, low, high)
    check_range(f"{name}[1]", hi, lo, high)


@dataclass(frozen=True)
class AbnormalityProfile:
    """A seeded sampler of abnormal devices.

    Fractions are per device, drawn independently; ``(lo, hi)`` ranges are uniform. If
    ``abnormal_gpus`` is set, exactly that many GPUs are made slow (σ drawn from ``slow_factor``),
    which is how the paper's testbed had one abnormal GPU.

    Attributes:
        name: Profile name.
        slow_gpu_frac: Fraction of GPUs that are stragglers.
        slow_factor: Range of σ for stragglers (>= 1).
        failed_gpu_frac: Fraction of GPUs that are failed (unusable).
        failprone_gpu_frac: Fraction of GPUs that are failure-prone.
        gpu_fail_prob: Range of π for failure-prone GPUs.
        degraded_link_frac: Fraction of links (above the GPUs) with degraded bandwidth.
        degradation: Range of ρ for degraded links, in (0, 1].
        failprone_link_frac: Fraction of links (above the GPUs) that are failure-prone.
        link_fail_prob: Range of π for failure-prone links.
        abnormal_gpus: If not ``None``, exactly this many slow GPUs instead of ``slow_gpu_frac``.
        onset_rate_per_gpu_hour: Online simulator: rate at which a healthy GPU turns abnormal, in
            ``[0, 60]`` (:data:`MAX_ONSET_RATE_PER_GPU_HOUR`).
        mean_abnormal_duration_s: Online simulator: mean duration of an abnormal episode, in
            ``[1, inf]`` seconds (``inf``: episodes never end).
    """

    name: str = "custom"
    slow_gpu_frac: float = 0.0
    slow_factor: tuple[float, float] = (1.2, 2.0)
    failed_gpu_frac: float = 0.0
    failprone_gpu_frac: float = 0.0
    gpu_fail_prob: tuple[float, float] = (0.01, 0.1)
    degraded_link_frac: float = 0.0
    degradation: tuple[float, float] = (0.5, 0.9)
    failprone_link_frac: float = 0.0
    link_fail_prob: tuple[float, float] = (0.01, 0.05)
    abnormal_gpus: int | None = None
    onset_rate_per_gpu_hour: float = 0.0
    mean_abnormal_duration_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in (
            "slow_gpu_frac",
            "failed_gpu_frac",
            "failprone_gpu_frac",
            "degraded_link_frac",
            "failprone_link_frac",
        ):
            check_range(f"{self.name}.{name}", getattr(self, name), 0.0, 1.0)
        for name in ("slow_factor", "gpu_fail_prob", "degradation", "link_fail_prob"):
            v = tuple(float(x) for x in getattr(self, name))
            if len(v) != 2:
                raise ConfigError(f"{self.name}.{name} must be a (low, high) pair, got {v!r}")
            object.__setattr__(self, name, v)
        _check_interval(f"{self.name}.slow_factor", self.slow_factor, 1.0, 1e6)
        _check_interval(f"{self.name}.gpu_fail_prob", self.gpu_fail_prob, 0.0, 0.999)
        _check_interval(f"{self.name}.degradation", self.degradation, 1e-6, 1.0)
        _check_interval(f"{self.name}.link_fail_prob", self.link_fail_prob, 0.0, 0.999)
        if self.abnormal_gpus is not None:
            check_range(f"{self.name}.abnormal_gpus", self.abnormal_gpus, 0)
        # Rates bound the simulator's event rate (docs/SIMULATOR.md, "Bounded work").
        rate = check_real(
            f"{self.name}.onset_rate_per_gpu_hour",
            self.onset_rate_per_gpu_hour,
            0.0,
            MAX_ONSET_RATE_PER_GPU_HOUR,
        )
        duration = check_real(
            f"{self.name}.mean_abnormal_duration_s",
            self.mean_abnormal_duration_s,
            MIN_ABNORMAL_DURATION_S,
            float("inf"),
        )
        object.__setattr__(self, "onset_rate_per_gpu_hour", rate)
        object.__setattr__(self, "mean_abnormal_duration_s", duration)

    def sample(self, topology: Topology, rng: np.random.Generator) -> Health:
        """Draw a :class:`Health` for ``topology``.

        Args:
            topology: The cluster.
            rng: Random generator (never the global one).
        """
        g, n = topology.num_gpus, topology.num_nodes
        slow = np.ones(g)
        if self.abnormal_gpus is not None:
            idx = rng.choice(g, size=min(self.abnormal_gpus, g), replace=False)
            slow[idx] = rng.uniform(*self.slow_factor, size=len(idx))
        else:
            m = rng.random(g) < self.slow_gpu_frac
            slow[m] = rng.uniform(*self.slow_factor, size=int(m.sum()))
        failed = rng.random(g) < self.failed_gpu_frac
        pg = np.zeros(g)
        m = rng.random(g) < self.failprone_gpu_frac
        pg[m] = rng.uniform(*self.gpu_fail_prob, size=int(m.sum()))
        # Links above the GPUs (servers' and switches' uplinks) can degrade or fail.
        eligible = ~topology.is_intra
        eligible[0] = False
        rho = np.ones(n)
        m = eligible & (rng.random(n) < self.degraded_link_frac)
        rho[m] = rng.uniform(*self.degradation, size=int(m.sum()))
        pl = np.zeros(n)
        m = eligible & (rng.random(n) < self.failprone_link_frac)
        pl[m] = rng.uniform(*self.link_fail_prob, size=int(m.sum()))
        # Every draw is inside a range checked in __post_init__ (uniform draws are in [lo, hi)).
        return Health.unchecked(
            gpu_slowdown=slow,
            gpu_failed=failed,
            gpu_fail_prob=pg,
            link_degradation=rho,
            link_fail_prob=pl,
        )


#: The built-in profiles.
PROFILES: dict[str, AbnormalityProfile] = {
    "none": AbnormalityProfile(name="none"),
    "mild": AbnormalityProfile(
        name="mild",
        slow_gpu_frac=0.05,
        slow_factor=(1.2, 2.0),
        failprone_gpu_frac=0.05,
        gpu_fail_prob=(0.02, 0.1),
        degraded_link_frac=0.05,
        degradation=(0.5, 0.9),
        failprone_link_frac=0.02,
        link_fail_prob=(0.01, 0.05),
        onset_rate_per_gpu_hour=0.002,
        mean_abnormal_duration_s=2 * 3600.0,
    ),
    "severe": AbnormalityProfile(
        name="severe",
        slow_gpu_frac=0.2,
        slow_factor=(1.5, 4.0),
        failed_gpu_frac=0.03,
        failprone_gpu_frac=0.15,
        gpu_fail_prob=(0.05, 0.3),
        degraded_link_frac=0.2,
        degradation=(0.2, 0.7),
        failprone_link_frac=0.1,
        link_fail_prob=(0.02, 0.2),
        onset_rate_per_gpu_hour=0.01,
        mean_abnormal_duration_s=4 * 3600.0,
    ),
    "testbed": AbnormalityProfile(name="testbed", abnormal_gpus=1, slow_factor=(2.0, 3.0)),
}


def get_profile(name: str | AbnormalityProfile = "none", **overrides: Any) -> AbnormalityProfile:
    """A built-in profile, optionally with some fields overridden.

    Raises:
        ConfigError: For an unknown profile name or field.
    """
    if isinstance(name, AbnormalityProfile):
        base = name
    else:
        try:
            base = PROFILES[name]
        except KeyError:
            raise ConfigError(
                f"unknown abnormality profile {name!r}; profiles: {', '.join(PROFILES)}"
            ) from None
    if not overrides:
        return base
    fields = {f.name for f in dataclasses.fields(AbnormalityProfile)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ConfigError(f"unknown abnormality field(s) {bad}; fields: {sorted(fields)}")
    return dataclasses.replace(base, **overrides)
