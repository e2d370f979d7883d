"""The install's namespace: ``agents`` and ``baselines`` install as ``crop_gym.agents`` and
``crop_gym.baselines``; no top-level ``agents`` or ``baselines`` module exists outside the
repository (both names belong to other packages on PyPI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # -I: isolated mode, so neither the working directory nor PYTHONPATH is on sys.path.
    return subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_layers_import_as_subpackages_only(tmp_path: Path) -> None:
    ok = _run(
        "import crop_gym.agents, crop_gym.baselines, crop_gym.baselines.crop; "
        "print(crop_gym.agents.__name__, crop_gym.baselines.__name__)",
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["crop_gym.agents", "crop_gym.baselines"]
    for name in ("agents", "baselines"):
        bad = _run(f"import importlib.util; print(importlib.util.find_spec({name!r}))", tmp_path)
        assert bad.returncode == 0, bad.stderr
        assert bad.stdout.strip() == "None", f"a top-level {name!r} module is installed"
