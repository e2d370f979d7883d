"""The imitation phase of a training run (``crop-gym train --bc-demos N``).

:func:`imitate` records the teacher's demonstrations on the run's environment and on those of
``bc.also_on`` (one set each: ``demos.npz``, ``demos-1.npz``, ...), clones them into the model's
policy (:func:`crop_gym.agents.imitation.behaviour_cloning`), runs the config's DAgger rounds, validates
the cloned model and saves it as ``bc_model.zip``. :func:`check_also_on` refuses bad
``bc.also_on`` IDs before a run writes anything.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from crop_gym.agents.checkpoint import save_checkpoint
from crop_gym.agents.config import RunConfig, check_env_id, train_seed
from crop_gym.agents.envs import ScorerObservation, is_online
from crop_gym.agents.runstate import RunState
from crop_gym.errors import ConfigError

__all__ = ["check_also_on", "demo_file", "imitate"]


def demo_file(g: int) -> str:
    """The file of demonstration set ``g``: ``demos.npz`` for the run's own environment (0), then
    ``demos-<g>.npz`` for the ``g``-th ID of ``bc.also_on``."""
    return "demos.npz" if g == 0 else f"demos-{g}.npz"


def check_also_on(cfg: RunConfig, probe: gym.Env[Any, Any], teacher: str) -> None:
    """Refuse, in one line, a ``bc.also_on`` ID that is unknown, of another kind than the run's
    environment (another class: online, or GPU-by-GPU actions) or without the teacher."""
    from crop_gym.agents.teachers import teacher_of

    bc = cfg.run.get("bc") or {}
    per_id = bc.get("per_id") or {}
    own = cfg.env_id
    if isinstance(per_id, dict):
        known = {own, *(bc.get("also_on") or ())}
        for env_id in per_id:
            if env_id not in known:
                raise ConfigError(
                    f"{cfg.source}: bc.per_id: {env_id} is neither the run's environment nor one "
                    "of bc.also_on"
                )

    def teacher_for(env_id: str) -> str:
        opts = per_id.get(env_id) if isinstance(per_id, dict) else None
        return str(opts.get("teacher", teacher)) if isinstance(opts, dict) else teacher

    where = f"{cfg.source}: bc.also_on"
    for other in bc.get("also_on") or ():
        check_env_id(other, where=where)
        env = gym.make(other)
        try:
            if type(env.unwrapped) is not type(probe.unwrapped):
                raise ConfigError(
                    f"{where}: {other} ({type(env.unwrapped).__name__}) is not of the run's "
                    f"kind ({type(probe.unwrapped).__name__})"
                )
            policy = str(cfg.run.get("policy"))
            if policy != "CandidateScorer" and env.observation_space != probe.observation_space:
                raise ConfigError(
                    f"{where}: {other} observes another layout than the run's environment, which "
                    f"{policy} cannot read (the CandidateScorer policy can)"
                )
            env.reset(seed=0)
            try:
                teacher_of(env, teacher_for(other))
            except ValueError as e:
                raise ConfigError(f"{where}: {e} ({other})") from None
        finally:
            env.close()


def _as_scorer_sees(env: gym.Env[Any, Any], policy: Any) -> gym.Env[Any, Any]:
    """``env`` wrapped in :class:`crop_gym.agents.envs.ScorerObservation` when the policy has a candidate
    scorer whose columns or normaliser differ from the environment's; else ``env``."""
    from crop_gym.agents.networks import ObsSpec
    from crop_gym.agents.policies import scorer_of

    scorer = scorer_of(policy)
    if scorer is None or ObsSpec.from_env(env) == scorer.config.obs_spec:
        return env
    return ScorerObservation(env, scorer.config.obs_spec)


def imitate(
    run: RunState,
    model: Any,
    env: gym.Env[Any, Any],
    episodes: int,
    dagger_rounds: int | None,
    reward_scale: float,
    algo_kwargs: Mapping[str, Any],
    progress: bool,
    resume: bool,
) -> None:
    """Demonstrations, behaviour cloning (and DAgger) on ``model.policy``; saves bc_model.zip."""
    from stable_baselines3.common.logger import configure

    from crop_gym.agents.imitation import (
        BCConfig,
        Demonstrations,
        behaviour_cloning,
        dagger,
        equivalent_agreement,
        record_demonstrations,
    )

    bc_cfg = BCConfig.from_dict(run.cfg.run.get("bc"))
    bc_cfg.reward_scale = reward_scale
    bc_cfg.gamma = float(algo_kwargs.get("gamma", 1.0))
    if dagger_rounds is not None:
        bc_cfg.dagger_iterations = int(dagger_rounds)
    seeds = [train_seed(run.seed, 0, i) for i in range(episodes)]
    run.meta["seeds"]["demo_seeds"] = {
        "first": seeds[0],
        "count": len(seeds),
        "rule": "train_seed(seed, 0, i)",
    }
    # The run's own environment first, then those of bc.also_on (one demonstration set each).
    # Their observations are recorded as the policy reads them when it plays there (the job-size
    # normaliser of the 8-GPU testbed is not the 64-GPU one's).
    envs = [env, *(_as_scorer_sees(gym.make(other), model.policy) for other in bc_cfg.also_on)]
    env_ids = [run.env_id, *bc_cfg.also_on]
    t = time.perf_counter()
    sets: list[Demonstrations] = []
    for g, e in enumerate(envs):
        demo_path = run.out / demo_file(g)
        own_seeds = seeds[: bc_cfg.episodes_for(env_ids[g], len(seeds))]
        demos: Demonstrations | None = None
        if resume and demo_path.exists():
            demos = Demonstrations.load(demo_path)
            if demos.seeds != own_seeds:
                demos = None
        if demos is None:
            demos = record_demonstrations(
                e,
                own_seeds,
                gamma=bc_cfg.gamma,
                progress=progress,
                teacher=bc_cfg.teacher_for(env_ids[g]),
            )
            demos.save(demo_path)
        sets.append(demos)
    run.meta["phases"]["demos"] = {
        "episodes": sets[0].num_episodes,
        "states": len(sets[0]),
        "wall_s": time.perf_counter() - t,
    }
    if bc_cfg.also_on:
        run.meta["phases"]["demos"]["also_on"] = {
            other: {"episodes": d.num_episodes, "states": len(d)}
            for other, d in zip(bc_cfg.also_on, sets[1:], strict=True)
        }
    run.write_meta()
    logger = configure(str(run.out / "tb" / "bc"), ["tensorboard"])
    t = time.perf_counter()
    hist = behaviour_cloning(
        model.policy,
        sets,
        bc_cfg,
        seed=run.seed,
        logger=logger,
        progress=progress,
        env_ids=env_ids,
    )
    phase: dict[str, Any] = {
        "config": bc_cfg.to_dict(),
        "epochs": bc_cfg.epochs,
        "final_cross_entropy": hist["ce"][-1] if hist["ce"] else None,
        "train_agreement": hist["train_agreement"],
        "val_agreement": hist["val_agreement"],
        "train_states": hist["train_states"],
        "val_states": hist["val_states"],
    }
    if hist["val_episodes"] and not is_online(env):
        # Agreement counting CROP-equivalent choices (CROP keeps the better of two greedy passes,
        # so exact agreement is capped below 1 on instances where the passes differ).
        eq = equivalent_agreement(model.policy, env, sets[0].subset(hist["val_episodes"]))
        phase["val_equivalent_agreement"] = eq["equivalent"]
        phase["val_equivalent_states"] = eq["states"]
    if "per_set" in hist:
        phase["per_set"] = dict(zip(env_ids, hist["per_set"], strict=True))
    if bc_cfg.dagger_iterations > 0:
        _, rounds = dagger(
            model.policy,
            envs,
            sets,
            bc_cfg,
            lambda r, e: train_seed(run.seed, r, e),
            seed=run.seed,
            env_ids=env_ids,
            logger=logger,
            progress=progress,
        )
        phase["dagger"] = [
            {k: v for k, v in r.items() if k not in ("loss", "ce", "value_loss")} for r in rounds
        ]
    phase["wall_s"] = time.perf_counter() - t
    logger.close()
    for e in envs[1:]:
        e.close()
    if hasattr(model, "q_net_target"):  # DQN: start the target network from the cloned Q-network
        model.q_net_target.load_state_dict(model.q_net.state_dict())
    run.meta["phases"]["bc"] = phase
    run.validate(model, 0, phase="bc")
    save_checkpoint(model, run.out / "bc_model.zip", run.checkpoint_meta(model, phase="bc"))
    run.write_meta()
