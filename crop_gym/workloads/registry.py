"""Bundled traces shipped inside the package (``crop_gym/data/traces``).

The ElasticFlow traces come from microsoft/elasticflow-traces (MIT licence, see
``crop_gym/data/traces/elasticflow/LICENSE``); please cite ElasticFlow (Gu et al., ASPLOS 2023) when
you use them. Names are ``"<family>:<trace>"``, e.g. ``"elasticflow:cluster10"``; the bare trace name
(``"cluster10"``) is accepted too.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["BUNDLED_TRACES", "BundledTrace", "bundled_names", "bundled_resource", "resolve_bundled"]


@dataclass(frozen=True, slots=True)
class BundledTrace:
    """A trace file shipped with the package.

    Attributes:
        name: Canonical name, ``"<family>:<trace>"``.
        resource: Path of the file inside the ``crop_gym`` package.
        format: Loader format (``"elasticflow"``, ``"pollux"`` or ``"csv"``).
        jobs: Number of jobs (rows) in the file.
        description: One line for ``crop-gym trace --list``.
    """

    name: str
    resource: str
    format: str
    jobs: int
    description: str


def _elasticflow(trace: str, jobs: int, description: str) -> BundledTrace:
    return BundledTrace(
        f"elasticflow:{trace}",
        f"data/traces/elasticflow/{trace}.csv",
        "elasticflow",
        jobs,
        description,
    )


_EF_JOBS = (1595, 5778, 3011, 15802, 3629, 2396, 12699, 13047, 11134, 260)

#: Every bundled trace, by canonical name.
BUNDLED_TRACES: dict[str, BundledTrace] = {
    t.name: t
    for t in (
        *(
            _elasticflow(f"cluster{i:02d}", n, f"ElasticFlow / Microsoft ITP cluster {i:02d}")
            for i, n in enumerate(_EF_JOBS, start=1)
        ),
        _elasticflow("195job", 195, "ElasticFlow 195-job, 2-day slice"),
    )
}


def bundled_names() -> tuple[str, ...]:
    """Canonical names of the bundled traces."""
    return tuple(BUNDLED_TRACES)


def resolve_bundled(spec: str) -> BundledTrace | None:
    """The bundled trace named ``spec`` (canonical or bare name), or ``None``."""
    if spec in BUNDLED_TRACES:
        return BUNDLED_TRACES[spec]
    if ":" not in spec:
        matches = [t for t in BUNDLED_TRACES.values() if t.name.split(":", 1)[1] == spec]
        if len(matches) == 1:
            return matches[0]
    return None


def bundled_resource(trace: BundledTrace) -> Traversable:
    """The packaged file of a bundled trace (use with :func:`importlib.resources.as_file`)."""
    return resources.files("crop_gym").joinpath(trace.resource)
