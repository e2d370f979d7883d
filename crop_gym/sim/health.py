"""Device health over time: abnormal-device onsets and recoveries, GPU and link failures, repairs.

:class:`HealthProcess` is a self-contained, seeded event source. It owns its random generator and its
own event heap, and nothing the jobs or the policy do feeds back into it, so **the same seed gives
the same health timeline whatever the policy** (a fair comparison: every policy meets the same
stragglers and the same failures).

The model (docs/SIMULATOR.md explains it at length):

* **Chronic abnormalities.** At time 0 the profile's snapshot is drawn
  (:meth:`~crop_gym.model.health.AbnormalityProfile.sample`): slow GPUs (σ), failure-prone GPUs and links
  (π), degraded links (ρ), failed GPUs. With ``chronic_abnormalities`` (the default) σ, π and ρ of
  the snapshot last for the whole run; otherwise they are the initial episodes and recover after
  exponential durations. GPUs the snapshot marks failed are under repair at time 0.
* **Transient episodes.** Every device not already in an episode turns abnormal at the profile's
  ``onset_rate_per_gpu_hour`` (Poisson; links use the same rate per eligible link). The kind is
  drawn in proportion to the profile's fractions: for a GPU slow (``slow_gpu_frac``), failure-prone
  (``failprone_gpu_frac``) or failed (``failed_gpu_frac``: a hard failure); for a link degraded
  (``degraded_link_frac``) or failure-prone (``failprone_link_frac``). The value is drawn from the
  profile's range; an episode lasts an exponential time of mean ``mean_abnormal_duration_s``. The
  effective values combine chronic and episode: ``σ = max``, ``ρ = min``,
  ``π = 1 - (1-π_chronic)(1-π_episode)``.
* **Failures.** A device with π > 0 fails at the constant hazard ``λ = -ln(1-π)/H``
  (``H = failure_horizon_s``), so that it fails within ``H`` with probability π, as the objective's
  survival term assumes; the clock is redrawn whenever π changes (memoryless). A failed GPU is
  unusable until it is repaired after an exponential time of mean ``mean_repair_s``. A link failure
  is a transient fault: every job whose ring crosses it crashes, the link stays usable.
* **Scripted failures** ``(time, gpu[, repair_s])`` can be added (tests, replaying a failure log).

Every event that an event at time ``t`` schedules (the next onset, a failure clock, a repair, a
recovery) lies strictly after ``t`` (at least one float step), so the events of one instant are
finitely many, and :attr:`HealthProcess.max_events_per_hour` bounds their mean rate.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_int, check_real
from crop_gym.model.health import AbnormalityProfile, Health
from crop_gym.model.topology import Topology
from crop_gym.sim.config import MAX_SECONDS, SimConfig

__all__ = ["HealthChange", "HealthProcess", "ScriptedFailure"]

#: ``(time_s, gpu)`` or ``(time_s, gpu, repair_s)``.
ScriptedFailure = tuple[float, int] | tuple[float, int, float]

# Event kinds (ints keep heap entries cheap and comparable).
_ONSET_GPU, _ONSET_LINK, _RECOVER_GPU, _RECOVER_LINK, _FAIL_GPU, _FAIL_LINK, _REPAIR, _SCRIPTED = (
    range(8)
)


def _later(t: float, dt: float) -> float:
    """``t + dt``, but at least the next float after ``t`` (an event never reschedules itself at
    its own instant, whatever the rounding)."""
    return max(t + dt, math.nextafter(t, math.inf))


@dataclass
class HealthChange:
    """What happened to the devices at one instant.

    Attributes:
        time: Simulated time, seconds.
        failed_gpus: GPUs that failed now (their jobs must be stopped before the new health applies).
        repaired_gpus: GPUs repaired now.
        failed_links: Links that had a transient fault now (their jobs crash).
        changed_gpus: GPUs whose σ, π or failed flag changed.
        changed_links: Links whose ρ or π changed.
        onsets: Abnormal episodes that started.
        recoveries: Abnormal episodes that ended.
    """

    time: float
    failed_gpus: list[int] = field(default_factory=list)
    repaired_gpus: list[int] = field(default_factory=list)
    failed_links: list[int] = field(default_factory=list)
    changed_gpus: set[int] = field(default_factory=set)
    changed_links: set[int] = field(default_factory=set)
    onsets: int = 0
    recoveries: int = 0

    @property
    def health_changed(self) -> bool:
        """Whether the :class:`~crop_gym.model.health.Health` differs from before."""
        return bool(self.changed_gpus or self.changed_links)


def _check_scripted(k: int, item: object, num_gpus: int) -> tuple[float, int, float | None]:
    """Validate the ``k``-th scripted failure; return ``(time_s, gpu, repair_s or None)``."""
    where = f"scripted failure #{k} {item!r}"
    if not isinstance(item, tuple | list) or len(item) not in (2, 3):
        raise ConfigError(f"{where}: expected (time_s, gpu[, repair_s])")
    t = check_real(f"{where}: time_s", item[0], 0.0, MAX_SECONDS)
    gpu = check_int(f"{where}: gpu", item[1], 0, num_gpus - 1)
    repair = None
    if len(item) == 3:
        repair = check_real(f"{where}: repair_s", item[2], 0.0, math.inf, low_inclusive=False)
    return t, gpu, repair


class HealthProcess:
    """Seeded generator of device-health events (see the module docstring).

    Args:
        topology: The cluster.
        profile: Abnormality profile.
        config: Simulator options (failure horizon, repair time, which processes are on).
        rng: The process's own random generator.
        scripted_failures: Extra GPU failures at fixed times.
    """

    def __init__(
        self,
        topology: Topology,
        profile: AbnormalityProfile,
        config: SimConfig,
        rng: np.random.Generator,
        scripted_failures: Sequence[ScriptedFailure] = (),
    ) -> None:
        self.topology = topology
        self.profile = profile
        self.config = config
        self.rng = rng
        g, n = topology.num_gpus, topology.num_nodes
        snap = profile.sample(topology, rng)
        self.failed = snap.gpu_failed.copy()
        if config.chronic_abnormalities:
            self._sig_c = snap.gpu_slowdown.copy()
            self._pig_c = snap.gpu_fail_prob.copy()
            self._rho_c = snap.link_degradation.copy()
            self._pil_c = snap.link_fail_prob.copy()
            self._sig_e, self._pig_e = np.ones(g), np.zeros(g)
            self._rho_e, self._pil_e = np.ones(n), np.zeros(n)
        else:
            self._sig_c, self._pig_c = np.ones(g), np.zeros(g)
            self._rho_c, self._pil_c = np.ones(n), np.zeros(n)
            self._sig_e = snap.gpu_slowdown.copy()
            self._pig_e = snap.gpu_fail_prob.copy()
            self._rho_e = snap.link_degradation.copy()
            self._pil_e = snap.link_fail_prob.copy()
        if not config.gpu_failures:
            self._pig_c[:] = 0.0
            self._pig_e[:] = 0.0
        if not config.link_failures:
            self._pil_c[:] = 0.0
            self._pil_e[:] = 0.0
        self.sigma = np.maximum(self._sig_c, self._sig_e)
        self.pi_gpu = 1.0 - (1.0 - self._pig_c) * (1.0 - self._pig_e)
        self.rho = np.minimum(self._rho_c, self._rho_e)
        self.pi_link = 1.0 - (1.0 - self._pil_c) * (1.0 - self._pil_e)
        self._eligible_links = np.flatnonzero(~topology.is_intra & (np.arange(n) > 0))
        self._fail_ver_g = np.zeros(g, dtype=np.int64)
        self._fail_ver_l = np.zeros(n, dtype=np.int64)
        self._ep_ver_g = np.zeros(g, dtype=np.int64)
        self._ep_ver_l = np.zeros(n, dtype=np.int64)
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._health: Health | None = None
        # Counters.
        self.onsets = 0
        self.recoveries = 0
        self.gpu_failures = 0
        self.link_failures = 0
        self.repairs = 0

        # Onset processes (thinned Poisson over all devices; episodes hit only devices not in one).
        rate = profile.onset_rate_per_gpu_hour / 3600.0 if config.transient_abnormalities else 0.0
        w = self._gpu_kind_weights()
        self._onset_rate_g = rate * g if w.sum() > 0 else 0.0
        wl = self._link_kind_weights()
        self._onset_rate_l = (
            rate * len(self._eligible_links) if wl.sum() > 0 and len(self._eligible_links) else 0.0
        )
        if self._onset_rate_g > 0:
            self._push(self.rng.exponential(1.0 / self._onset_rate_g), _ONSET_GPU, 0, 0)
        if self._onset_rate_l > 0:
            self._push(self.rng.exponential(1.0 / self._onset_rate_l), _ONSET_LINK, 0, 0)
        # Initial episodes (non-chronic snapshot) recover over time.
        mean_d = profile.mean_abnormal_duration_s
        for i in np.flatnonzero((self._sig_e > 1.0) | (self._pig_e > 0)):
            self._push(self.rng.exponential(mean_d), _RECOVER_GPU, int(i), int(self._ep_ver_g[i]))
        for i in np.flatnonzero((self._rho_e < 1.0) | (self._pil_e > 0)):
            self._push(self.rng.exponential(mean_d), _RECOVER_LINK, int(i), int(self._ep_ver_l[i]))
        # GPUs failed at time 0 are under repair.
        for i in np.flatnonzero(self.failed):
            self._push(self.rng.exponential(config.mean_repair_s), _REPAIR, int(i), 0)
        # Failure clocks.
        for i in np.flatnonzero(self.pi_gpu > 0):
            if not self.failed[i]:
                self._arm_gpu(int(i), 0.0)
        for i in np.flatnonzero(self.pi_link > 0):
            self._arm_link(int(i), 0.0)
        self._scripted_repair: list[float | None] = []
        for k, item in enumerate(scripted_failures):
            t, gpu, repair = _check_scripted(k, item, g)
            self._push(t, _SCRIPTED, gpu, len(self._scripted_repair))
            self._scripted_repair.append(repair)

    @property
    def max_events_per_hour(self) -> float:
        """An upper bound of the mean number of health events per simulated hour.

        ``3 r (G + L) + 2 λ_G G + λ_L L`` with ``r`` the onset rate per device-hour (onset attempts,
        their recoveries and the repairs of "failed" onsets), ``G`` GPUs, ``L`` eligible links and
        ``λ`` the largest failure hazard per hour (a chronic and an episode π combined, each at most
        the top of the profile's range; a GPU failure is followed by one repair). Initial episodes,
        GPUs failed at time 0 and scripted failures add a fixed number of events on top.
        """
        g, nl = self.topology.num_gpus, len(self._eligible_links)
        r = (self._onset_rate_g + self._onset_rate_l) * 3600.0
        h = self.config.failure_horizon_s / 3600.0

        def lam(hi: float, on: bool) -> float:  # π ≤ 1 - (1 - hi)^2
            return 2.0 * -math.log1p(-hi) / h if on else 0.0

        lam_g = lam(self.profile.gpu_fail_prob[1], self.config.gpu_failures)
        lam_l = lam(self.profile.link_fail_prob[1], self.config.link_failures)
        return 3.0 * r + 2.0 * lam_g * g + lam_l * nl

    # ----------------------------------------------------------------- helpers
    def _gpu_kind_weights(self) -> NDArray[np.float64]:
        p = self.profile
        failed = p.failed_gpu_frac if self.config.gpu_failures else 0.0
        failprone = p.failprone_gpu_frac if self.config.gpu_failures else 0.0
        return np.array([p.slow_gpu_frac, failprone, failed])

    def _link_kind_weights(self) -> NDArray[np.float64]:
        p = self.profile
        failprone = p.failprone_link_frac if self.config.link_failures else 0.0
        return np.array([p.degraded_link_frac, failprone])

    def _push(self, t: float, kind: int, idx: int, ver: int) -> None:
        heapq.heappush(self._heap, (float(t), self._seq, kind, idx, ver))
        self._seq += 1

    def _arm_gpu(self, i: int, now: float) -> None:
        self._fail_ver_g[i] += 1
        pi = self.pi_gpu[i]
        if pi > 0 and not self.failed[i] and self.config.gpu_failures:
            lam = -math.log1p(-pi) / self.config.failure_horizon_s
            if lam > 0:  # else the hazard underflowed: the GPU never fails
                dt = self.rng.exponential(1.0 / lam)
                self._push(_later(now, dt), _FAIL_GPU, i, int(self._fail_ver_g[i]))

    def _arm_link(self, e: int, now: float) -> None:
        self._fail_ver_l[e] += 1
        pi = self.pi_link[e]
        if pi > 0 and self.config.link_failures:
            lam = -math.log1p(-pi) / self.config.failure_horizon_s
            if lam > 0:
                dt = self.rng.exponential(1.0 / lam)
                self._push(_later(now, dt), _FAIL_LINK, e, int(self._fail_ver_l[e]))

    def _stale(self, kind: int, idx: int, ver: int) -> bool:
        if kind == _FAIL_GPU:
            return ver != self._fail_ver_g[idx] or bool(self.failed[idx])
        if kind == _FAIL_LINK:
            return ver != self._fail_ver_l[idx]
        if kind == _RECOVER_GPU:
            return ver != self._ep_ver_g[idx]
        if kind == _RECOVER_LINK:
            return ver != self._ep_ver_l[idx]
        return False

    # ------------------------------------------------------------------ public
    def copy(self) -> HealthProcess:
        """An independent copy whose future is this process's: the pending events, the device
        states and the random generator's state are copied, so both draw the same timeline from
        here on (the health timeline does not depend on placements). The topology, the profile,
        the configuration and the current :class:`Health` (all immutable) are shared."""
        shared = (self.topology, self.profile, self.config, self._health)
        return copy.deepcopy(self, memo={id(x): x for x in shared if x is not None})

    def next_time(self) -> float:
        """Time of the next health event (``inf`` if none will ever happen)."""
        heap = self._heap
        while heap and self._stale(heap[0][2], heap[0][3], heap[0][4]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def health(self) -> Health:
        """The current :class:`~crop_gym.model.health.Health` (cached until the next change)."""
        if self._health is None:
            self._health = Health(self.sigma, self.failed, self.pi_gpu, self.rho, self.pi_link)
        return self._health

    def _fail(
        self, i: int, now: float, change: HealthChange, repair_s: float | None = None
    ) -> None:
        if self.failed[i]:
            return
        self.failed[i] = True
        self.gpu_failures += 1
        self._fail_ver_g[i] += 1
        change.failed_gpus.append(i)
        change.changed_gpus.add(i)
        rep = self.rng.exponential(self.config.mean_repair_s) if repair_s is None else repair_s
        self._push(_later(now, rep), _REPAIR, i, 0)

    def pop(self, until: float) -> HealthChange:
        """Process every event at or before ``until`` (in time order) and report what changed."""
        change = HealthChange(until)
        rng = self.rng
        mean_d = self.profile.mean_abnormal_duration_s
        while self.next_time() <= until:
            t, _, kind, idx, ver = heapq.heappop(self._heap)
            if kind == _ONSET_GPU:
                self._push(_later(t, rng.exponential(1.0 / self._onset_rate_g)), _ONSET_GPU, 0, 0)
                i = int(rng.integers(self.topology.num_gpus))
                w = self._gpu_kind_weights()
                which = int(rng.choice(3, p=w / w.sum()))
                if self.failed[i] or self._sig_e[i] > 1.0 or self._pig_e[i] > 0:
                    continue  # thinning: the device is already abnormal
                if which == 2:
                    self._fail(i, t, change)
                    continue
                if which == 0:
                    self._sig_e[i] = rng.uniform(*self.profile.slow_factor)
                    self.sigma[i] = max(self._sig_c[i], self._sig_e[i])
                else:
                    self._pig_e[i] = rng.uniform(*self.profile.gpu_fail_prob)
                    self.pi_gpu[i] = 1.0 - (1.0 - self._pig_c[i]) * (1.0 - self._pig_e[i])
                    self._arm_gpu(i, t)
                self.onsets += 1
                change.onsets += 1
                change.changed_gpus.add(i)
                self._ep_ver_g[i] += 1
                self._push(
                    _later(t, rng.exponential(mean_d)), _RECOVER_GPU, i, int(self._ep_ver_g[i])
                )
            elif kind == _ONSET_LINK:
                self._push(_later(t, rng.exponential(1.0 / self._onset_rate_l)), _ONSET_LINK, 0, 0)
                e = int(self._eligible_links[rng.integers(len(self._eligible_links))])
                w = self._link_kind_weights()
                which = int(rng.choice(2, p=w / w.sum()))
                if self._rho_e[e] < 1.0 or self._pil_e[e] > 0:
                    continue
                if which == 0:
                    self._rho_e[e] = rng.uniform(*self.profile.degradation)
                    self.rho[e] = min(self._rho_c[e], self._rho_e[e])
                else:
                    self._pil_e[e] = rng.uniform(*self.profile.link_fail_prob)
                    self.pi_link[e] = 1.0 - (1.0 - self._pil_c[e]) * (1.0 - self._pil_e[e])
                    self._arm_link(e, t)
                self.onsets += 1
                change.onsets += 1
                change.changed_links.add(e)
                self._ep_ver_l[e] += 1
                self._push(
                    _later(t, rng.exponential(mean_d)), _RECOVER_LINK, e, int(self._ep_ver_l[e])
                )
            elif kind == _RECOVER_GPU:
                self._ep_ver_g[idx] += 1
                had_pi = self._pig_e[idx] > 0
                self._sig_e[idx], self._pig_e[idx] = 1.0, 0.0
                self.sigma[idx] = self._sig_c[idx]
                self.pi_gpu[idx] = self._pig_c[idx]
                if had_pi:
                    self._arm_gpu(idx, t)
                self.recoveries += 1
                change.recoveries += 1
                change.changed_gpus.add(idx)
            elif kind == _RECOVER_LINK:
                self._ep_ver_l[idx] += 1
                had_pi = self._pil_e[idx] > 0
                self._rho_e[idx], self._pil_e[idx] = 1.0, 0.0
                self.rho[idx] = self._rho_c[idx]
                self.pi_link[idx] = self._pil_c[idx]
                if had_pi:
                    self._arm_link(idx, t)
                self.recoveries += 1
                change.recoveries += 1
                change.changed_links.add(idx)
            elif kind == _FAIL_GPU:
                self._fail(idx, t, change)
            elif kind == _SCRIPTED:
                self._fail(idx, t, change, self._scripted_repair[ver])
            elif kind == _FAIL_LINK:
                self.link_failures += 1
                change.failed_links.append(idx)
                self._arm_link(idx, t)
            elif kind == _REPAIR and self.failed[idx]:
                self.failed[idx] = False
                self.repairs += 1
                change.repaired_gpus.append(idx)
                change.changed_gpus.add(idx)
                self._arm_gpu(idx, t)
        if change.health_changed:
            self._health = None
        return change
