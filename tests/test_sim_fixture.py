"""The simulator's results for fixed seeds are identical to the recorded ones, to the last bit.

``tests/fixtures/sim_results.json.gz`` was recorded by ``tests/fixtures/record_sim_results.py``
(see its docstring) on the simulator as it was before its bookkeeping was rebuilt on the cluster
state (commit 7df0423): every summary value (wall-clock figures aside) must be equal, and every
per-job record and timeline column must have the same float64 bytes.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from crop_gym.sim import SimResult

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _load_recorder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "record_sim_results", FIXTURES / "record_sim_results.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


REC = _load_recorder()
RECORDED: dict[str, Any] = json.loads(gzip.decompress(REC.JSON_PATH.read_bytes()))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def test_every_case_is_recorded() -> None:
    assert sorted(RECORDED) == sorted(c.name for c in REC.CASES)


@pytest.mark.parametrize("case", REC.CASES, ids=lambda c: c.name)
def test_results_are_identical_to_the_recording(case: Any) -> None:
    result: SimResult = case.run()
    got, want = REC.fingerprint(result), RECORDED[case.name]
    # JSON turns NaN into NaN and keeps ints and floats apart; compare key by key for the message.
    bad = [
        f"{k}: {got['summary'].get(k)!r} != {v!r}"
        for k, v in want["summary"].items()
        if not _same(got["summary"].get(k), v)
    ]
    assert not bad, "\n".join(bad)
    assert sorted(got["summary"]) == sorted(want["summary"])
    assert got["timeline_rows"] == want["timeline_rows"]
    for part in ("records", "timeline"):
        changed = [c for c, d in want[part].items() if got[part].get(c) != d]
        assert not changed, f"{part} columns whose bytes changed: {changed}"
