"""rl-baselines3-zoo trains on crop_gym with the shipped zoo files (skipped without rl_zoo3).

Each case runs the zoo in a subprocess (it parses sys.argv and registers environments globally)
for a few hundred steps: the shipped file must resolve (MultiInputPolicy on the Dict observation,
the ScaleReward wrapper by its import path), the model must train to the requested step count and
be saved, and with ``ppo_mask`` the evaluation must run masked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rl_zoo3")
pytest.importorskip("sb3_contrib")

pytestmark = pytest.mark.rl

ROOT = Path(__file__).resolve().parents[1]
ENV = "crop_gym/Placement-v0"


def _zoo(
    module: str, algo: str, conf: str, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        module,
        "--algo",
        algo,
        "--env",
        ENV,
        "--gym-packages",
        "crop_gym",
        "--conf-file",
        str(ROOT / "agents" / "configs" / "zoo" / conf),
        "-n",
        "256",
        "-f",
        str(out),
        "--seed",
        "3",
        "--num-threads",
        "1",
        "-params",
        "n_steps:128",
        "batch_size:64",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def _trained(out: Path, algo: str, cls: type) -> None:
    runs = list((out / algo).glob("crop_gym-Placement-v0_*"))
    assert len(runs) == 1, runs
    model = cls.load(runs[0] / "crop_gym-Placement-v0.zip", device="cpu")
    assert model.num_timesteps == 256
    # MultiInputPolicy: one extractor per key of the Dict observation.
    assert type(model.policy.features_extractor).__name__ == "CombinedExtractor"
    # The zoo's monitor logged whole episodes (rows: return, length, time).
    rows = (runs[0] / "0.monitor.csv").read_text().splitlines()[2:]
    assert rows and sum(int(r.split(",")[1]) for r in rows) <= 256


def test_zoo_ppo_trains_with_the_shipped_file(tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    res = _zoo("rl_zoo3.train", "ppo", "ppo.yml", tmp_path, "--eval-freq", "-1")
    assert res.returncode == 0, res.stderr[-2000:]
    _trained(tmp_path, "ppo", PPO)


def test_zoo_maskable_ppo_through_agents_zoo(tmp_path: Path) -> None:
    from sb3_contrib import MaskablePPO

    res = _zoo(
        "crop_gym.agents.zoo",
        "ppo_mask",
        "ppo_mask.yml",
        tmp_path,
        "--eval-freq",
        "256",
        "--eval-episodes",
        "2",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Eval num_timesteps=256" in res.stdout
    _trained(tmp_path, "ppo_mask", MaskablePPO)


def test_project_config_is_not_a_zoo_file() -> None:
    """The crop-gym train files carry run keys the zoo would pass to the algorithm; the zoo files
    carry none of them (so the two are not confused)."""
    import yaml

    from crop_gym.agents.config import RUN_KEYS

    zoo_keys = {"policy", "n_timesteps", "n_envs", "env_kwargs"}
    for conf in ("ppo.yml", "ppo_mask.yml"):
        data = yaml.safe_load((ROOT / "agents" / "configs" / "zoo" / conf).read_text())
        for name, entry in data.items():
            assert entry["policy"] == "MultiInputPolicy", (conf, name)
            stray = (set(entry) & set(RUN_KEYS)) - zoo_keys
            assert not stray, (conf, name, stray)
