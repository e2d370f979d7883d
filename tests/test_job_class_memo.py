"""The job-class memo behind ``job_constants`` counts its hits and misses for the benchmarks."""

from __future__ import annotations

import numpy as np

from crop_gym.model.jobs import Job
from crop_gym.model.timing import PerfConfig, job_class_memo_stats, job_constants
from crop_gym.model.topology import make_topology


def test_a_repeated_job_class_is_a_hit_and_gives_the_same_row() -> None:
    topo, perf = make_topology("testbed-8"), PerfConfig()
    # A batch no other test uses, so the first look-up is a miss in any test order.
    job = Job("a", "resnet50", 2, 1234)
    h0, m0 = job_class_memo_stats()
    first = job_constants(topo, perf, [job])
    h1, m1 = job_class_memo_stats()
    assert (h1 - h0, m1 - m0) == (0, 1)
    again = job_constants(topo, perf, [job, Job("b", "resnet50", 2, 1234, weight=3.0)])
    h2, m2 = job_class_memo_stats()
    assert (h2 - h1, m2 - m1) == (2, 0)
    np.testing.assert_array_equal(again[0], first[0])
    assert again[1, 3] == 3.0  # the weight is per job, not per class
