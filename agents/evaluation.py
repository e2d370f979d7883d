"""Evaluation of trained policies against CROP and the baselines on the same held-out seeds.

:class:`PolicyAgent` turns a trained model into greedy (deterministic) actions. For a model with
the candidate scorer it runs the torch module directly on the observation, after mapping the
observation onto the columns the scorer was trained with (:func:`~crop_gym.agents.networks.adapt_observation`):
this is how a policy trained on the 64-GPU environment runs on the 512-GPU one (other ``G``,
``Q`` and ``M``). Models with SB3's default ``MultiInputPolicy`` go through ``model.predict`` and
only run on environments with their training observation space.

:func:`evaluate_static` plays the policy on the static environment from ``reset(seed=s)`` for
``s = first_seed, first_seed + 1, ...``; on each instance (the state right after reset) it also
runs CROP and every baseline of :data:`crop_gym.baselines.registry.POLICIES`, and a *random valid action*
reference (a uniformly drawn valid placement at every step, stop only when nothing else is valid),
so every number is measured on the same instances. :func:`evaluate_online` does the same on the
online environment: the agent plays the episode, and each baseline runs in a simulator built from
the same trace window, cluster, abnormality profile and seed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.agents.config import EVAL_SEED_BASE, TRAIN_SEED_LIMIT
from crop_gym.agents.envs import is_online
from crop_gym.agents.networks import MASKED_LOGIT, ObsSpec, adapt_observation, obs_to_tensors
from crop_gym.agents.policies import scorer_of
from crop_gym.agents.stats import ratio_bootstrap
from crop_gym.baselines.compare import DEFAULT_POLICIES
from crop_gym.baselines.online import JCT_HEURISTICS, ROLLOUT_POLICIES
from crop_gym.errors import ConfigError

#: References played through the online environment itself (:mod:`crop_gym.baselines.online`):
#: CROP and the four JCT heuristics, the best of which is reported (``best_heuristic``).
ONLINE_REFERENCES: tuple[str, ...] = ("crop", *JCT_HEURISTICS)

#: Static references played through the environment itself from the same ``reset(seed)``, which
#: ``baselines`` may name beside registered policies (they are in ``ratio_to`` like those).
STATIC_ENV_REFERENCES: tuple[str, ...] = ("crop-rollout",)

#: Online references that ``baselines`` may name: played through the environment like
#: :data:`ONLINE_REFERENCES` (they are then in ``mean_jct_ratio_to``), not in a bare simulator.
ONLINE_ENV_REFERENCES: tuple[str, ...] = tuple(ROLLOUT_POLICIES)

#: Bootstrap resamples of the intervals of the online report (windows resampled, seeded).
BOOTSTRAP_REPS = 2000

__all__ = [
    "BOOTSTRAP_REPS",
    "DEFAULT_BASELINES",
    "ONLINE_ENV_REFERENCES",
    "ONLINE_REFERENCES",
    "STATIC_ENV_REFERENCES",
    "PolicyAgent",
    "RandomValidAgent",
    "evaluate",
    "evaluate_online",
    "evaluate_static",
    "outer_action_mask",
    "summarize",
]

#: Baselines compared on the static environment: those of ``crop-gym compare`` (every registered
#: policy but ``crop-plain``, which returns exactly CROP's placements, only slower).
DEFAULT_BASELINES: tuple[str, ...] = DEFAULT_POLICIES


class PolicyAgent:
    """Greedy actions of a trained SB3 model on a placement environment.

    Args:
        model: An SB3 model (MaskablePPO, PPO or DQN).
        direct: Run the scorer module directly (default for scorer policies); ``False`` forces
            ``model.predict`` (same environment shape only).
    """

    def __init__(self, model: Any, *, direct: bool | None = None) -> None:
        self.model = model
        self.scorer = scorer_of(model)
        self.direct = self.scorer is not None if direct is None else bool(direct)
        if self.direct and self.scorer is None:
            raise ValueError("direct evaluation needs a candidate-scorer policy")
        self.maskable = type(model).__name__ == "MaskablePPO"
        self._env_spec: ObsSpec | None = None

    @property
    def name(self) -> str:
        """A short description."""
        kind = "scorer" if self.scorer is not None else "MultiInputPolicy"
        return f"{type(self.model).__name__}({kind})"

    def bind(self, env: gym.Env[Any, Any]) -> None:
        """Prepare for ``env`` (its observation columns; a shape check for ``model.predict``).

        Raises:
            ValueError: If the model cannot run on ``env``.
        """
        if self.direct:
            assert self.scorer is not None
            self._env_spec = ObsSpec.from_env(env)
            spec = self.scorer.config.obs_spec
            missing = [
                c for c in spec.candidate_features if c not in self._env_spec.candidate_features
            ]
            if missing:
                raise ValueError(
                    f"the environment lacks candidate columns {missing} the policy reads"
                )
            return
        want = self.model.observation_space
        have = env.observation_space
        if want != have:
            raise ValueError(
                "this model uses SB3's MultiInputPolicy, which only runs on its training observation "
                f"space {want}; the environment has {have}"
            )

    def act(self, obs: Mapping[str, np.ndarray], mask: np.ndarray) -> int:
        """The greedy action for one observation under the environment's mask."""
        if self.direct:
            assert self.scorer is not None and self._env_spec is not None
            x = adapt_observation(obs, self._env_spec, self.scorer.config.obs_spec)
            with th.no_grad():
                logits = self.scorer.logits(obs_to_tensors(x))[0]
            logits = logits.masked_fill(~th.as_tensor(np.asarray(mask, dtype=bool)), MASKED_LOGIT)
            return int(logits.argmax())
        if self.maskable:
            a, _ = self.model.predict(dict(obs), action_masks=mask, deterministic=True)
        else:
            a, _ = self.model.predict(dict(obs), deterministic=True)
        return int(a)


class RandomValidAgent:
    """A uniformly drawn valid placement at every step; stop only when nothing else is valid.

    A reference point for the static environment: its candidates are CROP's compact placements, so
    even random choices among them score well, and a learnt policy should be judged by how much
    of the remaining gap to CROP it closes.

    Args:
        rng: Random generator.
    """

    name = "random-valid-action"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def bind(self, env: gym.Env[Any, Any]) -> None:
        """Nothing to prepare."""

    def act(self, obs: Mapping[str, np.ndarray], mask: np.ndarray) -> int:
        """A random valid non-stop action, or stop."""
        valid = np.flatnonzero(np.asarray(mask)[:-1])
        return int(self.rng.choice(valid)) if len(valid) else len(mask) - 1


def outer_action_mask(env: gym.Env[Any, Any]) -> np.ndarray:
    """The valid actions as the outermost layer of ``env`` that defines ``action_masks`` has them.

    A wrapper that changes the mask (:class:`crop_gym.wrappers.SafeStop`) defines its own
    ``action_masks``; the agent must see that one, not the base environment's.
    """
    return np.asarray(env.get_wrapper_attr("action_masks")(), dtype=bool)


def _play(env: gym.Env[Any, Any], agent: Any, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
    steps = invalid = 0
    t0 = time.perf_counter()
    done = False
    while not done:
        a = agent.act(obs, outer_action_mask(env))
        obs, _, term, trunc, info = env.step(a)
        steps += 1
        invalid += int(bool(info.get("invalid_action", False)))
        done = bool(term or trunc)
    return {
        "steps": steps,
        "invalid_actions": invalid,
        "seconds": time.perf_counter() - t0,
        "info": info,
    }


def evaluate_static(
    agent: Any,
    env_id: str,
    *,
    episodes: int = 20,
    first_seed: int = EVAL_SEED_BASE,
    env_kwargs: Mapping[str, Any] | None = None,
    baselines: Sequence[str] = DEFAULT_BASELINES,
    random_reference: bool = True,
    progress: bool = False,
    safe_stop: str | None = None,
) -> dict[str, Any]:
    """Mean F of the agent, CROP and the baselines on the same instances of a static env.

    Args:
        agent: A :class:`PolicyAgent` (or anything with ``bind(env)`` and ``act(obs, mask)``).
        env_id: A static placement environment ID.
        episodes: Number of instances.
        first_seed: Seed of the first instance (instance ``i`` is ``reset(seed=first_seed + i)``).
        env_kwargs: Environment arguments.
        baselines: Registered policy names to compare (``crop`` first is customary), and any of
            :data:`STATIC_ENV_REFERENCES` (``crop-rollout``: CROP with one step of lookahead,
            :class:`crop_gym.baselines.rollout_expert.CropRolloutExpert`, played through the
            environment from the same ``reset(seed)``; candidate-mode IDs only).
        random_reference: Also play the :class:`RandomValidAgent` reference.
        progress: Show a progress bar.
        safe_stop: Play the agent under :class:`crop_gym.wrappers.SafeStop` in this mode
            (``"positive_gain"`` or ``"exhausted"``; ``None``: the environment's own stop). The
            baselines are not affected (they are not asked to stop).

    Returns:
        :func:`summarize` of the per-episode records (with ``safe_stop``).
    """
    from crop_gym.policy import apply, make_policy
    from crop_gym.scenario import PlacementInstance

    env = gym.make(env_id, **dict(env_kwargs or {}))
    if safe_stop is not None:
        from crop_gym.wrappers import SafeStop

        env = SafeStop(env, mode=safe_stop)
    agent.bind(env)
    played_refs = [n for n in baselines if n in STATIC_ENV_REFERENCES]
    policies = {name: make_policy(name) for name in baselines if name not in played_refs}
    ref_env = _static_reference_env(env_id, env_kwargs) if played_refs else None
    records: list[dict[str, Any]] = []
    it: Any = range(episodes)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"eval {env_id}", unit="ep", dynamic_ncols=True)
    for i in it:
        seed = int(first_seed) + i
        obs, info = env.reset(seed=seed)
        u: Any = env.unwrapped
        snap = PlacementInstance(u.state.copy(), tuple(u.pending), u.instance.scenario)
        F_start = float(u.initial_F)
        played = _play(env, agent, obs, info)
        rec: dict[str, Any] = {
            "seed": seed,
            "F_start": F_start,
            "policy": {
                "F": float(u.state.F),
                "gain": float(u.episode_return),
                "jobs_placed": len(u.placed),
                "steps": played["steps"],
                "invalid_actions": played["invalid_actions"],
                "seconds": played["seconds"],
            },
            "baselines": {},
        }
        for name, pol in policies.items():
            t0 = time.perf_counter()
            placements = pol.place(snap.state, snap.queue, rng=np.random.default_rng([seed, 3]))
            st = snap.state.copy()
            gain = apply(st, placements)
            rec["baselines"][name] = {
                "F": float(st.F),
                "gain": float(gain),
                "jobs_placed": len(placements),
                "seconds": time.perf_counter() - t0,
            }
        if ref_env is not None:
            for name in played_refs:
                rec["baselines"][name] = _play_static_reference(ref_env, name, seed)
        if random_reference:
            ref = RandomValidAgent(np.random.default_rng([seed, 4]))
            obs, info = env.reset(seed=seed)
            _play(env, ref, obs, info)
            rec["baselines"][ref.name] = {
                "F": float(u.state.F),
                "gain": float(u.episode_return),
                "jobs_placed": len(u.placed),
                "seconds": 0.0,
            }
        records.append(rec)
        if progress and "crop" in rec["baselines"]:
            pol_F = np.mean([r["policy"]["F"] for r in records])
            crop_F = np.mean([r["baselines"]["crop"]["F"] for r in records])
            it.set_postfix(ratio_to_crop=f"{pol_F / crop_F:.4f}")
    env.close()
    if ref_env is not None:
        ref_env.close()
    out = summarize(records, env_id=env_id, first_seed=first_seed, kind="static")
    out["safe_stop"] = safe_stop
    return out


def _static_reference_env(env_id: str, env_kwargs: Mapping[str, Any] | None) -> gym.Env[Any, Any]:
    """The environment the static references of :data:`STATIC_ENV_REFERENCES` play (plain stop).

    Raises:
        ConfigError: If ``env_id`` is not a candidate-mode placement environment.
    """
    from crop_gym.envs.placement import PlacementEnv

    env = gym.make(env_id, **dict(env_kwargs or {}))
    if not isinstance(env.unwrapped, PlacementEnv):
        env.close()
        raise ConfigError(
            f"baselines: {', '.join(STATIC_ENV_REFERENCES)} play candidate-mode Placement-* "
            f"environments only, not {env_id}"
        )
    return env


def _play_static_reference(env: gym.Env[Any, Any], name: str, seed: int) -> dict[str, Any]:
    """Play the static reference ``name`` from ``reset(seed)``; its record (F, gain, jobs placed)."""
    from crop_gym.baselines.rollout_expert import CropRolloutExpert

    t0 = time.perf_counter()
    env.reset(seed=seed)
    u: Any = env.unwrapped
    act = CropRolloutExpert(env).action
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(act())
        done = bool(term or trunc)
    return {
        "F": float(u.state.F),
        "gain": float(u.episode_return),
        "jobs_placed": len(u.placed),
        "seconds": time.perf_counter() - t0,
    }


def evaluate_online(
    agent: Any,
    env_id: str,
    *,
    episodes: int = 5,
    first_seed: int = EVAL_SEED_BASE,
    env_kwargs: Mapping[str, Any] | None = None,
    baselines: Sequence[str] = ("crop", "best-fit", "first-fit"),
    references: Sequence[str] = ONLINE_REFERENCES,
    progress: bool = False,
    split: str | None = "eval",
) -> dict[str, Any]:
    """Mean JCT and effective GPU-hours of the agent and baselines on the same trace windows.

    For each seed the agent plays the online environment from ``reset(seed)``; each baseline runs
    in a :class:`crop_gym.sim.Simulator` built from the same jobs, cluster, profile, options and
    simulator seed (hence the same health timeline as long as the placements do not change it).
    Each of ``references`` (:data:`crop_gym.baselines.online.ONLINE_POLICIES` names) plays the *same
    environment* from the same ``reset(seed)`` through the same action interface
    (:func:`crop_gym.baselines.online.play`): these are the CROP and sjf-crop of docs/BENCHMARK.md, and
    ``mean_jct_h`` (time in system until completion or the horizon, every window job) is
    compared with theirs on environments that report it (``OnlinePlacement-v1`` and later).

    Args:
        agent: A :class:`PolicyAgent` (or anything with ``bind(env)`` and ``act(obs, mask)``).
        env_id: An online placement environment ID.
        episodes: Number of windows.
        first_seed: Seed of the first window (window ``i`` is ``reset(seed=first_seed + i)``).
        env_kwargs: Environment arguments.
        baselines: Registered (static) policy names run in a bare simulator on each window, and
            any of :data:`ONLINE_ENV_REFERENCES` (``srsf-crop-rollout``: the lookahead on
            srsf-crop, :mod:`crop_gym.baselines.online_rollout`), which are played through the
            environment and added to ``references``.
        references: :data:`crop_gym.baselines.online.ONLINE_POLICIES` names played through the
            environment.
        progress: Show a progress bar.
        split: The part of the traces the windows come from (``"eval"``, the default; ``"train"``
            for validation during training; ``None``: as ``env_kwargs`` say); it overrides
            ``env_kwargs["split"]`` and is recorded as ``split`` in the report.

    Returns:
        :func:`summarize` of the per-episode records (with JCT fields), and ``split``.
    """
    from crop_gym.agents.envs import with_split
    from crop_gym.baselines.online import make_online_policy, play
    from crop_gym.policy import make_policy
    from crop_gym.sim import Simulator

    env_refs = [n for n in baselines if n in ONLINE_ENV_REFERENCES]
    references = [*references, *(n for n in env_refs if n not in references)]
    kwargs = with_split(env_id, env_kwargs, split)
    env = gym.make(env_id, **kwargs)
    ref_env = gym.make(env_id, **kwargs) if references else None
    split_record = env.unwrapped.split.to_dict()  # type: ignore[attr-defined]
    agent.bind(env)
    policies = {name: make_policy(name) for name in baselines if name not in env_refs}
    for name in references:
        make_online_policy(name)  # unknown names fail before any episode
    records: list[dict[str, Any]] = []
    it: Any = range(episodes)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"eval {env_id}", unit="ep", dynamic_ncols=True)
    for i in it:
        seed = int(first_seed) + i
        obs, info = env.reset(seed=seed)
        u: Any = env.unwrapped
        jobs, sim_seed = u.sim.jobs, u.sim.seed
        played = _play(env, agent, obs, info)
        summ = played["info"].get("episode") or u.sim.result(policy_name="agent").summary()
        rec: dict[str, Any] = {
            "seed": seed,
            "trace": u.window_trace,
            "policy": _online_record(summ, u.sim),
            "baselines": {},
        }
        rec["policy"]["steps"] = played["steps"]
        rec["policy"]["mean_jct_h"] = u.mean_jct_h() if hasattr(u, "mean_jct_h") else None
        rec["references"] = {
            name: play(
                ref_env, make_online_policy(name, np.random.default_rng([seed, 2])), seed
            ).mean_jct_h
            for name in references
            if ref_env is not None
        }
        for name, pol in policies.items():
            sim = Simulator(jobs, u.topology, profile=u.profile, config=u.sim_config, seed=sim_seed)
            res = sim.run(pol)
            rec["baselines"][name] = _online_record(res.summary(), sim)
        records.append(rec)
        if progress and "crop" in rec["references"] and rec["policy"]["mean_jct_h"] is not None:
            pj = np.mean([r["policy"]["mean_jct_h"] for r in records])
            it.set_postfix(
                mean_jct_ratio_to_crop=f"{pj / np.mean([r['references']['crop'] for r in records]):.4f}"
            )
    env.close()
    if ref_env is not None:
        ref_env.close()
    out = summarize(records, env_id=env_id, first_seed=first_seed, kind="online")
    out["split"] = split_record
    return out


def _online_record(summary: Mapping[str, Any], sim: Any) -> dict[str, Any]:
    def num(key: str) -> float | None:
        v = summary.get(key)
        return None if v is None else float(v)

    rec = sim.result(policy_name="x").records
    arrival = np.asarray(rec["arrival_s"], dtype=float)
    finish = np.asarray(rec["finish_s"], dtype=float)
    end = float(sim.now)
    arrived = arrival <= end
    tis = np.where(np.isnan(finish), end, np.minimum(finish, end)) - arrival
    return {
        "mean_jct_s": num("mean_jct_s"),
        "p95_jct_s": num("p95_jct_s"),
        "mean_time_in_system_s": float(tis[arrived].mean()) if arrived.any() else None,
        "completed": int(sim.completed),
        "jobs": len(sim.jobs),
        "effective_gpu_hours": float(sim.int_F) / 3600.0,
        "end_s": end,
        "summary": dict(summary),
    }


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def summarize(
    records: list[dict[str, Any]], *, env_id: str, first_seed: int, kind: str
) -> dict[str, Any]:
    """Aggregate per-episode records into the evaluation report.

    Static: ``policy_mean_F`` (final F, background jobs included), ``policy_mean_gain`` (the
    return, F(end) − F(start)), ``ratio_to_crop`` = policy mean F / CROP mean F and its
    interval ``ratio_to_crop_ci`` = ``[low, high]`` (a 95 % bootstrap over the instances of the
    paired ratio of means, as online), ``gain_ratio_to_crop = policy mean gain / CROP mean gain, and for every baseline its means and
    the same two ratios (``ratio_to[name]``, ``gain_ratio_to[name]``). Online: mean JCT of the
    completed jobs, mean time in system of every arrived job with unfinished ones counted up to the
    end of the episode (the fair number when episodes end at a horizon: a policy that finishes
    fewer jobs does not look faster), effective GPU-hours; ``jct_ratio_to_crop`` and
    ``time_in_system_ratio_to_crop`` (policy / CROP, < 1 is better), ``ratio_to_crop`` = policy /
    CROP effective GPU-hours.
    """
    seeds = [r["seed"] for r in records]
    names = list(records[0]["baselines"]) if records else []
    out: dict[str, Any] = {
        "env_id": env_id,
        "kind": kind,
        "episodes": len(records),
        "first_seed": int(first_seed),
        "seeds": seeds,
        "held_out": bool(all(s >= TRAIN_SEED_LIMIT for s in seeds)),
    }
    base: dict[str, Any] = {}
    if kind == "static":
        pF = float(np.mean([r["policy"]["F"] for r in records]))
        pG = float(np.mean([r["policy"]["gain"] for r in records]))
        out.update(policy_mean_F=pF, policy_mean_gain=pG)
        out["policy_invalid_actions"] = int(sum(r["policy"]["invalid_actions"] for r in records))
        for n in names:
            bF = float(np.mean([r["baselines"][n]["F"] for r in records]))
            bG = float(np.mean([r["baselines"][n]["gain"] for r in records]))
            base[n] = {
                "mean_F": bF,
                "mean_gain": bG,
                "ratio": pF / bF if bF else None,
                "gain_ratio": pG / bG if bG else None,
                "mean_seconds": float(np.mean([r["baselines"][n]["seconds"] for r in records])),
            }
        if "crop" in base:
            out["crop_mean_F"] = base["crop"]["mean_F"]
            out["crop_mean_gain"] = base["crop"]["mean_gain"]
            out["ratio_to_crop"] = base["crop"]["ratio"]
            out["gain_ratio_to_crop"] = base["crop"]["gain_ratio"]
            cF = np.array([r["baselines"]["crop"]["F"] for r in records])
            pFs = np.array([r["policy"]["F"] for r in records])
            boot = ratio_bootstrap(pFs[None, :], cF, reps=BOOTSTRAP_REPS, seed=0)
            out["ratio_to_crop_ci"] = [float(v) for v in boot["ratio_of_means_ci95"]]
            out["episodes_vs_crop"] = {
                "better": int((pFs > cF + 1e-9).sum()),
                "equal": int((np.abs(pFs - cF) <= 1e-9).sum()),
                "worse": int((pFs < cF - 1e-9).sum()),
            }
        out["ratio_to"] = {n: b["ratio"] for n, b in base.items()}
        out["gain_ratio_to"] = {n: b["gain_ratio"] for n, b in base.items()}
    else:
        pJ = _mean([r["policy"]["mean_jct_s"] for r in records])
        pT = _mean([r["policy"]["mean_time_in_system_s"] for r in records])
        pE = float(np.mean([r["policy"]["effective_gpu_hours"] for r in records]))
        out.update(
            policy_mean_jct_s=pJ, policy_mean_time_in_system_s=pT, policy_effective_gpu_hours=pE
        )
        out["policy_completed"] = int(sum(r["policy"]["completed"] for r in records))
        for n in names:
            bJ = _mean([r["baselines"][n]["mean_jct_s"] for r in records])
            bT = _mean([r["baselines"][n]["mean_time_in_system_s"] for r in records])
            bE = float(np.mean([r["baselines"][n]["effective_gpu_hours"] for r in records]))
            base[n] = {
                "mean_jct_s": bJ,
                "mean_time_in_system_s": bT,
                "effective_gpu_hours": bE,
                "completed": int(sum(r["baselines"][n]["completed"] for r in records)),
                "jct_ratio": (pJ / bJ) if (pJ is not None and bJ) else None,
                "time_in_system_ratio": (pT / bT) if (pT is not None and bT) else None,
                "ratio": pE / bE if bE else None,
            }
        if "crop" in base:
            out["crop_mean_jct_s"] = base["crop"]["mean_jct_s"]
            out["crop_mean_time_in_system_s"] = base["crop"]["mean_time_in_system_s"]
            out["jct_ratio_to_crop"] = base["crop"]["jct_ratio"]
            out["time_in_system_ratio_to_crop"] = base["crop"]["time_in_system_ratio"]
            out["ratio_to_crop"] = base["crop"]["ratio"]
        out.update(_reference_summary(records))
        out["ratio_to"] = {n: b["ratio"] for n, b in base.items()}
        out["jct_ratio_to"] = {n: b["jct_ratio"] for n, b in base.items()}
        out["time_in_system_ratio_to"] = {n: b["time_in_system_ratio"] for n, b in base.items()}
    out["baselines"] = base
    out["per_episode"] = records
    return out


def _reference_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The agent's mean JCT (hours) beside the references' on the same windows.

    ``mean_jct_ratio_to_crop`` = policy mean JCT / CROP mean JCT (means over the windows, < 1 is
    better); ``mean_jct_ratio_to[name]`` the same for every reference. When the four
    :data:`~crop_gym.baselines.online.JCT_HEURISTICS` were played: ``best_heuristic`` (the one of
    the lowest mean JCT on these windows), ``mean_jct_ratio_to_best_heuristic`` and its interval
    ``mean_jct_ratio_to_best_heuristic_ci`` = ``[low, high]``, a 95 % bootstrap over the windows
    of the paired ratio of means (:func:`~crop_gym.agents.stats.ratio_bootstrap`,
    :data:`BOOTSTRAP_REPS` resamples, seed 0); ``mean_jct_ratio_to_crop_ci`` likewise.
    """
    refs = list(records[0].get("references") or {}) if records else []
    pj = [r["policy"].get("mean_jct_h") for r in records]
    if not refs or any(v is None for v in pj):
        return {}
    p = float(np.mean(pj))
    means = {n: float(np.mean([r["references"][n] for r in records])) for n in refs}
    out: dict[str, Any] = {
        "policy_mean_jct_h": p,
        "reference_mean_jct_h": means,
        "mean_jct_ratio_to": {n: p / m if m else None for n, m in means.items()},
    }
    policy = np.asarray(pj, dtype=float)[None, :]

    def ci(name: str) -> list[float]:
        ref = np.array([r["references"][name] for r in records], dtype=float)
        boot = ratio_bootstrap(policy, ref, reps=BOOTSTRAP_REPS, seed=0)
        return [float(v) for v in boot["ratio_of_means_ci95"]]

    if "crop" in means:
        out["crop_mean_jct_h"] = means["crop"]
        out["mean_jct_ratio_to_crop"] = out["mean_jct_ratio_to"]["crop"]
        out["mean_jct_ratio_to_crop_ci"] = ci("crop")
    if all(n in means for n in JCT_HEURISTICS):
        best = min(JCT_HEURISTICS, key=means.__getitem__)
        out["heuristic_mean_jct_h"] = {n: means[n] for n in JCT_HEURISTICS}
        out["best_heuristic"] = best
        out["mean_jct_ratio_to_best_heuristic"] = out["mean_jct_ratio_to"][best]
        out["mean_jct_ratio_to_best_heuristic_ci"] = ci(best)
    return out


def evaluate(agent: Any, env_id: str, **kwargs: Any) -> dict[str, Any]:
    """:func:`evaluate_online` or :func:`evaluate_static`, by the environment's kind."""
    probe = gym.make(env_id, **dict(kwargs.get("env_kwargs") or {}))
    online = is_online(probe)
    probe.close()
    if online:
        if kwargs.pop("safe_stop", None) is not None:
            raise ConfigError(f"{env_id}: safe_stop applies to static placement environments only")
        kwargs.pop("random_reference", None)
        if "split" in kwargs and kwargs["split"] is None:
            kwargs.pop("split")
        if "baselines" in kwargs and kwargs["baselines"] is None:
            kwargs.pop("baselines")
        return evaluate_online(agent, env_id, **kwargs)
    if "baselines" in kwargs and kwargs["baselines"] is None:
        kwargs.pop("baselines")
    kwargs.pop("references", None)
    kwargs.pop("split", None)
    return evaluate_static(agent, env_id, **kwargs)
