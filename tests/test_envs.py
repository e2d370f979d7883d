"""The Gymnasium environments: vector envs, pickling and SB3 over every registered ``crop_gym/`` ID,
then the candidate-mode and GPU-mode specifics, the observation, and consistency with CROP.

The checkers, determinism, invalid actions, episode ends, arguments and rendering of every ID are
in tests/test_env_battery.py. Tests that need torch / SB3 skip themselves when the ``rl`` extra is
not installed; tests of observation values skip while the observation builder is the placeholder.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from helpers import assert_same

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs import ENV_IDS, GPUPlacementEnv, PlacementEnv
from crop_gym.envs.observation import (
    CANDIDATE_FEATURES,
    GPU_FEATURES,
    JOB_FEATURES,
    SUMMARY_FEATURES,
)
from crop_gym.scenario import ScenarioSampler

ALL_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("crop_gym/"))
#: IDs whose instances are big: the slow parts of the battery run on them only when marked slow.
BIG_IDS = {"crop_gym/Placement-512-v0", "crop_gym/Placement-1024-v0"}
CANDIDATE_IDS = [i for i in ALL_IDS if ENV_IDS.get(i, ("",))[0].endswith(":PlacementEnv")]
SMALL_CANDIDATE_IDS = [i for i in CANDIDATE_IDS if i not in BIG_IDS]


def _battery_params() -> list[Any]:
    return [pytest.param(i, marks=pytest.mark.slow) if i in BIG_IDS else i for i in ALL_IDS]


# ---------------------------------------------------------------------------------- helpers
def masked_rollout(env: gym.Env[Any, Any], seed: int, steps: int) -> list[Any]:
    """``steps`` random masked steps (resetting at episode ends); the trace of everything seen."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace: list[Any] = [obs, info["action_mask"]]
    for _ in range(steps):
        mask = info["action_mask"]
        assert mask.any()
        valid = np.flatnonzero(mask)
        a = int(valid[rng.integers(len(valid))])
        obs, r, term, trunc, info = env.step(a)
        trace.append((a, obs, r, term, trunc, info["action_mask"]))
        if term or trunc:
            obs, info = env.reset()
            trace.append(obs)
    return trace


def play(env: gym.Env[Any, Any], actions: list[int]) -> list[Any]:
    out = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append((obs, r, term, trunc, info["action_mask"]))
        if term or trunc:
            break
    return out


# ------------------------------------------------------------------------------- the battery
def test_ids_registered_with_descriptions() -> None:
    for env_id, (_, _, description) in ENV_IDS.items():
        assert env_id in gym.registry
        assert env_id.startswith("crop_gym/") and env_id.split("-")[-1].startswith("v")
        assert description and "\n" not in description
    for required in (
        "crop_gym/Placement-v0",
        "crop_gym/Placement-Testbed8-v0",
        "crop_gym/Placement-512-v0",
        "crop_gym/Placement-1024-v0",
        "crop_gym/PlacementGPU-v0",
    ):
        assert required in ALL_IDS


@pytest.mark.parametrize("env_id", _battery_params())
def test_observations_in_space_and_mask_never_empty(env_id: str) -> None:
    env = gym.make(env_id)
    space = env.observation_space
    for item in masked_rollout(env, seed=3, steps=60):
        obs = item[1] if isinstance(item, tuple) else item
        if isinstance(obs, dict):
            assert space.contains(obs), {k: (v.dtype, v.min(), v.max()) for k, v in obs.items()}
        if isinstance(item, tuple):
            assert item[-1].any()
            assert np.asarray(item[-1]).dtype == np.bool_


@pytest.mark.parametrize("env_id", _battery_params())
def test_info_follows_sb3_conventions(env_id: str) -> None:
    """``info["episode"]`` is reserved: SB3 reads ``r`` and ``l`` from it (Monitor's convention)."""
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    for _ in range(400):
        assert "episode" not in info or {"r", "l"} <= set(info["episode"]), (
            "info['episode'] is SB3/Monitor's key (it must hold 'r' and 'l'); "
            "put environment metrics under another key"
        )
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            assert "episode" not in info or {"r", "l"} <= set(info["episode"]), (
                "info['episode'] is SB3/Monitor's key (it must hold 'r' and 'l'); "
                "put environment metrics under another key"
            )
            break


@pytest.mark.parametrize("env_id", _battery_params())
def test_pickle_mid_episode(env_id: str) -> None:
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=11)
    for _ in range(2):
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[rng.integers(len(valid))]))
        if term or trunc:
            _, info = env.reset()
    clone = pickle.loads(pickle.dumps(env))
    # Continue both with the same actions, chosen from the original's masks.
    a_out, b_out = [], []
    for _ in range(10):
        mask = env.unwrapped.action_masks()
        np.testing.assert_array_equal(mask, clone.unwrapped.action_masks())
        valid = np.flatnonzero(mask)
        a = int(valid[rng.integers(len(valid))])
        ra = env.step(a)
        rb = clone.step(a)
        a_out.append((ra[0], ra[1], ra[2], ra[3]))
        b_out.append((rb[0], rb[1], rb[2], rb[3]))
        if ra[2] or ra[3]:
            break
    assert_same(a_out, b_out)


@pytest.mark.parametrize("env_id", _battery_params())
def test_sync_vector_env(env_id: str) -> None:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(2)])
    obs, infos = venv.reset(seed=[1, 2])
    assert venv.single_observation_space.contains({k: v[0] for k, v in obs.items()})
    rng = np.random.default_rng(0)
    for _ in range(8):
        masks = infos["action_mask"]
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, rewards, _term, _trunc, infos = venv.step(actions)
        assert rewards.shape == (2,) and np.isfinite(rewards).all()
    venv.close()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_subproc_vec_env_maskable_ppo(env_id: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("sb3_contrib")
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import SubprocVecEnv

    torch.set_num_threads(1)
    venv = SubprocVecEnv([lambda: Monitor(gym.make(env_id)) for _ in range(2)], start_method="fork")
    try:
        venv.seed(0)
        model = MaskablePPO(
            "MultiInputPolicy",
            venv,
            n_steps=64,
            batch_size=64,
            n_epochs=1,
            seed=0,
            device="cpu",
            policy_kwargs={"net_arch": [32]},
        )
        model.learn(total_timesteps=256)
        obs = venv.reset()
        masks = np.stack(venv.env_method("action_masks"))
        actions, _ = model.predict(obs, action_masks=masks, deterministic=True)
        assert all(m[a] for m, a in zip(masks, actions, strict=True))
    finally:
        venv.close()


# ------------------------------------------------------------------------ registration / import
def test_make_kwargs_and_spec() -> None:
    env = gym.make("crop_gym/Placement-v0", scenario="default-severe", privileged=True)
    obs, _ = env.reset(seed=0)
    assert env.unwrapped.scenario.name == "default-severe"
    assert "gain" in obs and env.observation_space["gain"].low.min() == -1.0
    assert env.spec is not None and env.spec.id == "crop_gym/Placement-v0"
    env = gym.make("crop_gym/Placement-Testbed8-v0", queue_view=2, max_candidates=3)
    assert env.action_space.n == 2 * 3 + 1


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("crop_gym/Placement-Testbed8-v0", {"privileged": True}),
        ("crop_gym/Placement-v0", {"privileged": True, "invalid_action": "stop"}),
        ("crop_gym/Placement-v0", {"table_layout": True, "group_identical_jobs": False}),
        ("crop_gym/PlacementGPU-Testbed8-v0", {"privileged": True}),
    ],
)
def test_variants_pass_the_gymnasium_checker(env_id: str, kwargs: dict[str, Any]) -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


def test_import_is_light() -> None:
    code = (
        "import sys, crop_gym, gymnasium as gym\n"
        "assert 'crop_gym/Placement-v0' in gym.registry\n"
        "bad = [m for m in ('torch', 'stable_baselines3', 'sb3_contrib', 'baselines', 'matplotlib', "
        "'crop_gym.envs.placement') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------- candidate mode
@pytest.fixture
def env64() -> PlacementEnv:
    return PlacementEnv("default")


def test_spaces_shapes(env64: PlacementEnv) -> None:
    G = env64.topology.num_gpus
    Q, C = env64.queue_view, env64.max_candidates
    assert env64.action_space.n == Q * C + 1
    sp = env64.observation_space
    assert sp["gpus"].shape == (G * len(GPU_FEATURES),)
    assert sp["candidates"].shape == (Q * C * len(CANDIDATE_FEATURES),)
    assert sp["queue"].shape == (Q * len(JOB_FEATURES),)
    assert sp["summary"].shape == (len(SUMMARY_FEATURES),)
    assert "gain" not in sp.spaces
    for box in sp.spaces.values():
        assert (
            box.dtype == np.float32 and np.isfinite(box.low).all() and np.isfinite(box.high).all()
        )
    table = PlacementEnv("default", table_layout=True)
    obs, _ = table.reset(seed=0)
    assert obs["candidates"].shape == (Q * C, len(CANDIDATE_FEATURES))
    assert table.observation_space.contains(obs)


def test_return_is_F_gain_and_reward_terms(env64: PlacementEnv) -> None:
    for seed in range(3):
        _, info = env64.reset(seed=seed)
        f0 = info["F"]
        assert f0 == pytest.approx(env64.initial_F)
        total, rng, done = 0.0, np.random.default_rng(seed), False
        while not done:
            valid = np.flatnonzero(info["action_mask"])
            a = (
                int(valid[rng.integers(len(valid))])
                if len(valid) > 1 and rng.random() > 0.05
                else int(valid[-1])
            )
            _, r, term, trunc, info = env64.step(a)
            terms = info["reward_terms"]
            assert terms["own_value"] + terms["interference"] == pytest.approx(r, abs=1e-12)
            if info["placed"] is not None:
                assert terms["own_value"] > 0
            total += float(r)
            done = term or trunc
        assert total == pytest.approx(info["F"] - f0, rel=1e-9, abs=1e-9)
        assert total == pytest.approx(env64.episode_return, rel=1e-9, abs=1e-9)
        # Every placed job is where the env says, and the evaluation from scratch agrees.
        state = env64.state.copy()
        assert state.evaluate() == pytest.approx(info["F"], rel=1e-9)


def test_stop_terminates_and_queue_empty_terminates(env64: PlacementEnv) -> None:
    env64.reset(seed=0)
    _, r, term, trunc, info = env64.step(env64.table.stop_action)
    assert term and not trunc and r == 0.0 and not info["invalid_action"]
    env64.reset(seed=0)
    done, steps = False, 0
    while not done:
        valid = np.flatnonzero(env64.action_masks()[:-1])
        _, _, term, trunc, info = env64.step(
            int(valid[0]) if len(valid) else env64.table.stop_action
        )
        done, steps = term or trunc, steps + 1
    assert term and (info["pending"] == 0 or not env64.table.has_placement)
    assert steps <= env64.scenario.queue_size + 1


@pytest.mark.parametrize(
    "bad", [-1, 10**6, 1.5, "x", None, np.array([1, 2]), np.int8(-3), True, False, np.bool_(True)]
)
def test_invalid_action_is_a_noop(env64: PlacementEnv, bad: Any) -> None:
    obs, info = env64.reset(seed=1)
    f0 = info["F"]
    obs2, r, term, trunc, info2 = env64.step(bad)
    assert r == 0.0 and not term and not trunc and info2["invalid_action"]
    assert info2["F"] == f0 and info2["placed"] is None
    np.testing.assert_array_equal(info["action_mask"], info2["action_mask"])
    for k in obs:
        if k != "summary":
            np.testing.assert_array_equal(obs[k], obs2[k])


def test_masked_action_is_a_noop_and_stop_mode() -> None:
    env = PlacementEnv("default", invalid_action="stop")
    _, info = env.reset(seed=0)
    masked = np.flatnonzero(~info["action_mask"])
    assert len(masked)
    _, r, term, _, info = env.step(int(masked[0]))
    assert term and r == 0.0 and info["invalid_action"]
    env = PlacementEnv("default")
    _, info = env.reset(seed=0)
    _, r, term, _, info = env.step(int(masked[0]))
    assert not term and info["invalid_action"]


def test_invalid_actions_truncate_at_the_step_cap() -> None:
    env = PlacementEnv("testbed-8", max_steps=5)
    env.reset(seed=0)
    for i in range(5):
        _, _, term, trunc, _ = env.step(-1)
        assert not term
        assert trunc == (i == 4)


def test_hypothesis_mask_never_empty() -> None:
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    envs = {
        "c": PlacementEnv("testbed-8"),
        "c64": PlacementEnv("default-severe"),
        "g": GPUPlacementEnv("testbed-8"),
    }

    @hyp.settings(max_examples=40, deadline=None, derandomize=True)
    @hyp.given(
        which=st.sampled_from(sorted(envs)),
        seed=st.integers(0, 2**31 - 1),
        choices=st.lists(st.integers(-3, 10**4), min_size=1, max_size=40),
    )
    def prop(which: str, seed: int, choices: list[int]) -> None:
        env = envs[which]
        _, info = env.reset(seed=seed)
        for c in choices:
            mask = info["action_mask"]
            assert mask.any() and mask[-1]
            np.testing.assert_array_equal(mask, env.action_masks())
            valid = np.flatnonzero(mask)
            a = int(valid[c % len(valid)]) if c >= 0 else c  # negative: an invalid action
            _, _, term, trunc, info = env.step(a)
            assert info["action_mask"].any()
            if term or trunc:
                break

    prop()


def test_identical_jobs_share_a_slot() -> None:
    grouped = PlacementEnv("default")
    plain = PlacementEnv("default", group_identical_jobs=False)
    for seed in range(4):
        grouped.reset(seed=seed)
        plain.reset(seed=seed)
        keys = [
            (j.model, j.num_gpus, float(j.batch_size), float(j.weight)) for j in grouped.table.jobs
        ]
        assert len(set(keys)) == len(keys)
        n = len(grouped.table.jobs)
        assert grouped.table.copies[:n].sum() == len(plain.table.jobs)
        assert [j.job_id for j in plain.table.jobs][:1] == [j.job_id for j in grouped.table.jobs][
            :1
        ]


def test_reset_with_given_instance(env64: PlacementEnv) -> None:
    inst = ScenarioSampler("default").sample(np.random.default_rng(5))
    f0 = inst.state.F
    _, info = env64.reset(options={"instance": inst})
    assert info["F"] == f0 and [j.job_id for j in env64.pending] == [j.job_id for j in inst.queue]
    env64.step(int(np.flatnonzero(info["action_mask"])[0]))
    assert f0 == inst.state.F  # the given instance is not mutated


# --------------------------------------------------------------------------- features
def test_candidate_features_match_the_model() -> None:
    """Estimated η and survival of every row equal the placed job's, and the privileged gain is ΔF."""
    env = PlacementEnv("default-severe", privileged=True, table_layout=True)
    C = env.max_candidates
    mj = env.features.max_job_gpus
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        for _ in range(3):
            rows = np.flatnonzero(info["action_mask"][:-1])
            for a in rows:
                q, c = divmod(int(a), C)
                job = env.table.jobs[q]
                gpus = env.table.gpus(q, c)
                st = env.state.copy()
                delta = st.add(job, gpus)
                rec = st.job_record(job.job_id)
                row = obs["candidates"][a]
                assert row[0] == 1.0
                assert row[CANDIDATE_FEATURES.index("eta")] == pytest.approx(rec.eta, rel=1e-6)
                assert row[CANDIDATE_FEATURES.index("survival")] == pytest.approx(
                    rec.survival, rel=1e-6
                )
                assert obs["gain"][a] == pytest.approx(np.clip(delta / mj, -1, 1), abs=1e-6)
                facts = env.state.facts_for(gpus)
                assert row[CANDIDATE_FEATURES.index("servers")] == pytest.approx(facts.s[0] / 32)
            padding = np.flatnonzero(~info["action_mask"][:-1])
            assert (obs["candidates"][padding] == 0).all() and (obs["gain"][padding] == 0).all()
            obs, _, term, trunc, info = env.step(int(rows[-1]))
            if term or trunc:
                break


def test_gpu_features_track_the_state(env64: PlacementEnv) -> None:
    obs, info = env64.reset(seed=2)
    gpus = obs["gpus"].reshape(-1, len(GPU_FEATURES))
    free = env64.state.free_mask
    np.testing.assert_array_equal(gpus[:, GPU_FEATURES.index("free")] == 1.0, free)
    h = env64.state.health
    np.testing.assert_allclose(
        gpus[:, GPU_FEATURES.index("slow")], 1 - 1 / h.gpu_slowdown, rtol=1e-6
    )
    a = int(np.flatnonzero(info["action_mask"])[0])
    obs, *_ = env64.step(a)
    placed = env64.placed[-1][1]
    gpus = obs["gpus"].reshape(-1, len(GPU_FEATURES))
    assert (gpus[placed, GPU_FEATURES.index("busy")] == 1.0).all()
    eta = env64.state.job_record(env64.placed[-1][0]).eta
    assert gpus[placed[0], GPU_FEATURES.index("job_eta")] == pytest.approx(eta, rel=1e-6)


def test_observation_noise_changes_features_not_rewards() -> None:
    sc = ScenarioSampler("default").scenario.replace(name="noisy", observation_noise=0.5)
    noisy, exact = PlacementEnv(sc), PlacementEnv("default")
    o1, i1 = noisy.reset(seed=4)
    o2, i2 = exact.reset(seed=4)
    assert i1["F"] == i2["F"]
    assert not np.array_equal(o1["gpus"], o2["gpus"])


# ------------------------------------------------------------------------------ GPU mode
def test_gpu_mode_places_after_k_picks_and_defers() -> None:
    env = GPUPlacementEnv("default")
    _, info = env.reset(seed=0)
    head = env.head
    assert head is not None
    G = env.topology.num_gpus
    total = 0.0
    free = np.flatnonzero(info["action_mask"][:G])
    for i, g in enumerate(free[: head.num_gpus]):
        assert info["head"] == head.job_id
        _obs, r, term, _trunc, info = env.step(int(g))
        total += float(r)
        if i < head.num_gpus - 1:
            assert r == 0.0 and not info["action_mask"][g] and info["chosen"][-1] == g
    assert info["placed"] == head.job_id and env.placed[-1][0] == head.job_id
    assert total == pytest.approx(env.episode_return)
    # Defer drops the head job.
    nxt = env.head
    _, r, _, _, info = env.step(env.defer_action)
    assert r == 0.0 and nxt is not None and nxt.job_id in env.dropped
    assert all(j.job_id != nxt.job_id for j in env.pending)
    # Busy GPUs and invalid indices are no-ops.
    busy = int(env.placed[-1][1][0])
    _, r, term, _, info = env.step(busy)
    assert info["invalid_action"] and r == 0.0 and not term


def test_gpu_mode_privileged_hint_is_a_best_candidate() -> None:
    env = GPUPlacementEnv("default", privileged=True)
    obs, _info = env.reset(seed=1)
    hint = np.flatnonzero(obs["hint"])
    assert env.head is not None and len(hint) == env.head.num_gpus
    gain = 0.0
    for g in hint:
        _, r, *_ = env.step(int(g))
        gain += float(r)
    assert gain / env.features.max_job_gpus == pytest.approx(float(obs["gain"][0]), abs=1e-6)


def test_gpu_mode_episode_ends_when_nothing_fits() -> None:
    env = GPUPlacementEnv("testbed-8")
    env.reset(seed=0)
    done, n = False, 0
    while not done:
        _, _, term, trunc, _info = env.step(env.defer_action)
        done, n = term or trunc, n + 1
    assert term and env.head is None and n <= env.scenario.queue_size


# -------------------------------------------------------------------------- CROP expert
@pytest.mark.parametrize(
    "env_id",
    SMALL_CANDIDATE_IDS
    + [pytest.param(i, marks=pytest.mark.slow) for i in CANDIDATE_IDS if i in BIG_IDS],
)
def test_following_crop_gives_crop_gain(env_id: str) -> None:
    from crop_gym.baselines.crop import crop_greedy
    from crop_gym.baselines.expert import CropExpert

    env = gym.make(env_id)
    expert = CropExpert(env)
    seeds = range(2) if env_id in BIG_IDS else range(4)
    for seed in seeds:
        env.reset(seed=seed)
        base = env.unwrapped
        result = crop_greedy(base.state, base.pending, max_candidates=base.max_candidates)
        reported = sum(result.gains)
        ret, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(expert.action())
            ret += float(r)
            done = term or trunc
        assert term
        assert ret == pytest.approx(reported, rel=1e-9, abs=1e-9)
        assert [p.job_id for p in result.placements] == [jid for jid, _ in base.placed]
        assert expert.fallbacks == 0


def test_expert_replans_after_a_deviation_and_records_demos() -> None:
    from crop_gym.baselines.expert import CropExpert, expert_rollouts

    env = gym.make("crop_gym/Placement-v0")
    expert = CropExpert(env)
    _, info = env.reset(seed=3)
    a = expert.action()
    valid = np.flatnonzero(info["action_mask"][:-1])
    other = int(valid[-1] if valid[-1] != a else valid[0])
    env.step(other)  # deviate from CROP's plan
    b = expert.action()
    assert env.unwrapped.action_masks()[b]
    demos = list(expert_rollouts(gym.make("crop_gym/Placement-Testbed8-v0"), 3, seed=0))
    assert demos and all(d.action_mask[d.action] for d in demos)
    assert sum(d.terminated for d in demos) == 3
    with pytest.raises(TypeError):
        CropExpert(gym.make("crop_gym/PlacementGPU-v0"))
