"""The budgeted search (baselines/search.py): never below CROP, its F is its placements' F."""

from __future__ import annotations

import numpy as np
import pytest

from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.instances import small_instance
from crop_gym.baselines.search import rollout_search
from crop_gym.errors import ConfigError
from crop_gym.policy import apply
from crop_gym.scenario import ScenarioSampler


@pytest.mark.parametrize("depth", [1, 2])
def test_search_is_never_below_crop_and_reports_its_own_f(depth: int) -> None:
    for seed in range(8):
        st, q = small_instance(np.random.default_rng(seed), cluster="tiny-16", n_jobs=(3, 6))
        crop = crop_greedy(st, q, max_candidates=8).F
        before = st.F
        res = rollout_search(st, q, depth=depth, top=4)
        got = res.F
        assert before == st.F  # the input state is not mutated
        after = st.copy()
        apply(after, res.placements)
        assert abs(got - after.F) < 1e-9
        assert got >= crop - 1e-9
        assert res.completions >= 1


def test_search_improves_on_crop_on_severe() -> None:
    sampler = ScenarioSampler("default-severe")
    inst = sampler.sample(np.random.default_rng(10**9))
    crop = crop_greedy(inst.state, inst.queue, max_candidates=8).F
    got = rollout_search(inst.state, inst.queue, depth=1, top=6).F
    assert got > crop * 1.02


def test_bad_depth_is_a_config_error() -> None:
    st, q = small_instance(np.random.default_rng(0), cluster="testbed-8")
    with pytest.raises(ConfigError, match="depth"):
        rollout_search(st, q, depth=3)
