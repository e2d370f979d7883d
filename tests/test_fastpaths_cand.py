"""The candidate generator's fast paths give exactly what their reference twins give.

See ``tests/test_fastpaths.py`` for the plain-Python and numpy generators compared as a whole; these
tests pin the pieces: the health-first ranking of a switch subtree in plain Python, the assembly of
the rows, and the batch entry point :func:`~crop_gym.candidates.candidate_sets`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from test_fastpaths import _health

import crop_gym.candidates as cand
from crop_gym.candidates.candidate_set import _assemble, _Row
from crop_gym.candidates.data import _HealthData, _picker, _TopoData
from crop_gym.candidates.small import _bits, _Small
from crop_gym.candidates.vectorised import _best_by_rank, _gpu_rank, _Shared
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState
from crop_gym.topology import build_tree, make_topology


def _states(preset: str, profile: str, seed: int, n: int) -> Iterator[ClusterState]:
    """Random states of one cluster: random placements, some removed again."""
    topo = make_topology(preset)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        st = ClusterState(topo, _health(profile, topo, rng))
        target = rng.uniform(0.0, 0.95) * topo.num_gpus
        t = 0
        while topo.num_gpus - st.num_free < target:
            free = np.flatnonzero(st.free_mask)
            k = int(min(len(free), rng.choice([1, 2, 3, 4, 8])))
            st.add(Job(f"j{t}", "resnet50", k, 64 * k), rng.choice(free, size=k, replace=False))
            t += 1
            if rng.random() < 0.2:
                st.remove(sorted(st.jobs)[int(rng.integers(len(st.jobs)))])
        yield st


@pytest.mark.parametrize(
    ("preset", "profile"),
    [("leafspine-64", "severe"), ("leafspine-64", "ties"), ("pollux-16x4", "ties")],
)
def test_switch_ranking_in_python_matches_the_global_numpy_rank(preset: str, profile: str) -> None:
    """``_Small._best_by_rank`` (keys for one subtree) picks the GPUs ``_best_by_rank`` picks
    with the global ranks of ``_gpu_rank``, in the same order, with the same badness sum."""
    checked = 0
    for st in _states(preset, profile, 3, 12):
        hd = _HealthData(st, True, _TopoData(st.topology))
        small = _Small(st, hd)
        free = st.free_mask
        srv_free = np.array([e.nf for e in small.srv], dtype=np.int64)
        rank = _gpu_rank(hd, free, srv_free)
        for d in small.sws:
            _, _, _, glo, ghi = d.spec
            for k in range(1, d.nf + 1):
                got = small._best_by_rank(d, k)
                want = _best_by_rank(rank, hd.q, glo, ghi, k)
                assert got[0] == want[0]
                assert got[1] == want[1]
                checked += 1
    assert checked > 100


def _assemble_reference(k: int, cap: int, singles: list[_Row], extras: list[_Row]) -> list[_Row]:
    """All rows in rank order, each GPU set kept once (its best row), capped."""
    kept: list[_Row] = []
    for row in sorted(singles + extras):
        if all(row[5] != r[5] for r in kept):
            kept.append(row)
    return kept[:cap]


def test_assemble_matches_the_plain_rule() -> None:
    """Rows of random shapes, extra rows that repeat a single-server row or each other or not."""
    rng = np.random.default_rng(5)
    for _ in range(400):
        k = int(rng.integers(1, 5))
        singles: list[_Row] = []
        for s in rng.permutation(8)[: int(rng.integers(0, 8))].tolist():
            q = float(rng.choice([1.0, 1.5, 2.0])) * k
            gpus = tuple(range(8 * s, 8 * s + k))
            singles.append((1, q, int(rng.integers(0, 8 - k + 1)), 10 + s, 0, gpus, q))
        singles.sort()
        extras: list[_Row] = []
        for node in rng.permutation(3)[: int(rng.integers(0, 4))].tolist():
            for kind in (1, 2):
                if rng.random() < 0.5:
                    continue
                if singles and rng.random() < 0.3:
                    gpus = singles[int(rng.integers(len(singles)))][5]  # a repeat
                    n_srv = 1
                elif extras and rng.random() < 0.3:
                    gpus, n_srv = extras[-1][5], extras[-1][0]  # a repeat of an extra row
                else:
                    gpus = tuple(sorted(rng.choice(64, size=k, replace=False).tolist()))
                    n_srv = len({g // 8 for g in gpus})
                q = float(rng.choice([1.0, 1.5, 2.0])) * k
                extras.append((n_srv, q, int(rng.integers(0, 9)), node, kind, gpus, q))
        cap = int(rng.choice([1, 3, 8, 40]))
        want = _assemble_reference(k, cap, singles, extras)
        got = _assemble(k, cap, list(singles), list(extras))
        assert got.row_keys() == tuple(r[5] for r in want)
        assert got.quality.tolist() == [r[6] for r in want]
        assert got.num_servers.tolist() == [r[0] for r in want]
        assert got.subtree.tolist() == [r[3] for r in want]


@pytest.mark.parametrize("preset", ["leafspine-64", "n128g8"])
def test_candidate_sets_match_candidate_placements(preset: str) -> None:
    """The batch entry point gives, size by size, the sets of single calls (also across the
    plain-Python and numpy generators, with sizes repeated and sizes already cached)."""
    for st in _states(preset, "mild", 7, 4):
        sizes = [8, 1, 3, 8, 16, 2, 33]
        for robust in (True, False):
            for cap in (1, 8):
                a = st.copy()
                cand.candidate_placements(a, 3, robust=robust, max_candidates=cap)  # cached
                got = cand.candidate_sets(a, sizes, robust=robust, max_candidates=cap)
                b = st.copy()
                want = [
                    cand.candidate_placements(b, k, robust=robust, max_candidates=cap)
                    for k in sizes
                ]
                assert len(got) == len(want)
                for x, y in zip(got, want, strict=True):
                    assert x.row_keys() == y.row_keys()
                    for f in ("gpus", "num_servers", "subtree", "quality"):
                        u, v = getattr(x, f), getattr(y, f)
                        assert u.dtype == v.dtype and np.array_equal(u, v), f


def test_candidate_sets_check_their_arguments() -> None:
    st = ClusterState(make_topology("leafspine-64"))
    with pytest.raises(ValueError):
        cand.candidate_sets(st, [1, 65])
    with pytest.raises(ValueError):
        cand.candidate_sets(st, [1], max_candidates=0)
    assert cand.candidate_sets(st, []) == []


def test_free_flags_from_the_bit_table_match_the_bitwise_rule() -> None:
    """A server's free flags in health order, read through ``_bits`` and the server's picker,
    are its bits of the free-GPU key taken one by one (servers of 1, 8 and 12 GPUs)."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 8, 12, 16):
        idx = rng.permutation(n).tolist()
        pick = _picker(idx)
        for key in rng.integers(1 << n, size=20).tolist():
            want = bytes([(key >> i) & 1 for i in idx])
            assert bytes(pick(_bits(key, n))) == want


@pytest.mark.parametrize("fanouts", [[2, 4, 1], [2, 2, 12], [3, 2, 16]])
def test_small_path_on_unusual_server_sizes_matches_a_fresh_numpy_computation(
    fanouts: list[int],
) -> None:
    """Servers of 1 GPU and of more than 8 GPUs (the free flags' wide path) give, along random
    placements and removals, the sets the numpy path computes from scratch."""
    topo = build_tree(fanouts, [1e10, 1e10, 1e11])
    rng = np.random.default_rng(5)
    st = ClusterState(topo, _health("severe", topo, rng))
    assert _TopoData(topo).small
    ks = [k for k in (1, 2, 3, 5, 8, 12, 16, 20) if k <= topo.num_gpus]
    for t in range(60):
        if st.jobs and (rng.random() < 0.3 or st.num_free == 0):
            st.remove(sorted(st.jobs)[int(rng.integers(len(st.jobs)))])
        else:
            k = int(min(st.num_free, rng.choice(ks)))
            gpus = rng.choice(np.flatnonzero(st.free_mask), size=k, replace=False)
            st.add(Job(f"j{t}", "resnet50", k, 64 * k), gpus)
        for k in ks:
            got = cand.candidate_placements(st, k)
            td = _TopoData(topo)
            td.small = False
            want = _Shared(st, _HealthData(st, True, td)).compute(k, 8)
            for f in ("gpus", "num_servers", "subtree", "quality"):
                x, y = getattr(got, f), getattr(want, f)
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f
