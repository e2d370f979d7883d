"""Workloads: trace loaders, bundled traces, a seeded synthetic generator and summaries.

Everything returns a :class:`Workload`: a frozen, arrival-sorted tuple of
:class:`~crop_gym.model.jobs.Job` whose first arrival is 0, with a cached numpy view
(:attr:`Workload.arrays`) for the simulator.

>>> from crop_gym.workloads import load_workload, summarize
>>> wl = load_workload("elasticflow:cluster10")
>>> len(wl), wl.jobs[0].arrival
(260, 0.0)

Names are imported lazily, so importing :mod:`crop_gym.workloads.cli` (for the ``crop-gym`` command)
does not import numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crop_gym.workloads.elasticflow import ELASTICFLOW_COLUMNS, load_elasticflow
    from crop_gym.workloads.generic_csv import (
        GENERIC_COLUMNS,
        GENERIC_OPTIONAL_COLUMNS,
        load_generic_csv,
        save_generic_csv,
    )
    from crop_gym.workloads.loader import FORMATS, detect_format, load_workload
    from crop_gym.workloads.pollux import (
        POLLUX_APPLICATIONS,
        POLLUX_COLUMNS,
        PolluxApplication,
        load_pollux,
    )
    from crop_gym.workloads.registry import (
        BUNDLED_TRACES,
        BundledTrace,
        bundled_names,
        resolve_bundled,
    )
    from crop_gym.workloads.sampling import sample_queue
    from crop_gym.workloads.summary import format_summary, summarize
    from crop_gym.workloads.synthetic import SyntheticConfig, generate_synthetic
    from crop_gym.workloads.workload import Workload, WorkloadArrays

_EXPORTS: dict[str, str] = {
    "BUNDLED_TRACES": "registry",
    "BundledTrace": "registry",
    "bundled_names": "registry",
    "resolve_bundled": "registry",
    "ELASTICFLOW_COLUMNS": "elasticflow",
    "load_elasticflow": "elasticflow",
    "GENERIC_COLUMNS": "generic_csv",
    "GENERIC_OPTIONAL_COLUMNS": "generic_csv",
    "load_generic_csv": "generic_csv",
    "save_generic_csv": "generic_csv",
    "FORMATS": "loader",
    "detect_format": "loader",
    "load_workload": "loader",
    "POLLUX_APPLICATIONS": "pollux",
    "POLLUX_COLUMNS": "pollux",
    "PolluxApplication": "pollux",
    "load_pollux": "pollux",
    "sample_queue": "sampling",
    "format_summary": "summary",
    "summarize": "summary",
    "SyntheticConfig": "synthetic",
    "generate_synthetic": "synthetic",
    "Workload": "workload",
    "WorkloadArrays": "workload",
}

__all__ = [
    "BUNDLED_TRACES",
    "ELASTICFLOW_COLUMNS",
    "FORMATS",
    "GENERIC_COLUMNS",
    "GENERIC_OPTIONAL_COLUMNS",
    "POLLUX_APPLICATIONS",
    "POLLUX_COLUMNS",
    "BundledTrace",
    "PolluxApplication",
    "SyntheticConfig",
    "Workload",
    "WorkloadArrays",
    "bundled_names",
    "detect_format",
    "format_summary",
    "generate_synthetic",
    "load_elasticflow",
    "load_generic_csv",
    "load_pollux",
    "load_workload",
    "resolve_bundled",
    "sample_queue",
    "save_generic_csv",
    "summarize",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
