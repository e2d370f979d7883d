"""The online rollout expert (baselines/online_rollout.py) and the copy APIs it plays on
(``Simulator.copy``, ``OnlinePlacementEnv.copy``): hand-built queues on which one step of
lookahead provably picks the better action, its cost-improvement guarantee, determinism."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.agents.teachers import teacher_of
from crop_gym.baselines.online import make_online_policy, play, rollout_policy
from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.model.timing import ideal_time

HOUR = 3600.0


def _env() -> Any:
    """64 GPUs (leafspine-64), healthy, no abnormal onsets."""
    return gym.make(
        "crop_gym/OnlinePlacement-v1", profile="none", onset_rate_per_gpu_hour=None
    ).unwrapped


def _job(env: Any, job_id: str, k: int, hours: float, arrival: float = 0.0) -> Job:
    """A resnet50 job of ``k`` GPUs whose ideal run time on the env's cluster is ``hours``."""
    probe = Job(job_id, "resnet50", k, 64 * k, 1.0, arrival)
    t = ideal_time(env.topology, probe, env.sim_config.perf)
    return Job(job_id, "resnet50", k, 64 * k, hours * HOUR / t, arrival)


def _placed(env: Any, action: int) -> str | None:
    """The job ``action`` starts (``None`` for wait)."""
    decoded = env.table.decode(action)
    return None if decoded is None else str(env.table.jobs[decoded[0]].job_id)


def _small_window_env() -> Any:
    """A v2 evaluation window of 12 jobs (short enough for many completions)."""
    return gym.make("crop_gym/OnlinePlacement-Bursty-v2", split="eval", window_jobs=12).unwrapped


# ------------------------------------------------------------------------------- copies
def test_simulator_copy_has_the_same_future_and_is_independent() -> None:
    env = _small_window_env()
    env.reset(seed=10**9 + 3)
    sim = env.sim
    twin = sim.copy()
    # Placing in the copy leaves the original as it was.
    job = twin.queue[0]
    twin.place(job, np.flatnonzero(twin.state.gpu_owner < 0)[: job.num_gpus])
    assert sim.queue_length == twin.queue_length + 1
    assert sim.state.num_free == twin.state.num_free + job.num_gpus
    # The same placements in both give the same events at the same times (health included).
    other = sim.copy()
    sim.place(job, np.flatnonzero(sim.state.gpu_owner < 0)[: job.num_gpus])
    for _ in range(30):
        if sim.done:
            break
        assert sim.advance() == twin.advance()
        assert sim.now == twin.now
    assert np.array_equal(sim.ledger.finish, twin.ledger.finish, equal_nan=True)
    assert sim.health_process.onsets == twin.health_process.onsets
    # The untouched copy is still at time 0 with everything queued as it was.
    assert other.now == 0.0 and other.running == 0


def test_env_copy_replays_the_episode_and_does_not_touch_the_original() -> None:
    env = _small_window_env()
    env.reset(seed=10**9 + 5)
    base = make_online_policy("srsf-crop")
    for _ in range(4):
        env.step(base(env))
    before = (env.sim.now, env.steps, env.in_system_s, env.sim.queue_length)
    twin = env.copy()
    assert twin is not env and twin.sim is not env.sim
    done = False
    while not done:
        _, _, term, trunc, _ = twin.step(base(twin))
        done = term or trunc
    assert (env.sim.now, env.steps, env.in_system_s, env.sim.queue_length) == before
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(base(env))
        done = term or trunc
    assert env.mean_jct_h() == twin.mean_jct_h()
    assert env.sim.now == twin.sim.now


def test_env_copy_before_reset_is_refused() -> None:
    with pytest.raises(gym.error.ResetNeeded):
        _env().copy()


# --------------------------------------------------------------------- hand-checked picks
def test_lookahead_starts_the_big_short_job_that_srsf_puts_last() -> None:
    """A: 1 GPU for 10 h; B: all 64 GPUs for 2 h; both at time 0. srsf ranks A (10 GPU-h)
    before B (128 GPU-h); once A runs, B cannot start until A ends: JCTs 10 and 12, mean 11 h.
    Starting B first gives 2 and 12, mean 7 h; the rollout sees it. Waiting on an idle cluster
    with nothing left to arrive runs to the 72 h horizon (every job in the system until then)."""
    env = _env()
    env.reset(seed=0, options={"jobs": [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0)]})
    srsf = make_online_policy("srsf-crop")
    assert _placed(env, srsf(env)) == "A"
    expert = rollout_policy("srsf-crop", top=3)
    values = {_placed(env, a): v for a, v in expert.values(env).items()}
    assert values == pytest.approx({"A": 11.0, "B": 7.0, None: 72.0}, rel=1e-6)
    assert _placed(env, expert(env)) == "B"
    env.reset(seed=0, options={"jobs": [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0)]})
    assert play_jct(env, expert) == pytest.approx(7.0, rel=1e-6)
    env.reset(seed=0, options={"jobs": [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0)]})
    assert play_jct(env, srsf) == pytest.approx(11.0, rel=1e-6)


def test_lookahead_waits_for_a_job_about_to_arrive() -> None:
    """A: 1 GPU for 10 h at time 0; B: 64 GPUs for 2 h at 0.1 h. sjf starts A at once (the only
    job), and B waits until A ends: JCTs 10 and 11.9, mean 10.95 h. Waiting until B arrives lets
    sjf start B first: JCTs 2 and 12.1, mean 7.05 h."""
    env = _env()
    jobs = [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0, arrival=0.1 * HOUR)]
    env.reset(seed=0, options={"jobs": jobs})
    expert = rollout_policy("sjf-crop", top=3)
    values = {_placed(env, a): v for a, v in expert.values(env).items()}
    assert values == pytest.approx({"A": 10.95, None: 7.05}, rel=1e-6)
    assert expert(env) == env.table.stop_action
    assert expert.stats.deviations == 1 and expert.stats.waits_chosen == 1
    no_wait = rollout_policy("sjf-crop", top=3, consider_wait=False)
    assert _placed(env, no_wait(env)) == "A"  # without waiting, A is the only candidate


def play_jct(env: Any, policy: Any) -> float:
    """Mean JCT (hours) of ``policy`` playing ``env`` from its current state to the end."""
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(policy(env))
        done = term or trunc
    return float(env.mean_jct_h())


# --------------------------------------------------------------- guarantee, determinism
def test_rollout_never_loses_to_its_base_and_its_forecast_comes_true() -> None:
    """Cost improvement (full completions, the base action among the candidates): the value of
    the chosen action never rises from one decision to the next, the last one is the realized
    mean JCT, and that is at most the base policy's on the same window."""
    env = _small_window_env()
    for seed in (10**9 + 1, 10**9 + 7):
        base_jct = play(env, make_online_policy("srsf-crop"), seed).mean_jct_h
        env.reset(seed=seed)
        expert = rollout_policy("srsf-crop", top=2)
        chosen: list[float] = []
        first_base: list[float] = []
        done = False
        while not done:
            if env.table.has_placement:
                values = expert.values(env)
                first_base = first_base or [values[expert.base(env)]]
                action = expert(env)
                chosen.append(values[action])
            else:
                action = expert(env)
            _, _, term, trunc, _ = env.step(action)
            done = term or trunc
        assert first_base[0] == pytest.approx(base_jct, rel=1e-12)  # the base's own episode
        assert all(b <= a + 1e-9 for a, b in itertools.pairwise(chosen))
        assert env.mean_jct_h() == pytest.approx(chosen[-1], rel=1e-12)
        assert env.mean_jct_h() <= base_jct + 1e-9


def test_rollout_is_deterministic_under_a_seed() -> None:
    env = _small_window_env()
    runs = []
    for _ in range(2):
        env.reset(seed=10**9 + 2)
        expert = rollout_policy("srsf-crop", top=2, depth=6)
        actions = []
        done = False
        while not done:
            a = expert(env)
            actions.append(a)
            _, _, term, trunc, _ = env.step(a)
            done = term or trunc
        runs.append((actions, env.mean_jct_h()))
    assert runs[0] == runs[1]


def test_truncated_completion_charges_the_remaining_ideal_work() -> None:
    """depth=1 in the two-job queue: after starting A, the base's one step is *wait* (nothing
    else fits), which runs to A's completion at 10 h; B (2 h of ideal work) is then queued:
    (10 + 10 + 2) / 2 = 11 h. Starting B first: wait runs to 2 h, A then has 10 h left:
    (2 + 2 + 10) / 2 = 7 h."""
    env = _env()
    env.reset(seed=0, options={"jobs": [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0)]})
    expert = rollout_policy("srsf-crop", top=3, depth=1)
    values = {_placed(env, a): v for a, v in expert.values(env).items()}
    assert values["A"] == pytest.approx(11.0, rel=1e-6)
    assert values["B"] == pytest.approx(7.0, rel=1e-6)


def test_bad_settings_are_refused_and_the_teacher_is_registered() -> None:
    with pytest.raises(ConfigError, match="depth"):
        rollout_policy(depth=0)
    with pytest.raises(ConfigError, match="top"):
        rollout_policy(top=-1)
    with pytest.raises(KeyError, match="unknown JCT heuristic"):
        rollout_policy("crop")
    env = _env()
    env.reset(seed=0, options={"jobs": [_job(env, "A", 1, 10.0), _job(env, "B", 64, 2.0)]})
    teacher = teacher_of(env, "srsf-crop-rollout")
    assert _placed(env, teacher()) == "B"


class _SrsfAgent:
    """srsf-crop acting through the agent interface (``bind`` / ``act``)."""

    name = "srsf"

    def bind(self, env: gym.Env[Any, Any]) -> None:
        self.env: Any = env.unwrapped
        self.policy = make_online_policy("srsf-crop")

    def act(self, obs: Any, mask: np.ndarray) -> int:
        return int(self.policy(self.env))


def test_eval_plays_the_rollout_as_a_reference_when_named_in_baselines() -> None:
    """``baselines=("srsf-crop-rollout",)`` puts the lookahead in ``mean_jct_ratio_to`` (played
    through the env, not a bare simulator); on every window it is no worse than srsf-crop."""
    pytest.importorskip("torch")
    from crop_gym.agents.evaluation import evaluate_online

    rep = evaluate_online(
        _SrsfAgent(),
        "crop_gym/OnlinePlacement-Bursty-v2",
        episodes=2,
        env_kwargs={"window_jobs": 8},
        baselines=("srsf-crop-rollout",),
        references=("srsf-crop",),
    )
    assert set(rep["mean_jct_ratio_to"]) == {"srsf-crop", "srsf-crop-rollout"}
    assert rep["baselines"] == {}
    for r in rep["per_episode"]:
        assert r["references"]["srsf-crop-rollout"] <= r["references"]["srsf-crop"] + 1e-9
        assert r["policy"]["mean_jct_h"] == pytest.approx(r["references"]["srsf-crop"], rel=1e-9)
