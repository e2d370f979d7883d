"""Layers and plug-ins: the core finds policies and commands through package entry points only.

* The installed package declares the baselines' policies in ``crop_gym.policies`` and every
  sub-command in ``crop_gym.commands``; the registry and ``crop-gym`` find them there.
* A provider installed beside crop_gym (a test-local distribution with its own entry points) adds
  its policies and commands; one that fails to import costs only its own entries, with one line.
* No module of the core (``crop_gym`` outside ``agents/`` and ``baselines/``) imports or names a
  layer above it, not even in a string.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import crop_gym
from crop_gym.cli import build_parser, command_entry_points
from crop_gym.policy import (
    ENTRY_POINT_GROUP,
    PlacementPolicy,
    make_policy,
    policy_names,
    provider_errors,
)

ROOT = Path(__file__).resolve().parent.parent
EF_TRACE = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
    "a,1000,500,resnet50,2000,64,2,700\n"
    "b,1010,800,bert,3000,128,8,900\n"
)


# ----------------------------------------------------------------------------- the installed ones
def test_the_baselines_are_found_through_their_entry_point() -> None:
    eps = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert eps["baselines"].value == "crop_gym.baselines.registry:policy_specs"
    specs = eps["baselines"].load()()
    names = [s.name for s in specs]
    assert names == [
        "crop",
        "crop-plain",
        "crop-nonrobust",
        "random",
        "first-fit",
        "best-fit",
        "spread",
        "hived",
        "comm-greedy",
    ]
    assert policy_names()[: len(names)] == tuple(names)
    assert provider_errors() == {}
    for name in names:
        policy = make_policy(name)
        assert isinstance(policy, PlacementPolicy) and policy.name == name


def test_every_command_is_found_through_an_entry_point() -> None:
    eps = command_entry_points()
    assert [ep.name for ep in eps] == sorted(ep.name for ep in eps)
    assert {ep.name: ep.value for ep in eps} == {
        "calibrate": "crop_gym.calibration_cli:register",
        "compare": "crop_gym.baselines.compare_cli:register",
        "simulate": "crop_gym.sim_cli:register",
        "study": "crop_gym.study.cli:register",
        "trace": "crop_gym.workloads.cli:register",
        "train": "crop_gym.agents.cli:register",
    }
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == [  # type: ignore[arg-type]
        "calibrate",
        "compare",
        "simulate",
        "study",
        "trace",
        "train",
        "eval",
    ]


def test_the_registry_loads_the_providers_only_on_first_use() -> None:
    code = (
        "import sys\n"
        "import crop_gym.policy as p, crop_gym.sim, crop_gym.sim_cli, crop_gym.workloads.cli\n"
        "assert not [m for m in sys.modules if m.startswith('crop_gym.baselines')]\n"
        "assert p.make_policy('first-fit').name == 'first-fit'\n"
        "assert 'crop_gym.baselines.registry' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# ----------------------------------------------------------------------------- a plug-in beside
_FAKE_POLICIES = '''
"""A policy provider outside crop_gym."""
import numpy as np
from crop_gym.policy import Placement, PolicySpec, pending_jobs


class LastFit:
    """FIFO on the highest-numbered free GPUs."""

    name = "last-fit"

    def place(self, state, queue, rng=None):
        free = np.flatnonzero(state.free_mask)
        out = []
        for job in pending_jobs(state, queue):
            if job.num_gpus <= len(free):
                out.append(Placement(job, free[len(free) - job.num_gpus :]))
                free = free[: len(free) - job.num_gpus]
        return out


def specs():
    return [PolicySpec("last-fit", LastFit, "FIFO, the k highest-numbered free GPUs")]
'''

_FAKE_COMMANDS = '''
"""A command provider outside crop_gym."""


def register(subparsers):
    p = subparsers.add_parser("hello", help="say hello")
    p.set_defaults(func=lambda args: print("hello from a plug-in") or 0)
'''

_BROKEN = """
import a_module_that_does_not_exist  # noqa: F401
"""


def _plugin(tmp_path: Path, entry_points_txt: str) -> dict[str, str]:
    """A distribution ``fake-crop-plugin`` on ``tmp_path`` with these entry points; the
    environment of a subprocess that sees it."""
    (tmp_path / "fake_policies.py").write_text(_FAKE_POLICIES)
    (tmp_path / "fake_commands.py").write_text(_FAKE_COMMANDS)
    (tmp_path / "fake_broken.py").write_text(_BROKEN)
    info = tmp_path / "fake_crop_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-crop-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points_txt))
    (tmp_path / "t.csv").write_text(EF_TRACE)
    return {**os.environ, "PYTHONPATH": str(tmp_path), "MPLBACKEND": "Agg"}


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_provider_added_through_a_local_entry_point_works(tmp_path: Path) -> None:
    env = _plugin(
        tmp_path,
        """
        [crop_gym.policies]
        zz-fake = fake_policies:specs

        [crop_gym.commands]
        hello = fake_commands:register
        """,
    )
    run = _python(
        """
        from crop_gym.cli import main
        from crop_gym.policy import make_policy, policy_names, provider_errors
        from crop_gym.sim import Simulator
        from crop_gym.workloads import load_workload

        names = policy_names()
        assert names[0] == "crop" and names[-1] == "last-fit", names  # providers by name
        assert provider_errors() == {}
        policy = make_policy("last-fit")
        jobs = load_workload("elasticflow:cluster10").jobs[:20]
        result = Simulator(jobs, "n32g8").run(policy)
        assert result.info["policy"] == "last-fit"
        assert result.metrics["jobs_completed"] == 20
        assert main(["hello"]) == 0
        assert main(["simulate", "--trace", "t.csv", "--cluster", "testbed-8",
                     "--policy", "last-fit", "--no-progress"]) == 0
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert "hello from a plug-in" in run.stdout
    assert "policy last-fit | t on testbed-8" in run.stdout
    assert run.stderr == ""
    # --help lists the plug-in's command among the others, in name order.
    helped = subprocess.run(
        [sys.executable, "-m", "crop_gym.cli", "--help"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    listed = re.findall(r"^    (\w+)", helped.stdout, flags=re.MULTILINE)
    assert listed == [
        "calibrate",
        "compare",
        "hello",
        "simulate",
        "study",
        "trace",
        "train",
        "eval",
    ]


def test_a_provider_that_fails_to_import_costs_one_line(tmp_path: Path) -> None:
    env = _plugin(
        tmp_path,
        """
        [crop_gym.policies]
        broken = fake_broken:specs
        missing = a_package_not_installed.registry:specs

        [crop_gym.commands]
        broken = fake_broken:register
        """,
    )
    run = _python(
        """
        from crop_gym.errors import ConfigError
        from crop_gym.policy import make_policy, provider_errors

        errors = provider_errors()
        assert sorted(errors) == ["broken", "missing"], errors
        assert all("\\n" not in e for e in errors.values())
        print(errors["broken"])
        print(errors["missing"])
        assert make_policy("crop").name == "crop"  # the installed providers still work
        try:
            make_policy("last-fit")
        except ConfigError as exc:
            print(exc)
        """,
        env,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    broken, missing, unknown = run.stdout.splitlines()
    assert broken == (
        "policy provider 'broken' (fake_broken:specs) could not be loaded: ModuleNotFoundError: "
        "No module named 'a_module_that_does_not_exist'"
    )
    assert missing.startswith(
        "policy provider 'missing' (a_package_not_installed.registry:specs) could not be loaded:"
    )
    assert unknown.startswith("unknown policy 'last-fit'; policies: crop, crop-plain,")
    assert broken in unknown and missing in unknown
    # The command line: one warning for the broken command provider, the others work; an unknown
    # policy is one error line that names the provider that failed.
    args = ["simulate", "--trace", "t.csv", "--cluster", "testbed-8", "--policy", "last-fit"]
    cli = subprocess.run(
        [sys.executable, "-m", "crop_gym.cli", *args, "--no-progress"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2
    warning, error = cli.stderr.splitlines()
    assert warning == (
        "crop-gym: warning: commands of the entry point 'broken' (fake_broken:register) are "
        "unavailable: ModuleNotFoundError: No module named 'a_module_that_does_not_exist'"
    )
    assert error.startswith("crop-gym simulate: error: unknown policy 'last-fit'; policies: crop")
    assert "policy provider 'broken' (fake_broken:specs) could not be loaded" in error
    assert "Traceback" not in cli.stderr


# ----------------------------------------------------------------------------- the layering
#: A string that names a layer above the core: its module path (``crop_gym.baselines``,
#: ``agents.cli``, ``baselines:x``), its folder (``agents/``), or its name as code (````agents````,
#: or the whole string).
_LAYER = r"(?:agents|baselines)"
_NAMES_A_LAYER = re.compile(
    rf"\bcrop_gym\.{_LAYER}\b|(?<![\w.]){_LAYER}(?:\.[A-Za-z_]|:[A-Za-z_]|/)|``{_LAYER}``"
    rf"|\A\s*{_LAYER}\s*\Z"
)


def _core_modules() -> list[Path]:
    root = Path(crop_gym.__file__).parent
    return [
        p
        for p in sorted(root.rglob("*.py"))
        if p.relative_to(root).parts[0] not in {"agents", "baselines"}
    ]


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _NAMES_A_LAYER.search(node.value):
                line = next(ln for ln in node.value.splitlines() if _NAMES_A_LAYER.search(ln))
                out.append(
                    f"{node.lineno}: a string names a layer above the core: {line.strip()!r}"
                )
            continue
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in {"agents", "baselines"} or parts[:2] in (
                ["crop_gym", "agents"],
                ["crop_gym", "baselines"],
            ):
                out.append(f"{node.lineno}: imports {name}")
    return out


def test_the_core_never_imports_or_names_a_layer_above_it() -> None:
    root = Path(crop_gym.__file__).parent
    modules = _core_modules()
    assert len(modules) > 50  # the whole core was read
    offenders = [f"{p.relative_to(root)}:{o}" for p in modules for o in _offences(p)]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize(
    "source",
    [
        "import crop_gym.baselines.crop\n",
        "from crop_gym.agents.cli import register\n",
        "from crop_gym.baselines import registry\n",
        "import baselines\n",
        "def f():\n    from crop_gym.agents import checkpoint\n",
        "MODULES = ('crop_gym.baselines.compare_cli',)\n",
        "X = importlib.import_module('agents')\n",
        "T = 'agents.cli:register'\n",
        '"""Docstring: see ``baselines``."""\n',
        '"""Docstring: see baselines/crop.py."""\n',
    ],
)
def test_the_layering_check_catches_every_form(tmp_path: Path, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _offences(path)


@pytest.mark.parametrize(
    "source",
    [
        '"""CROP and the classic baselines, trained agents."""\n',
        "GROUP = 'crop_gym.policies'\n",
        "from crop_gym.policy import make_policy\n",
    ],
)
def test_the_layering_check_lets_prose_pass(tmp_path: Path, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert not _offences(path)
