"""Statistics of predicted against measured step times (calibration/report.py), by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.calibration.measurements import Measurements
from crop_gym.calibration.report import evaluate, ordering_pairs, predictions_csv
from crop_gym.errors import ConfigError


def rows(spec: list[tuple[str, tuple[int, ...], float, float]]) -> Measurements:
    n = len(spec)
    width = max(len(p) for _, p, _, _ in spec)
    placement = np.array([list(p) + [0] * (width - len(p)) for _, p, _, _ in spec])
    return Measurements(
        app=np.array([a for a, *_ in spec]),
        model=np.array([a for a, *_ in spec]),
        kind=np.full(n, "placements"),
        placement=placement,
        local_bsz=np.array([b for *_, b, _ in spec], dtype=float),
        step_time=np.array([t for *_, t in spec], dtype=float),
        sync_time=np.full(n, np.nan),
        source=np.array([f"f.csv:{i + 2}" for i in range(n)]),
    )


M = rows(
    [
        ("a", (1,), 8, 1.0),
        ("a", (1, 1), 8, 1.2),
        ("a", (2,), 8, 1.1),
        ("a", (2, 2), 8, 1.5),
        ("a", (3, 1), 8, 1.4),
        ("a", (2, 2), 16, 2.0),
        ("c", (1,), 8, 1.0),
    ]
)
PRED = np.array([1.0, 1.3, 1.3, 1.45, 1.45, 2.2, 0.9])


def test_ordering_counts_ties_as_wrong() -> None:
    r = evaluate(PRED, M, spread_gpus=4)
    o, q = r.overall.ordering, r.overall.ordering_same_gpus
    # Ten pairs of row 0-4 (one app, one batch); 1-2 and 3-4 are predicted tied.
    assert (o.pairs, o.accuracy, o.ties) == (10, 0.8, 0.2)
    # At equal GPU count only 1-2 (k = 2) and 3-4 (k = 4) remain, both tied.
    assert (q.pairs, q.accuracy, q.ties) == (2, 0.0, 1.0)
    assert r.per_app["c"].ordering.pairs == 0 and r.per_app["c"].ordering.accuracy is None


def test_bias_by_nodes_and_spread_by_hand() -> None:
    r = evaluate(PRED, M, spread_gpus=4)
    bias = r.overall.bias_by_nodes
    assert bias[1] == pytest.approx(0.0)
    assert bias[2] == pytest.approx((1.45 / 1.4 - 1 + 1.3 / 1.2 - 1) / 2)
    sp = r.overall.spread
    assert sp is not None and sp.groups == 1
    assert sp.measured == pytest.approx(1.5 / 1.4) and sp.predicted == pytest.approx(1.0)
    assert sp.error == pytest.approx(1.4 / 1.5 - 1)
    assert r.per_app["c"].spread is None
    d = r.to_mapping()
    assert d["overall"]["ordering"] == {"pairs": 10, "accuracy": 0.8, "ties": 0.2}
    assert set(d["per_app"]) == {"a", "c"} and d["overall"]["rows"] == 7


def test_same_placement_twice_is_not_a_pair() -> None:
    m = rows([("a", (2, 1), 8, 1.0), ("a", (2, 1), 8, 1.1), ("a", (3,), 8, 1.0)])
    i, j = ordering_pairs(m)
    # 21 twice is no pair; 21 (1.0) against 3 (1.0) has no measured order.
    assert list(zip(i.tolist(), j.tolist())) == [(1, 2)]


def test_predictions_csv_and_bad_input() -> None:
    text = predictions_csv(PRED, M)
    lines = text.splitlines()
    assert lines[0] == "app,placement,local_bsz,measured_s,predicted_s"
    assert lines[5] == "a,31,8,1.4,1.45" and len(lines) == 8
    with pytest.raises(ConfigError, match="one positive prediction per row"):
        evaluate(PRED[:-1], M)
    with pytest.raises(ConfigError, match="one positive prediction per row"):
        evaluate(np.zeros(7), M)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=7, max_size=7))
def test_perfect_prediction_orders_every_pair(times: list[float]) -> None:
    m = rows(
        [
            (a, p, b, t)
            for (a, p, b, _), t in zip(
                [
                    ("a", (1,), 8, 0),
                    ("a", (1, 1), 8, 0),
                    ("a", (2,), 8, 0),
                    ("a", (2, 2), 8, 0),
                    ("a", (3, 1), 8, 0),
                    ("a", (2, 2), 16, 0),
                    ("c", (1,), 8, 0),
                ],
                times,
            )
        ]
    )
    r = evaluate(m.step_time, m)
    if r.overall.ordering.pairs:
        assert r.overall.ordering.accuracy == 1.0 and r.overall.ordering.ties == 0.0
    assert r.overall.errors.max_abs_rel_error == 0.0


def test_spread_takes_the_median_over_batches() -> None:
    m = rows(
        [
            ("a", (2, 2), 8, 1.0),
            ("a", (3, 1), 8, 1.2),
            ("a", (2, 2), 16, 2.0),
            ("a", (3, 1), 16, 2.2),
            ("a", (4,), 16, 2.1),  # one batch only: its median is its one relative time
        ]
    )
    sp = evaluate(m.step_time, m, spread_gpus=4).overall.spread
    assert sp is not None and sp.groups == 2
    g16 = np.log([2.0, 2.2, 2.1]).mean()
    a = np.median([np.log(1.0) - np.log([1.0, 1.2]).mean(), np.log(2.0) - g16])
    b = np.median([np.log(1.2) - np.log([1.0, 1.2]).mean(), np.log(2.2) - g16])
    c = np.log(2.1) - g16
    want = np.exp(max(a, b, c) - min(a, b, c))
    assert sp.measured == pytest.approx(want) and sp.predicted == pytest.approx(want)
    assert sp.error == pytest.approx(0.0)
