"""Files shipped inside ``crop_gym.agents`` (checkpoints, hyperparameter files) are found from an
installed package, not only from the repository's root (where a folder named ``agents`` happens to
be importable)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_shipped_checkpoints_and_configs_resolve_outside_the_repository(tmp_path: Path) -> None:
    code = (
        "from crop_gym.agents.checkpoint import SHIPPED_CHECKPOINTS, default_checkpoint; "
        "from crop_gym.agents.algorithms import ALGOS; from crop_gym.agents.config import config_path; "
        "paths = [default_checkpoint(n) for n in SHIPPED_CHECKPOINTS]; "
        "paths += [config_path(a) for a in ALGOS]; "
        "missing = [str(p) for p in paths if not p.is_file()]; "
        "print(len(paths), missing)"
    )
    # -I: isolated mode, so neither the working directory nor PYTHONPATH is on sys.path.
    out = subprocess.run(
        [sys.executable, "-I", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "[]"]
