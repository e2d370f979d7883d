"""The full trace study of docs/RESULTS.md; a thin wrapper of ``crop-gym study`` (docs/STUDY.md).

``crop-gym study`` replaces what this script did (grid, local processes, resume, tables, figures)
and adds a Ray backend and bootstrap intervals over seeds. This wrapper runs the study file
``docs/studies/elasticflow_full.yaml`` into ``docs/results/study``; any ``crop-gym study`` option
given here is added after those (a later flag wins)::

    python scripts/evaluate_traces.py                       # the whole study, local processes
    python scripts/evaluate_traces.py --jobs 2000 --seeds 1 # a budgeted subset
    python scripts/evaluate_traces.py --backend ray --address auto

Then ``python scripts/publish_study.py --wall-s SECONDS`` rewrites docs/RESULTS.md's trace section,
its figures and ``docs/results/study/{results,summary}.*`` from the finished runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STUDY = ROOT / "docs" / "studies" / "elasticflow_full.yaml"
OUT = ROOT / "docs" / "results" / "study"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``crop-gym study --study STUDY --out OUT [argv...]``."""
    from crop_gym.cli import main as crop_gym

    OUT.mkdir(parents=True, exist_ok=True)
    args = list(sys.argv[1:] if argv is None else argv)
    return crop_gym(["study", "--study", str(STUDY), "--out", str(OUT), *args])


if __name__ == "__main__":
    sys.exit(main())
