"""The queue view and the action table (:mod:`crop_gym.envs.actions`) against plain references."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import table_of

from crop_gym.envs.actions import action_index, select_view
from crop_gym.model.health import PROFILES
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology

MODELS = ("resnet50", "vgg16", "bert")
SIZES = (1, 2, 4, 8, 16)


def _select_reference(
    infos: list[tuple[int, int]], Q: int, grouping: bool, fits: set[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The original job-by-job view selection (sizes, slot groups, copies, positions)."""
    group_of_size: dict[int, int] = {}
    sizes: list[int] = []
    slot_of: dict[int, int] = {}
    copies: list[int] = []
    slot_group: list[int] = []
    pos: list[int] = []
    n = 0
    for i, (k, cls) in enumerate(infos):
        if grouping:
            q = slot_of.get(cls)
            if q is not None:
                copies[q] += 1
                continue
            if n == Q:
                continue
        elif n == Q:
            break
        gi = group_of_size.get(k)
        if gi is None:
            gi = -1
            if k in fits:
                gi = len(sizes)
                sizes.append(k)
            group_of_size[k] = gi
        if gi < 0:
            continue
        slot_of[cls] = n
        copies.append(1)
        slot_group.append(gi)
        pos.append(i)
        n += 1
    return sizes, slot_group, copies, pos


@pytest.mark.parametrize("grouping", [True, False])
def test_view_selection_matches_the_job_by_job_rule(grouping: bool) -> None:
    rng = np.random.default_rng(8)
    for trial in range(300):
        Q = int(rng.integers(1, 12))
        n_cls = int(rng.integers(1, 15))
        # A class is a (model, size, batch) triple: jobs of one class are identical.
        cls_job = [
            (str(rng.choice(MODELS)), int(rng.choice(SIZES)), 32 * (c + 1)) for c in range(n_cls)
        ]
        classes = [int(c) for c in rng.integers(0, n_cls, size=int(rng.integers(0, 40)))]
        pending = [
            Job(f"t{trial}j{i}", cls_job[c][0], cls_job[c][1], cls_job[c][2])
            for i, c in enumerate(classes)
        ]
        free = int(rng.integers(0, 20))
        fits = {k for k in SIZES if k <= free}
        group = np.array(classes if grouping else range(len(classes)), dtype=np.int64)
        num_gpus = np.array([j.num_gpus for j in pending], dtype=np.int64)
        positions, copies = select_view(group, num_gpus, free, Q)
        want = _select_reference([(cls_job[c][1], c) for c in classes], Q, grouping, fits)
        assert positions.tolist() == want[3] and copies.tolist() == want[2]


def _states(n: int) -> list[tuple[ClusterState, list[Job]]]:
    rng = np.random.default_rng(3)
    topo = make_topology("leafspine-64")
    out = []
    for t in range(n):
        st = ClusterState(topo, PROFILES["severe"].sample(topo, rng))
        free = np.flatnonzero(st.free_mask)
        for b in range(int(rng.integers(0, 6))):
            k = int(rng.choice([1, 2, 4, 8]))
            free = np.flatnonzero(st.free_mask)
            if len(free) >= k:
                st.add(
                    Job(f"bg{t}.{b}", str(rng.choice(MODELS)), k, 64), rng.choice(free, k, False)
                )
        pending = [
            Job(f"q{t}.{i}", str(rng.choice(MODELS)), int(rng.choice(SIZES)), 64)
            for i in range(int(rng.integers(0, 12)))
        ]
        out.append((st, pending))
    return out


@pytest.mark.parametrize("grouping", [True, False])
def test_action_table_rows_masks_and_gains(grouping: bool) -> None:
    """Every valid row is a candidate of its slot's job; the mask marks exactly those rows and
    stop; each row's gains are the ΔF that adding it gives."""
    Q, C = 5, 4
    for st, pending in _states(12):
        t = table_of(st, pending, num_slots=Q, max_candidates=C, group_identical=grouping)
        assert t.mask[-1] and t.mask.sum() == len(t.row_slot) + 1
        assert t.has_placement == (len(t.row_slot) > 0)
        np.testing.assert_array_equal(np.flatnonzero(t.mask[:-1]), np.sort(t.row_action))
        for r, a in enumerate(t.row_action.tolist()):
            q, c = t.decode(a)  # type: ignore[misc]
            assert t.row_of(q, c) == r
            job, gpus = t.jobs[q], t.gpus(q, c)
            assert t.index_of(job.job_id, gpus) == a
            after = st.copy()
            delta = after.add(job, gpus, facts=t.facts.take(r))
            assert abs(t.gains.total[r] - delta) <= 1e-9
            assert abs(t.gains.own[r] - after.job_value(job.job_id)) <= 1e-9
        assert t.decode(t.stop_action) is None and t.is_stop(t.stop_action)


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (3, 3),
        (np.int8(3), 3),
        (3.0, 3),
        (np.array([3]), 3),
        (True, None),
        (np.bool_(False), None),
        (np.array([True]), None),
        (2.5, None),
        (float("nan"), None),
        ("3", None),
        (None, None),
        (np.array([1, 2]), None),
    ],
)
def test_action_index(action: Any, expected: int | None) -> None:
    assert action_index(action) == expected
