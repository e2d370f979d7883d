"""Issue 30, item 10: what a new user reads first.

The README gives a newcomer exactly two commands (install and run ``crop-gym compare``; install and
run the tests, the command ``.ci/run`` runs), then a training section: one ``crop-gym train`` /
``crop-gym eval`` example whose arguments the CLI takes, a Stable-Baselines3 snippet that runs, a
link to docs/AGENTS.md, how long the suite takes, and which torch wheel to install.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from crop_gym.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def _blocks(text: str, kind: str) -> list[str]:
    return [body.strip() for k, body in _BLOCK.findall(text) if k == kind]


def test_a_newcomer_gets_exactly_two_commands() -> None:
    quick = _section("Quick start")
    commands = _blocks(quick, "bash")
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    assert "pip install" in commands[0] and commands[0].endswith("crop-gym compare")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_cmd = re.search(r"TEST_CMD='([^']+)'", ci).group(1)  # type: ignore[union-attr]
    assert test_cmd in commands[1] and commands[1].endswith("python -m pytest -n 2")


def test_the_suite_time_and_the_cpu_wheel_are_explained() -> None:
    quick = _section("Quick start")
    assert re.search(r"about \d+ minutes on 2 cores", quick), "how long the suite takes"
    assert "download.pytorch.org/whl/cpu" in quick and "CUDA" in quick


def test_the_training_section_has_an_example_and_the_link() -> None:
    train = _section("Training an agent")
    assert "(docs/AGENTS.md)" in train
    (commands,) = _blocks(train, "bash")
    lines = commands.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["crop-gym", "train"], ["crop-gym", "eval"]]
    parser = build_parser()
    for line in lines:
        args = parser.parse_args(shlex.split(line)[1:])  # the CLI takes these arguments as written
        assert args.command in ("train", "eval")


@pytest.mark.rl
@pytest.mark.slow
def test_the_stable_baselines3_snippet_runs(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib")
    (snippet,) = [b for b in _blocks(_section("Training an agent"), "python") if "MaskablePPO" in b]
    assert len(snippet.splitlines()) <= 12 and 'gym.make("crop_gym/Placement-v0")' in snippet
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", snippet + "\nprint('action', int(action))"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith("action ")
