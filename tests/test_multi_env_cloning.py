"""Cloning one policy on several environments (``bc.also_on``): sets of different layouts together."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

import crop_gym  # noqa: E402, F401
from crop_gym.agents.config import train_seed  # noqa: E402
from crop_gym.agents.imitation import (  # noqa: E402
    BCConfig,
    Demonstrations,
    agreement,
    behaviour_cloning,
    dagger,
    record_demonstrations,
)
from crop_gym.agents.networks import ObsSpec  # noqa: E402
from crop_gym.agents.policies import MaskableScorerPolicy  # noqa: E402
from crop_gym.agents.training import train  # noqa: E402
from crop_gym.envs.observation import JOB_FEATURES  # noqa: E402
from crop_gym.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.rl

TESTBED = "crop_gym/Placement-Testbed8-v0"
HEALTHY = "crop_gym/Placement-Healthy-v0"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    th.set_num_threads(1)


def _model(env: gym.Env) -> object:
    from sb3_contrib import MaskablePPO

    spec = {"scorer": {"hidden": 16, "embed": 8, "spec": ObsSpec.from_env(env).to_dict()}}
    return MaskablePPO(MaskableScorerPolicy, env, seed=0, policy_kwargs=spec)


def _sets() -> tuple[list[gym.Env], list]:
    envs = [gym.make(TESTBED), gym.make(HEALTHY)]
    sets = [record_demonstrations(e, [train_seed(0, 0, i) for i in range(12)]) for e in envs]
    return envs, sets


def test_sets_of_different_layouts_are_cloned_together() -> None:
    envs, sets = _sets()
    assert sets[0].obs["gpus"].shape[1] != sets[1].obs["gpus"].shape[1]  # layouts differ
    model = _model(envs[0])
    hist = behaviour_cloning(model.policy, sets, BCConfig(epochs=3, batch_size=32), seed=0)  # type: ignore[attr-defined]
    per = hist["per_set"]
    assert [r["train_states"] + r["val_states"] for r in per] == [len(d) for d in sets]
    assert hist["train_states"] == sum(r["train_states"] for r in per)
    # The pooled agreement is each set's agreement weighted by its states.
    pooled = sum(r["train_agreement"] * r["train_states"] for r in per) / hist["train_states"]
    assert hist["train_agreement"] == pytest.approx(pooled, rel=1e-12)
    for d, r in zip(sets, per, strict=True):
        assert 0.0 <= r["train_agreement"] <= 1.0
        assert agreement(model.policy, d) == pytest.approx(  # type: ignore[attr-defined]
            (r["train_agreement"] * r["train_states"] + r["val_agreement"] * r["val_states"])
            / len(d)
        )
    assert len(hist["val_episodes"]) == round(0.1 * sets[0].num_episodes)  # the first set's


def test_a_list_of_one_set_trains_exactly_like_the_set() -> None:
    envs, sets = _sets()
    runs = []
    for demos in (sets[0], [sets[0]]):
        model = _model(envs[0])
        hist = behaviour_cloning(model.policy, demos, BCConfig(epochs=2, batch_size=32), seed=3)  # type: ignore[attr-defined]
        params = th.cat([p.detach().flatten() for p in model.policy.parameters()])  # type: ignore[attr-defined]
        runs.append((hist["loss"], hist["train_agreement"], params))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert th.equal(runs[0][2], runs[1][2])
    assert "per_set" not in hist


def _dagger(model: object, envs: list, sets: list, cfg: BCConfig, **kw: object) -> tuple:
    """One DAgger pass of ``model``'s policy on training seeds (round r, episode e)."""
    return dagger(
        model.policy,  # type: ignore[attr-defined]
        envs,
        sets,
        cfg,
        lambda r, e: train_seed(0, r, e),
        seed=0,
        **kw,  # type: ignore[arg-type]
    )


def test_dagger_extends_every_set_in_its_own_environment() -> None:
    envs, sets = _sets()
    model = _model(envs[0])
    cfg = BCConfig(epochs=1, batch_size=32, dagger_iterations=1, dagger_episodes=2, dagger_epochs=1)
    behaviour_cloning(model.policy, sets, cfg, seed=0)  # type: ignore[attr-defined]
    out, rounds = _dagger(model, envs, sets, cfg)
    assert isinstance(out, list) and len(out) == 2
    for before, after in zip(sets, out, strict=True):
        assert after.num_episodes == before.num_episodes + 2
        assert after.obs["gpus"].shape[1] == before.obs["gpus"].shape[1]
        new = after.value_weight[len(before) :]
        assert len(new) > 0 and np.all(new == 0)  # DAgger states carry no value target
    assert rounds[0]["states"] == sum(len(d) for d in out)
    with pytest.raises(ValueError, match="2 environments for 1 demonstration sets"):
        dagger(model.policy, envs, [sets[0]], cfg, lambda r, e: e)  # type: ignore[attr-defined]


def _bc(also_on: str) -> str:
    return (
        f"bc={{teacher: crop, also_on: {also_on}, epochs: 1, batch_size: 64, "
        "dagger_iterations: 1, dagger_episodes: 1, dagger_epochs: 1}"
    )


@pytest.mark.parametrize(
    ("also_on", "message"),
    [
        ("[crop_gym/Nope-v0]", "bc.also_on: unknown environment"),
        (
            "[crop_gym/OnlinePlacement-v1]",
            r"OnlinePlacement-v1 \(OnlinePlacementEnv\) is not of the run\'s kind \(PlacementEnv\)",
        ),
        ("crop_gym/Placement-v0", "also_on must be a list of strings"),
    ],
)
def test_bad_also_on_is_refused_in_one_line_before_writing(
    tmp_path: Path, also_on: str, message: str
) -> None:
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=message) as e:
        train(env_id=TESTBED, bc_demos=2, steps=0, out=out, hyperparams=[_bc(also_on)], log=None)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_a_flat_policy_refuses_also_on_of_another_layout(tmp_path: Path) -> None:
    argv = [_bc(f"[{TESTBED}]"), "policy=MultiInputPolicy"]
    with pytest.raises(ConfigError, match="MultiInputPolicy cannot read"):
        train(env_id=HEALTHY, bc_demos=2, steps=0, out=tmp_path / "r", hyperparams=argv, log=None)
    assert not (tmp_path / "r").exists()


def test_a_run_clones_on_its_environment_and_also_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    meta = train(
        env_id=HEALTHY,
        bc_demos=10,
        steps=0,
        out=out,
        hyperparams=[_bc(f"[{TESTBED}]"), "eval_episodes=2"],
        progress=False,
        log=None,
    )
    assert (out / "demos.npz").exists() and (out / "demos-1.npz").exists()
    run = json.loads((out / "run.json").read_text())
    assert run["phases"]["demos"]["also_on"][TESTBED]["episodes"] == 10
    # The CROP-equivalent agreement is measured on the run's own held-out episodes, in its env.
    bc = run["phases"]["bc"]
    assert 0.0 <= bc["val_equivalent_agreement"] <= 1.0
    assert bc["val_equivalent_states"] == bc["per_set"][HEALTHY]["val_states"] > 0
    assert set(run["phases"]["bc"]["per_set"]) == {TESTBED, HEALTHY}
    assert meta["status"] == "done" and (out / "final_model.zip").exists()
    # The testbed's states are stored as the scorer reads them when it plays there: job sizes on
    # the 64-GPU normaliser (k / 32), not the testbed's own (k / 4).
    demos = Demonstrations.load(out / "demos-1.npz")
    col = JOB_FEATURES.index("job_gpus")
    sizes = demos.obs["queue"][..., col][demos.obs["queue"][..., 0] > 0]
    scorer = ObsSpec.from_env(gym.make(HEALTHY)).max_job_gpus
    assert scorer != ObsSpec.from_env(gym.make(TESTBED)).max_job_gpus
    assert sizes.size and np.allclose(sizes * scorer, np.round(sizes * scorer))
    assert sizes.max() <= 8 / scorer


def test_scorer_observation_is_what_the_policy_agent_reads() -> None:
    from crop_gym.agents.envs import ScorerObservation
    from crop_gym.agents.networks import adapt_observation

    spec = ObsSpec.from_env(gym.make(HEALTHY))
    raw, wrapped = gym.make(TESTBED), ScorerObservation(gym.make(TESTBED), spec)
    a, _ = raw.reset(seed=5)
    b, _ = wrapped.reset(seed=5)
    want = adapt_observation(a, ObsSpec.from_env(raw), spec)
    assert set(b) == set(want) and all(np.array_equal(b[k], want[k]) for k in want)
    assert all(wrapped.observation_space[k].shape == b[k].shape for k in b)
    assert np.array_equal(wrapped.action_masks(), raw.unwrapped.action_masks())


def test_per_id_options_replace_the_run_wide_ones_there() -> None:
    cfg = BCConfig.from_dict(
        {
            "teacher": "crop-rollout",
            "dagger_episodes": 50,
            "per_id": {
                TESTBED: {"teacher": "crop", "episodes": 3, "dagger_episodes": 0},
                HEALTHY: {"ties": "equal_gain"},
            },
        }
    )
    assert cfg.ties_for(HEALTHY) == "equal_gain" and cfg.ties_for(TESTBED) == "expert"
    assert cfg.teacher_for(TESTBED) == "crop" and cfg.teacher_for(HEALTHY) == "crop-rollout"
    assert cfg.episodes_for(TESTBED, 10) == 3 and cfg.episodes_for(HEALTHY, 10) == 10
    assert cfg.teacher_for(HEALTHY) == "crop-rollout"
    assert cfg.episodes_for(TESTBED, 2) == 2  # never more than the run's
    assert cfg.dagger_episodes_for(TESTBED) == 0 and cfg.dagger_episodes_for(HEALTHY) == 50
    assert BCConfig.from_dict({"per_id": None}).per_id == {}


@pytest.mark.parametrize(
    ("per_id", "message"),
    [
        ({TESTBED: {"demos": 3}}, r"unknown options \['demos'\]"),
        ({TESTBED: {"episodes": 0}}, r"episodes=0 must be an integer in \[1, 100000\]"),
        ({TESTBED: {"dagger_episodes": 1.5}}, r"dagger_episodes=1.5 must be an integer"),
        ({TESTBED: {"teacher": 3}}, "must be a teacher's name"),
        ({TESTBED: {"ties": "all"}}, r"ties='all' must be one of 'expert', 'equal_gain'"),
        ({TESTBED: 3}, "must be a block of options"),
    ],
)
def test_bad_per_id_is_refused_in_one_line(per_id: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        BCConfig.from_dict({"per_id": per_id})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("per_id", "message"),
    [
        (f"{{{HEALTHY}: {{episodes: 2}}}}", "is neither the run's environment nor one of"),
        (f"{{{TESTBED}: {{teacher: sjf-crop}}}}", "taught by crop or crop-rollout"),
        (f"{{{TESTBED}: {{episodes: -1}}}}", r"episodes=-1 must be an integer in \[1, 100000\]"),
    ],
)
def test_bad_per_id_in_a_run_is_refused_before_writing(
    tmp_path: Path, per_id: str, message: str
) -> None:
    out = tmp_path / "run"
    bc = _bc(f"[{TESTBED}]")[:-1] + f", per_id: {per_id}}}"
    with pytest.raises(ConfigError, match=message) as e:
        train(
            env_id=HEALTHY.replace("Healthy", "Severe"),
            bc_demos=2,
            steps=0,
            out=out,
            hyperparams=[bc],
            log=None,
        )
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_per_id_episodes_in_a_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    bc = _bc(f"[{TESTBED}]")[:-1] + f", per_id: {{{TESTBED}: {{episodes: 3}}}}}}"
    train(
        env_id=HEALTHY,
        bc_demos=6,
        steps=0,
        out=out,
        hyperparams=[bc, "eval_episodes=1"],
        progress=False,
        log=None,
    )
    run = json.loads((out / "run.json").read_text())
    assert run["phases"]["demos"]["episodes"] == 6
    assert run["phases"]["demos"]["also_on"][TESTBED]["episodes"] == 3
    own = Demonstrations.load(out / "demos.npz").seeds
    assert Demonstrations.load(out / "demos-1.npz").seeds == own[:3]
    assert run["phases"]["bc"]["config"]["per_id"] == {TESTBED: {"episodes": 3}}


def test_dagger_takes_each_environments_per_id_episodes() -> None:
    envs, sets = _sets()
    model = _model(envs[0])
    cfg = BCConfig(
        epochs=1,
        batch_size=32,
        dagger_iterations=1,
        dagger_episodes=2,
        dagger_epochs=1,
        per_id={TESTBED: {"dagger_episodes": 0}, HEALTHY: {"dagger_episodes": 3}},
    )
    out, _ = _dagger(model, envs, sets, cfg, env_ids=[TESTBED, HEALTHY])
    assert out[0].num_episodes == sets[0].num_episodes  # none on the testbed
    assert out[1].num_episodes == sets[1].num_episodes + 3
    with pytest.raises(ValueError, match="1 environment IDs for 2 environments"):
        dagger(model.policy, envs, sets, cfg, lambda r, e: e, env_ids=[TESTBED])  # type: ignore[attr-defined]
