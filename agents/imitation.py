"""Imitation of CROP: demonstrations, behaviour cloning on the policy's own logits, and DAgger.

* :func:`record_demonstrations` runs the teacher (:func:`agents.teachers.teacher_of`: by default
  :class:`baselines.expert.CropExpert`, CROP's action in the environment's candidate action space;
  on the online environments a :mod:`baselines.online` policy) on training-range seeds and stores every observation, the
  expert's action, the action mask and the return-to-go in a :class:`Demonstrations` set.
* :func:`behaviour_cloning` trains an SB3 policy *in place*: the cross-entropy of the expert's
  action under the policy's own masked logits (the scorer's per-row logits, or the action net's
  logits of SB3's default policy, or a DQN's Q-values), plus, for actor-critic policies, a
  regression of the value head on the expert's return-to-go (so that RL fine-tuning starts with a
  critic that matches the cloned actor).
* :func:`dagger` alternates rollouts of the current policy (a ``beta`` share of the steps follows the
  expert) labelled by the expert in the states the policy visits, aggregation and re-training.

After cloning, the same model object is fine-tuned by RL (``crop-gym train --bc-demos N``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F

from agents._io import atomic_write
from agents.networks import MASKED_LOGIT, obs_to_tensors
from agents.policies import scorer_of
from agents.teachers import teacher_of

__all__ = [
    "BCConfig",
    "Demonstrations",
    "agreement",
    "behaviour_cloning",
    "dagger",
    "equivalent_agreement",
    "greedy_action",
    "policy_logits",
    "record_demonstrations",
]


@dataclass
class BCConfig:
    """Behaviour-cloning options (the ``bc:`` block of a config entry).

    Attributes:
        epochs: Passes over the demonstrations.
        batch_size: Minibatch size.
        learning_rate: Adam learning rate.
        weight_decay: Adam weight decay.
        vf_coef: Weight of the value regression (actor-critic policies only).
        reward_scale: Scale of the value targets (the run's ``reward_scale``).
        gamma: Discount of the return-to-go targets (the algorithm's ``gamma``).
        val_fraction: Share of the episodes held out to measure agreement.
        max_grad_norm: Gradient clipping.
        dagger_iterations: DAgger rounds after the first cloning.
        dagger_episodes: Episodes rolled out by the policy in each round.
        dagger_beta: Share of the rollout steps that follow the expert in the first round (then
            halved each round).
        dagger_epochs: Epochs of re-training after each round.
        teacher: Whose actions are imitated: ``"crop"`` (CROP; on static environments its
            expert :class:`baselines.expert.CropExpert`) or, on online environments, any
            :data:`baselines.online.ONLINE_POLICIES` name (e.g. ``"sjf-crop"``).
    """

    epochs: int = 30
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    vf_coef: float = 0.5
    reward_scale: float = 1.0
    gamma: float = 1.0
    val_fraction: float = 0.1
    max_grad_norm: float = 1.0
    dagger_iterations: int = 0
    dagger_episodes: int = 50
    dagger_beta: float = 0.5
    dagger_epochs: int = 10
    teacher: str = "crop"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BCConfig:
        """Build from a config block (unknown keys are refused)."""
        data = dict(data or {})
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown bc options: {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass
class Demonstrations:
    """Expert-labelled states (stacked arrays).

    Attributes:
        obs: Observation arrays by key, ``(N, ...)``, in the environment's layout.
        actions: Expert actions ``int64[N]``.
        masks: Action masks ``bool[N, A]``.
        returns: Return-to-go of the episode from each state (raw ΔF, discounted by ``gamma``).
        value_weight: 1 where ``returns`` is the expert's own return-to-go (expert-driven episodes),
            0 for DAgger states visited by the learner.
        episode: Episode index of each state.
        seeds: Reset seed of each episode.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    masks: np.ndarray
    returns: np.ndarray
    value_weight: np.ndarray
    episode: np.ndarray
    seeds: list[int]

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        """Number of episodes."""
        return len(self.seeds)

    def extend(self, other: Demonstrations) -> Demonstrations:
        """A new set with ``other``'s states appended (episode indices shifted)."""
        return Demonstrations(
            {k: np.concatenate([v, other.obs[k]]) for k, v in self.obs.items()},
            np.concatenate([self.actions, other.actions]),
            np.concatenate([self.masks, other.masks]),
            np.concatenate([self.returns, other.returns]),
            np.concatenate([self.value_weight, other.value_weight]),
            np.concatenate([self.episode, other.episode + self.num_episodes]),
            [*self.seeds, *other.seeds],
        )

    def subset(self, episodes: Sequence[int]) -> Demonstrations:
        """The states of the given episodes (renumbered in the given order)."""
        eps = [int(e) for e in episodes]
        where = {e: i for i, e in enumerate(eps)}
        idx = np.flatnonzero(np.isin(self.episode, eps))
        return Demonstrations(
            {k: v[idx] for k, v in self.obs.items()},
            self.actions[idx],
            self.masks[idx],
            self.returns[idx],
            self.value_weight[idx],
            np.asarray([where[int(e)] for e in self.episode[idx]], dtype=np.int64),
            [self.seeds[e] for e in eps],
        )

    def save(self, path: str | Path) -> Path:
        """Write to a compressed ``.npz`` (atomically)."""
        arrays = {f"obs/{k}": v for k, v in self.obs.items()}
        arrays.update(
            actions=self.actions,
            masks=self.masks,
            returns=self.returns,
            value_weight=self.value_weight,
            episode=self.episode,
            seeds=np.asarray(self.seeds, dtype=np.int64),
        )

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]

        return atomic_write(path, write)

    @classmethod
    def load(cls, path: str | Path) -> Demonstrations:
        """Read a set written by :meth:`save`."""
        with np.load(path) as z:
            obs = {k[4:]: z[k] for k in z.files if k.startswith("obs/")}
            return cls(
                obs,
                z["actions"],
                z["masks"],
                z["returns"],
                z["value_weight"],
                z["episode"],
                [int(s) for s in z["seeds"]],
            )


def _discounted(rewards: Sequence[float], gamma: float) -> np.ndarray:
    out = np.empty(len(rewards))
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out


def _rollouts(
    env: gym.Env[Any, Any],
    seeds: Sequence[int],
    choose: Callable[[Any, np.ndarray, int], int],
    *,
    gamma: float,
    expert_driven: bool,
    progress: bool,
    desc: str,
    expert_rule: str = "best",
    teacher: str = "crop",
) -> Demonstrations:
    """Run one episode per seed; ``choose(obs, mask, expert_action)`` picks the action taken."""
    expert_action = teacher_of(env, teacher, expert_rule)
    obs_buf: dict[str, list[np.ndarray]] = {}
    actions: list[int] = []
    masks: list[np.ndarray] = []
    rets: list[np.ndarray] = []
    eps: list[int] = []
    it: Any = seeds
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(seeds, desc=desc, unit="ep", dynamic_ncols=True)
    for e, seed in enumerate(it):
        obs, info = env.reset(seed=int(seed))
        rewards: list[float] = []
        done = False
        while not done:
            mask = np.asarray(info["action_mask"], dtype=bool)
            a_exp = int(expert_action())
            for k, v in obs.items():
                obs_buf.setdefault(k, []).append(np.asarray(v, dtype=np.float32))
            actions.append(a_exp)
            masks.append(mask)
            eps.append(e)
            a = choose(obs, mask, a_exp)
            obs, r, term, trunc, info = env.step(a)
            rewards.append(float(r))
            done = bool(term or trunc)
        rets.append(_discounted(rewards, gamma))
    n = len(actions)
    return Demonstrations(
        {k: np.stack(v) for k, v in obs_buf.items()},
        np.asarray(actions, dtype=np.int64),
        np.stack(masks) if masks else np.zeros((0, int(env.action_space.n)), bool),  # type: ignore[attr-defined]
        np.concatenate(rets) if rets else np.zeros(0),
        np.full(n, 1.0 if expert_driven else 0.0),
        np.asarray(eps, dtype=np.int64),
        [int(s) for s in seeds],
    )


def record_demonstrations(
    env: gym.Env[Any, Any],
    seeds: Sequence[int],
    *,
    gamma: float = 1.0,
    progress: bool = False,
    expert_rule: str = "best",
    teacher: str = "crop",
) -> Demonstrations:
    """The teacher's demonstrations (CROP by default): one expert episode per seed.

    Args:
        env: A candidate-mode placement environment (unwrapped rewards: raw ΔF).
        seeds: Reset seed of each episode (use training-range seeds).
        gamma: Discount of the stored return-to-go.
        progress: Show a progress bar.
        expert_rule: CROP's ranking rule (:class:`baselines.expert.CropExpert`): ``"best"`` (the
            default CROP: better of the ΔF and ΔF-per-GPU passes) or a single pass (``"gain"``,
            ``"density"``), whose next action is a function of the current state alone.
        teacher: The teacher (:func:`teacher_of`): ``"crop"``, or an online policy's name.
    """
    return _rollouts(
        env,
        seeds,
        lambda o, m, a: a,
        gamma=gamma,
        expert_driven=True,
        progress=progress,
        desc="demos",
        expert_rule=expert_rule,
        teacher=teacher,
    )


# ----------------------------------------------------------------------------------- logits
def policy_logits(policy: Any, obs: dict[str, th.Tensor]) -> tuple[th.Tensor, th.Tensor | None]:
    """The action logits (or Q-values) of an SB3 policy and its value estimate, if it has one.

    Args:
        policy: ``model.policy`` of MaskablePPO / PPO (any actor-critic policy) or DQN.
        obs: Batched observation tensors.

    Returns:
        ``(logits (B, A), values (B, 1) or None)``; logits are not masked by the caller's mask yet.
    """
    scorer = scorer_of(policy)
    if scorer is not None:
        if hasattr(policy, "q_net"):
            return scorer.logits(obs), None
        logits, value = scorer(obs)
        return logits, value
    if hasattr(policy, "q_net"):  # DQN with SB3's default network
        return policy.q_net(obs), None
    features = policy.extract_features(obs)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        pi_f, vf_f = features
        latent_pi = policy.mlp_extractor.forward_actor(pi_f)
        latent_vf = policy.mlp_extractor.forward_critic(vf_f)
    return policy.action_net(latent_pi), policy.value_net(latent_vf)


def _batch(
    demos: Demonstrations, idx: np.ndarray, device: Any
) -> tuple[dict[str, th.Tensor], th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    obs = obs_to_tensors({k: v[idx] for k, v in demos.obs.items()}, device)
    return (
        obs,
        th.as_tensor(demos.actions[idx], device=device),
        th.as_tensor(demos.masks[idx], device=device),
        th.as_tensor(demos.returns[idx], dtype=th.float32, device=device),
        th.as_tensor(demos.value_weight[idx], dtype=th.float32, device=device),
    )


def agreement(
    policy: Any, demos: Demonstrations, indices: np.ndarray | None = None, batch_size: int = 512
) -> float:
    """Share of the states where the policy's greedy (masked argmax) action is the expert's."""
    idx_all = np.arange(len(demos)) if indices is None else np.asarray(indices)
    if len(idx_all) == 0:
        return float("nan")
    hits = 0
    was_training = policy.training
    policy.set_training_mode(False)
    with th.no_grad():
        for i in range(0, len(idx_all), batch_size):
            idx = idx_all[i : i + batch_size]
            obs, act, mask, _, _ = _batch(demos, idx, policy.device)
            logits, _ = policy_logits(policy, obs)
            logits = logits.masked_fill(~mask, MASKED_LOGIT)
            hits += int((logits.argmax(dim=1) == act).sum())
    policy.set_training_mode(was_training)
    return hits / len(idx_all)


def equivalent_agreement(
    policy: Any, env: gym.Env[Any, Any], demos: Demonstrations, *, tol: float = 1e-9
) -> dict[str, float]:
    """Exact agreement, and agreement up to CROP-equivalent choices, on expert-driven demonstrations.

    CROP keeps the better of two greedy passes (by ΔF and by ΔF per GPU), and ties between
    different jobs of equal gain are broken by its own order: an action can differ from CROP's and
    still lead to CROP's result. A state counts as *equivalent* when the policy's greedy action is
    CROP's, or when placing it and letting CROP finish from the resulting state reaches the F that
    CROP's own episode reaches (within ``tol``). States are reproduced by replaying each episode's
    expert actions from its reset seed.

    Args:
        policy: An SB3 policy.
        env: The environment the demonstrations were recorded on (candidate mode).
        demos: Expert-driven demonstrations (``value_weight == 1``; DAgger states are skipped).
        tol: Tolerance on F (GPUs).

    Returns:
        ``{"exact": share, "equivalent": share, "states": n}``.
    """
    from baselines.crop import crop_greedy

    u: Any = env.unwrapped
    exact = equiv = n = 0
    for e in range(demos.num_episodes):
        idx = np.flatnonzero((demos.episode == e) & (demos.value_weight > 0))
        if len(idx) == 0:
            continue
        env.reset(seed=int(demos.seeds[e]))
        choices = []
        for i in idx:  # the policy's choices and the states' snapshots, following the expert
            obs = {k: v[i] for k, v in demos.obs.items()}
            a = greedy_action(policy, obs, demos.masks[i])
            snap = None
            if a != int(demos.actions[i]):
                snap = (
                    u.state.copy(),
                    list(u.pending),
                    u.table.decode(a),
                    list(u.table.sets),
                    u.table.jobs,
                )
            choices.append((a, snap))
            env.step(int(demos.actions[i]))
        final_F = float(u.state.F)
        for _, snap in choices:
            n += 1
            if snap is None:
                exact += 1
                equiv += 1
                continue
            state, pending, decoded, sets, view = snap
            if decoded is None:  # stop (or invalid): CROP's continuation is not taken
                equiv += int(float(state.F) >= final_F - tol)
                continue
            q, c = decoded
            job = view[q]
            state.add(job, sets[q].gpus[c])
            rest = [j for j in pending if j.job_id != job.job_id]
            res = crop_greedy(
                state, rest, robust=u.robust_candidates, max_candidates=u.max_candidates
            )
            equiv += int(float(res.F) >= final_F - tol)
    return {"exact": exact / max(n, 1), "equivalent": equiv / max(n, 1), "states": n}


def behaviour_cloning(
    policy: Any,
    demos: Demonstrations,
    config: BCConfig,
    *,
    seed: int = 0,
    epochs: int | None = None,
    logger: Any = None,
    step_offset: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Train ``policy`` (in place) to imitate the demonstrations.

    The loss is the cross-entropy of the expert's action under the policy's masked logits (the
    environment's mask, which the scorer's own padding mask agrees with), plus ``vf_coef`` times
    the squared error of the value head against the scaled return-to-go on expert-driven states.
    A ``val_fraction`` of the episodes is held out to report agreement.

    Args:
        policy: An SB3 policy (``model.policy``).
        demos: The demonstrations.
        config: Options.
        seed: Seed of the minibatch order and the validation split.
        epochs: Override of ``config.epochs``.
        logger: An SB3 logger (TensorBoard) to record ``bc/*`` scalars.
        step_offset: Added to the logged step (for DAgger rounds).
        progress: Show a progress bar over epochs.

    Returns:
        History: per-epoch loss and the final train/validation agreement.
    """
    rng = np.random.default_rng([seed, 1])
    n_ep = demos.num_episodes
    n_val = round(config.val_fraction * n_ep) if n_ep >= 10 else 0
    val_eps = rng.choice(n_ep, size=n_val, replace=False) if n_val else np.zeros(0, np.int64)
    is_val = np.isin(demos.episode, val_eps)
    train_idx = np.flatnonzero(~is_val)
    val_idx = np.flatnonzero(is_val)
    opt = th.optim.Adam(
        policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    n_epochs = config.epochs if epochs is None else int(epochs)
    history: dict[str, Any] = {"loss": [], "ce": [], "value_loss": []}
    it: Any = range(n_epochs)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="behaviour cloning", unit="epoch", dynamic_ncols=True)
    policy.set_training_mode(True)
    for epoch in it:
        perm = rng.permutation(train_idx)
        tot = ce_tot = v_tot = 0.0
        nb = 0
        for i in range(0, len(perm), config.batch_size):
            idx = perm[i : i + config.batch_size]
            obs, act, mask, ret, vw = _batch(demos, idx, policy.device)
            logits, values = policy_logits(policy, obs)
            logits = logits.masked_fill(~mask, MASKED_LOGIT)
            ce = F.cross_entropy(logits, act)
            loss = ce
            vl = th.zeros(())
            if values is not None and config.vf_coef > 0 and float(vw.sum()) > 0:
                target = ret * config.reward_scale
                vl = (vw * (values.squeeze(-1) - target) ** 2).sum() / vw.sum().clamp_min(1.0)
                loss = loss + config.vf_coef * vl
            opt.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            opt.step()
            tot += float(loss.detach())
            ce_tot += float(ce.detach())
            v_tot += float(vl.detach())
            nb += 1
        nb = max(nb, 1)
        history["loss"].append(tot / nb)
        history["ce"].append(ce_tot / nb)
        history["value_loss"].append(v_tot / nb)
        if logger is not None:
            logger.record("bc/loss", tot / nb)
            logger.record("bc/cross_entropy", ce_tot / nb)
            logger.record("bc/value_loss", v_tot / nb)
            logger.dump(step_offset + epoch + 1)
        if progress:
            it.set_postfix(ce=f"{ce_tot / nb:.3f}")
    history["train_agreement"] = agreement(policy, demos, train_idx)
    history["val_agreement"] = agreement(policy, demos, val_idx) if len(val_idx) else None
    history["train_states"] = len(train_idx)
    history["val_states"] = len(val_idx)
    history["val_episodes"] = sorted(int(e) for e in val_eps)
    if logger is not None:
        logger.record("bc/train_agreement", history["train_agreement"])
        if history["val_agreement"] is not None:
            logger.record("bc/val_agreement", history["val_agreement"])
        logger.dump(step_offset + n_epochs)
    policy.set_training_mode(False)
    return history


def greedy_action(policy: Any, obs: dict[str, np.ndarray], mask: np.ndarray) -> int:
    """The policy's masked argmax action for one observation."""
    with th.no_grad():
        logits, _ = policy_logits(policy, obs_to_tensors(obs, policy.device))
        logits = logits.masked_fill(~th.as_tensor(mask[None], device=policy.device), MASKED_LOGIT)
        return int(logits.argmax(dim=1)[0])


def dagger(
    policy: Any,
    env: gym.Env[Any, Any],
    demos: Demonstrations,
    config: BCConfig,
    seed_fn: Callable[[int, int], int],
    *,
    seed: int = 0,
    logger: Any = None,
    progress: bool = False,
) -> tuple[Demonstrations, list[dict[str, Any]]]:
    """DAgger: roll out the policy, label its states with the teacher, aggregate, re-train.

    Round ``i`` (from 1) rolls out ``config.dagger_episodes`` episodes on seeds ``seed_fn(i, e)``;
    each step follows the expert with probability ``dagger_beta / 2**(i-1)``, else the policy's
    greedy action; every visited state is labelled with the expert's action (the teacher of
    ``config.teacher``, :func:`agents.teachers.teacher_of`).

    Args:
        policy: The (already cloned) SB3 policy, trained in place.
        env: A candidate-mode placement environment.
        demos: The demonstrations so far.
        config: Options (``dagger_*``).
        seed_fn: ``(round, episode) -> reset seed`` (training range).
        seed: Seed of the mixing draws and re-training.
        logger: SB3 logger for ``bc/*`` scalars.
        progress: Show progress bars.

    Returns:
        The aggregated demonstrations and each round's history.
    """
    rng = np.random.default_rng([seed, 2])
    rounds: list[dict[str, Any]] = []
    for i in range(1, config.dagger_iterations + 1):
        beta = config.dagger_beta / 2 ** (i - 1)
        policy.set_training_mode(False)

        def choose(obs: Any, mask: np.ndarray, a_exp: int, beta: float = beta) -> int:
            if rng.random() < beta:
                return a_exp
            return greedy_action(policy, obs, mask)

        seeds = [seed_fn(i, e) for e in range(config.dagger_episodes)]
        new = _rollouts(
            env,
            seeds,
            choose,
            gamma=config.gamma,
            expert_driven=False,
            progress=progress,
            desc=f"DAgger {i}",
            teacher=config.teacher,
        )
        demos = demos.extend(new)
        hist = behaviour_cloning(
            policy,
            demos,
            config,
            seed=seed + i,
            epochs=config.dagger_epochs,
            logger=logger,
            step_offset=config.epochs + (i - 1) * config.dagger_epochs,
            progress=progress,
        )
        hist["round"] = i
        hist["beta"] = beta
        hist["states"] = len(demos)
        rounds.append(hist)
    return demos, rounds
