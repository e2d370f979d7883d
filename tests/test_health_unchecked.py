"""``AbnormalityProfile.sample`` builds its ``Health`` without re-running the checks
(``Health.unchecked``): every sampled health must still pass the checked constructor unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.model.health import PROFILES, AbnormalityProfile, Health
from crop_gym.model.topology import PRESETS, make_topology

FIELDS = [f.name for f in dataclasses.fields(Health)]


def _assert_passes_checked(h: Health) -> None:
    checked = Health(**{name: getattr(h, name) for name in FIELDS})
    for name in FIELDS:
        a, b = getattr(h, name), getattr(checked, name)
        assert a.dtype == b.dtype, name
        assert not a.flags.writeable, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("preset", ["testbed-8", "leafspine-64"])
def test_sampled_health_passes_the_checked_constructor(profile: str, preset: str) -> None:
    topo = make_topology(preset)
    for seed in range(50):
        _assert_passes_checked(PROFILES[profile].sample(topo, np.random.default_rng(seed)))


unit = st.floats(0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    fracs=st.tuples(unit, unit, unit, unit, unit),
    slow=st.tuples(st.floats(1.0, 1e6), st.floats(1.0, 1e6)).map(sorted),
    gpu_p=st.tuples(st.floats(0.0, 0.999), st.floats(0.0, 0.999)).map(sorted),
    rho=st.tuples(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0)).map(sorted),
    link_p=st.tuples(st.floats(0.0, 0.999), st.floats(0.0, 0.999)).map(sorted),
    preset=st.sampled_from(sorted(PRESETS)[:6]),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_valid_profile_samples_a_valid_health(
    fracs: tuple[float, ...],
    slow: list[float],
    gpu_p: list[float],
    rho: list[float],
    link_p: list[float],
    preset: str,
    seed: int,
) -> None:
    profile = AbnormalityProfile(
        slow_gpu_frac=fracs[0],
        failed_gpu_frac=fracs[1],
        failprone_gpu_frac=fracs[2],
        degraded_link_frac=fracs[3],
        failprone_link_frac=fracs[4],
        slow_factor=tuple(slow),  # type: ignore[arg-type]
        gpu_fail_prob=tuple(gpu_p),  # type: ignore[arg-type]
        degradation=tuple(rho),  # type: ignore[arg-type]
        link_fail_prob=tuple(link_p),  # type: ignore[arg-type]
    )
    _assert_passes_checked(profile.sample(make_topology(preset), np.random.default_rng(seed)))


def test_unchecked_needs_every_field() -> None:
    with pytest.raises(KeyError):
        Health.unchecked(gpu_slowdown=np.ones(2))
