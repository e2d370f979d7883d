"""The placement facts' Σ g_i² column (model/facts.py), by hand and against a brute-force count."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import FACT_COLUMNS, padded_rows, placement_facts
from crop_gym.model.health import Health
from crop_gym.model.topology import build_tree

GB = 1e9
# 2 switches x 4 servers x 4 GPUs (GPU g is on server g // 4).
TOPO = build_tree([2, 4, 4], [10 * GB, 5 * GB, 50 * GB], [5e-6, 2e-6, 1e-6])
HEALTHY = Health.healthy(TOPO)


def test_sum_g2_by_hand() -> None:
    placements = [
        np.array([0]),  # 1
        np.array([0, 1, 2]),  # 3 on one server: 9
        np.array([0, 1, 2, 4, 5, 8, 12]),  # 3,2,1,1 on four servers: 9 + 4 + 1 + 1 = 15
        np.array([0, 1, 4, 5, 8, 12, 13, 14]),  # 2,2,1,3: 4 + 4 + 1 + 9 = 18
        np.array([0, 1, 2, 4, 5, 6, 8, 12]),  # 3,3,1,1: 20 (same k, s, g as the one below)
        np.array([0, 1, 2, 4, 5, 8, 9, 12]),  # 3,2,2,1: 18
    ]
    f = placement_facts(TOPO, HEALTHY, placements)
    assert FACT_COLUMNS[-1] == "sum_g2" and f.values.shape[1] == len(FACT_COLUMNS)
    assert f.sum_g2.tolist() == [1, 9, 15, 18, 20, 18]
    assert f.k[4] == f.k[5] and f.s[4] == f.s[5] and f.g[4] == f.g[5]
    # Unsorted GPUs and padded blocks give the same.
    g = placement_facts(TOPO, HEALTHY, [np.array([12, 0, 8, 5, 4, 2, 1])])
    assert g.sum_g2.tolist() == [15]
    assert placement_facts(TOPO, HEALTHY, np.zeros((0, 0), dtype=np.int64)).values.shape == (
        0,
        len(FACT_COLUMNS),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sets(st.integers(0, TOPO.num_gpus - 1), min_size=1, max_size=12), min_size=1, max_size=6
    )
)
def test_sum_g2_is_the_count_per_server(sets: list[set[int]]) -> None:
    placements = [np.array(sorted(s)) for s in sets]
    want = [float(sum(c * c for c in np.bincount(TOPO.gpu_server[p]))) for p in placements]
    assert placement_facts(TOPO, HEALTHY, placements).sum_g2.tolist() == want
    keys = [tuple(int(x) for x in p) for p in placements]
    # The conditions' memo (compiled kernel where numba is installed) and the numpy reference.
    for backend in ("numba", "numpy"):
        cond = Conditions(TOPO, HEALTHY)
        assert cond.facts(keys).sum_g2.tolist() == want
        P, k = padded_rows(keys)
        assert cond.facts_of_rows(P, k, backend=backend).sum_g2.tolist() == want
    # Two regions of a replicated cluster, evaluated together, agree row for row.
    two = TOPO.replicated(2)
    shifted = [tuple(g + TOPO.num_gpus for g in key) for key in keys[::-1]]
    both = Conditions(two, Health.healthy(two)).facts(keys + shifted)
    assert both.sum_g2.tolist() == want + want[::-1]
