"""``bc.balance``: how several demonstration sets share a behaviour-cloning epoch."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("torch")

from crop_gym.agents.imitation import BCConfig, epoch_batches

pytestmark = pytest.mark.rl


def _sets() -> list[np.ndarray]:
    # A large set of 10 states and a small one of 3 (e.g. Placement-v0 beside the 8-GPU testbed).
    return [np.arange(10, dtype=np.int64), np.arange(3, dtype=np.int64)]


def test_states_visits_every_state_once() -> None:
    batches = epoch_batches(_sets(), 4, "states", np.random.default_rng(0))
    # 10 states in minibatches of 4: 4 + 4 + 2; 3 states: one minibatch of 3.
    assert sorted((g, len(b)) for g, b in batches) == [(0, 2), (0, 4), (0, 4), (1, 3)]
    for g, n in ((0, 10), (1, 3)):
        seen = np.concatenate([b for s, b in batches if s == g])
        assert sorted(seen.tolist()) == list(range(n))


def test_sets_draws_the_small_set_as_often_as_the_large() -> None:
    batches = epoch_batches(_sets(), 4, "sets", np.random.default_rng(0))
    per_set = Counter(g for g, _ in batches)
    # The large set has 3 minibatches, so the small one is permuted three times (3 minibatches
    # of its 3 states): every one of its states is seen 3 times, the large set's once.
    assert per_set == {0: 3, 1: 3}
    small = Counter(np.concatenate([b for g, b in batches if g == 1]).tolist())
    assert small == {0: 3, 1: 3, 2: 3}
    large = np.concatenate([b for g, b in batches if g == 0])
    assert sorted(large.tolist()) == list(range(10))


def test_sets_cuts_the_last_pass_short() -> None:
    # 9 states in minibatches of 2: 5 minibatches; 4 states: 2 per pass, so 2 + 2 + 1 of a third.
    train = [np.arange(9, dtype=np.int64), np.arange(4, dtype=np.int64)]
    batches = epoch_batches(train, 2, "sets", np.random.default_rng(1))
    assert Counter(g for g, _ in batches) == {0: 5, 1: 5}
    assert sum(len(b) for g, b in batches if g == 1) == 10


def test_states_is_the_former_order() -> None:
    # The default keeps the minibatch order of runs made before the option existed: one
    # permutation per set, then one over all minibatches.
    rng = np.random.default_rng(7)
    train = _sets()
    expected = []
    for g, idx in enumerate(train):
        perm = rng.permutation(idx)
        expected += [(g, perm[i : i + 4]) for i in range(0, len(perm), 4)]
    expected = [expected[i] for i in rng.permutation(len(expected))]
    got = epoch_batches(train, 4, "states", np.random.default_rng(7))
    assert [(g, b.tolist()) for g, b in got] == [(g, b.tolist()) for g, b in expected]


def test_one_set_is_not_shuffled_across_sets() -> None:
    got = epoch_batches([np.arange(5, dtype=np.int64)], 2, "sets", np.random.default_rng(3))
    assert [len(b) for _, b in got] == [2, 2, 1]


def test_unknown_balance_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"bc.balance='episodes' must be one of 'states', 'sets'"):
        BCConfig.from_dict({"balance": "episodes"})
