"""Replay the committed behaviour fixture (tests/fixtures/behaviour.*) against the live code.

The fixture was recorded by ``tests/fixtures/record_behaviour.py`` (see its docstring for what is
in it). Tolerances: F, rewards, η, survival and every ``job_record`` value ``rtol=1e-9``;
observations ``rtol=atol=1e-6`` (float32); masks, actions, terminated / truncated and CROP
placements exactly.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _load_recorder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "record_behaviour", FIXTURES / "record_behaviour.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REC = _load_recorder()
META: dict[str, Any] = json.loads(gzip.decompress(REC.JSON_PATH.read_bytes()))
with np.load(REC.NPZ_PATH) as _npz:
    ARRAYS: dict[str, np.ndarray] = {k: _npz[k] for k in _npz.files}


def _close(actual: float, expected: float, what: str) -> None:
    """``rtol=1e-9`` (and a 1e-12 floor for values that are exactly 0)."""
    assert math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12), (
        f"{what}: {actual!r} != {expected!r}"
    )


# ------------------------------------------------------------------------------------ envs
def test_every_registered_env_is_recorded() -> None:
    assert sorted(REC.env_ids()) == sorted(META["envs"])


@pytest.mark.parametrize("env_id", sorted(META["envs"]))
def test_env_replay(env_id: str) -> None:
    _replay(env_id, check_obs=True)


@pytest.mark.parametrize("env_id", sorted(META["envs"]))
def test_env_replay_dynamics(env_id: str) -> None:
    """The replay without the observations: masks, rewards, ends, F and placements."""
    _replay(env_id, check_obs=False)


def _replay(env_id: str, *, check_obs: bool) -> None:
    rec = META["envs"][env_id]
    masks = ARRAYS[f"{env_id}|mask"]
    obs_rec = {k: ARRAYS[f"{env_id}|obs/{k}"] for k in rec["obs_keys"]}
    seeds = iter(rec["seeds"])
    env = gym.make(env_id)
    try:
        for i, fr in enumerate(rec["frames"]):
            where = f"{env_id} frame {i}"
            if fr["reset"]:
                obs, info = env.reset(seed=next(seeds))
                reward: SupportsFloat = 0.0
                term, trunc = False, False
            else:
                action = fr["action"]
                assert masks[i - 1][action], f"{where}: recorded action {action} is masked"
                obs, reward, term, trunc, info = env.step(action)
            mask = np.asarray(env.unwrapped.action_masks(), dtype=np.bool_)  # type: ignore[attr-defined]
            np.testing.assert_array_equal(mask, masks[i], err_msg=f"{where}: mask")
            assert (bool(term), bool(trunc)) == (fr["terminated"], fr["truncated"]), where
            _close(float(reward), fr["reward"], f"{where}: reward")
            _close(float(info["F"]), fr["F"], f"{where}: info['F']")
            assert info.get("placed") == fr["placed"], f"{where}: info['placed']"
            assert sorted(obs) == rec["obs_keys"], f"{where}: obs keys"
            if not check_obs:
                continue
            for key, expected in obs_rec.items():
                got = np.asarray(obs[key], dtype=np.float32)
                assert got.shape == expected[i].shape, f"{where}: obs[{key!r}] shape"
                np.testing.assert_allclose(
                    got, expected[i], rtol=1e-6, atol=1e-6, err_msg=f"{where}: obs[{key!r}]"
                )
        assert next(seeds, None) is None
    finally:
        env.close()


# ------------------------------------------------------------------------------------ CROP
def _check_run(got: dict[str, Any], exp: dict[str, Any], where: str) -> None:
    assert got["placements"] == exp["placements"], f"{where}: placements"
    assert got["rule"] == exp["rule"], f"{where}: rule"
    _close(got["greedy_F"], exp["greedy_F"], f"{where}: greedy F")
    _close(got["F"], exp["F"], f"{where}: F")
    assert sorted(got["records"]) == sorted(exp["records"]), f"{where}: placed jobs"
    for jid, rec in exp["records"].items():
        assert sorted(got["records"][jid]) == sorted(rec), f"{where}: job_record({jid}) fields"
        for field, value in rec.items():
            _close(got["records"][jid][field], value, f"{where}: job_record({jid!r})[{field!r}]")


def _case_id(case: dict[str, Any]) -> str:
    name, profile, seed = case["case"]
    return f"{name}-{profile or 'preset'}-s{seed}"


@pytest.mark.parametrize("index", range(len(META["crop"])), ids=[_case_id(c) for c in META["crop"]])
def test_crop_replay(index: int) -> None:
    exp = META["crop"][index]
    case = tuple(exp["case"])
    assert case == tuple(REC.CROP_CASES[index])
    where = _case_id(exp)
    state, queue = REC.crop_instance(case)
    _close(float(state.F), exp["initial_F"], f"{where}: initial F")
    queue_now = [[j.job_id, j.model, int(j.num_gpus), float(j.batch_size)] for j in queue]
    assert queue_now == exp["queue"], f"{where}: queue"
    background = [[jid, [int(g) for g in state.placement(jid)]] for jid in sorted(state.jobs)]
    assert background == exp["background"], f"{where}: background placements"
    _check_run(REC.crop_run(state, queue, robust=True), exp["robust"], where)
    if "nonrobust" in exp:
        _check_run(
            REC.crop_run(state, queue, robust=False), exp["nonrobust"], f"{where} robust=False"
        )


# --------------------------------------------------------------------------------- compare
def _check_json(got: Any, exp: Any, where: str) -> None:
    if isinstance(exp, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(exp), f"{where}: keys"
        for key in exp:
            _check_json(got[key], exp[key], f"{where}.{key}")
    elif isinstance(exp, list):
        assert isinstance(got, list) and len(got) == len(exp), f"{where}: length"
        for i, (g, e) in enumerate(zip(got, exp, strict=True)):
            _check_json(g, e, f"{where}[{i}]")
    elif isinstance(exp, float) and not isinstance(got, bool):
        _close(float(got), exp, where)
    else:
        assert got == exp and type(got) is type(exp), f"{where}: {got!r} != {exp!r}"


def test_compare_default_table() -> None:
    _check_json(REC.record_compare(), META["compare"], "compare")
