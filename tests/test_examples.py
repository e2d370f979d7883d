"""The single-file training example of docs/examples/ keeps running and keeps masking.

Skipped without torch. The smoke run trains for two tiny rollouts and evaluates on one held-out
seed beside CROP; the masking test samples the example's policy on real observations.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "ppo_masked_cleanrl.py"


def _example() -> object:
    spec = importlib.util.spec_from_file_location("ppo_masked_cleanrl", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cleanrl_example_trains_and_evaluates() -> None:
    argv = ["--total-timesteps", "100", "--num-steps", "32", "--num-envs", "2"]
    res = subprocess.run(
        [sys.executable, str(EXAMPLE), *argv, "--num-minibatches", "2", "--eval-episodes", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    # 100 steps round up to whole rollouts of 2 x 32 (and the script says so).
    assert "2 rollouts of 2 x 32 = 128 steps" in res.stdout
    assert re.search(r"^step +128 ", res.stdout, re.M)
    m = re.search(r"policy mean F gain (\S+), CROP (\S+), ratio (\S+)", res.stdout)
    assert m, res.stdout
    pol, crop, ratio = (float(x) for x in m.groups())
    assert crop > 0 and ratio == pytest.approx(pol / crop, abs=1e-3)


def test_cleanrl_example_never_samples_a_masked_action() -> None:
    import gymnasium as gym

    ex = _example()
    torch.set_num_threads(1)  # (orthogonal init's QR on many threads crawls on a shared machine)
    env = gym.make("crop_gym/Placement-v0")
    torch.manual_seed(0)
    obs, _ = env.reset(seed=5)
    agent = ex.Agent(ex.flatten(obs).shape[-1], int(env.action_space.n))
    for _ in range(30):
        mask = np.asarray(env.unwrapped.action_masks(), dtype=bool)
        x = ex.flatten(obs).repeat(64, 1)
        m = torch.as_tensor(mask).repeat(64, 1)
        act, logp, _, _ = agent.act(x, m)
        assert mask[act.numpy()].all()
        assert torch.isfinite(logp).all()
        obs, _, term, trunc, _ = env.step(int(act[0]))
        if term or trunc:
            obs, _ = env.reset()
    env.close()
