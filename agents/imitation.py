"""Imitation of CROP: demonstrations, behaviour cloning on the policy's own logits, and DAgger.

* :func:`record_demonstrations` runs the teacher (:func:`crop_gym.agents.teachers.teacher_of`: by default
  :class:`crop_gym.baselines.expert.CropExpert`, CROP's action in the environment's candidate action space;
  on the online environments a :mod:`crop_gym.baselines.online` policy) on training-range seeds and stores every observation, the
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
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F
from numpy.typing import NDArray

from crop_gym.agents.demonstrations import Demonstrations, rollouts
from crop_gym.agents.networks import MASKED_LOGIT, obs_to_tensors
from crop_gym.agents.policies import scorer_of

#: How several demonstration sets share an epoch (:attr:`BCConfig.balance`).
BALANCE_MODES: tuple[str, ...] = ("states", "sets")
#: What the cross-entropy counts as the expert's choice (:attr:`BCConfig.ties`).
TIE_MODES: tuple[str, ...] = ("expert", "equal_gain")
#: The options a :attr:`BCConfig.per_id` block may set.
PER_ID_OPTIONS: tuple[str, ...] = ("teacher", "episodes", "dagger_episodes", "ties")

__all__ = [
    "BALANCE_MODES",
    "PER_ID_OPTIONS",
    "TIE_MODES",
    "BCConfig",
    "Demonstrations",
    "agreement",
    "behaviour_cloning",
    "dagger",
    "epoch_batches",
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
            expert :class:`crop_gym.baselines.expert.CropExpert`), ``"crop-rollout"`` (static: CROP with
            one step of lookahead) or, on online environments, any
            :data:`crop_gym.baselines.online.ONLINE_POLICIES` name (e.g. ``"sjf-crop"``).
        also_on: Further environment IDs of the run's kind whose demonstrations (as many
            episodes as the run's own, on the same seeds, with their default arguments) and
            DAgger rollouts are cloned together with the run's: one policy for several tasks
            (the candidate scorer does not depend on the cluster or queue size).
        balance: How several demonstration sets share an epoch. ``"states"``: each set's
            minibatches are visited once, so a set weighs in proportion to its states (a task
            with short episodes, e.g. the 8-GPU testbed's 4 jobs or the fragmented cluster's one
            or two placements, then weighs little). ``"sets"``: every set contributes as many
            minibatches per epoch as the largest one, smaller sets being visited again in fresh
            permutations (oversampled), so every task weighs the same.
        ties: What the cross-entropy counts as the expert's choice. ``"expert"``: its action
            alone. ``"equal_gain"``: every action placing the same job with the same ΔF
            (:attr:`Demonstrations.ties`, recorded on static environments), the loss being
            ``-log`` of their total probability: where many rows are mirror images of each other
            (a regular, healthy cluster: on ``Placement-1024-v0`` 89 % of CROP's states have more
            than one, 8 at the median), the expert's tie-break is not learned as if it were a
            preference.
        per_id: Options that replace the run-wide ones on one environment ID (the run's own or
            one of ``also_on``): ``teacher``, ``episodes`` (its demonstration episodes: the first
            of the run's seeds, at most as many as the run's), ``dagger_episodes`` and ``ties``
            (:attr:`ties` for that set's loss). A task
            whose episodes are long (``Placement-1024-v0``: 200 placements) gets fewer episodes
            so that it does not outweigh the others, and a teacher that runs there in time
            (``crop-rollout`` completes the episode once per tried row: minutes on 200 jobs).
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
    also_on: tuple[str, ...] = ()
    balance: str = "states"
    ties: str = "expert"
    per_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BCConfig:
        """Build from a config block (unknown keys are refused)."""
        data = dict(data or {})
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown bc options: {sorted(unknown)}")
        if "also_on" in data:
            data["also_on"] = tuple(data["also_on"] or ())
        if "per_id" in data and data["per_id"] is None:
            del data["per_id"]
        return cls(**data)

    def __post_init__(self) -> None:
        if self.balance not in BALANCE_MODES:
            raise ValueError(
                f"bc.balance={self.balance!r} must be one of {', '.join(map(repr, BALANCE_MODES))}"
            )
        if self.ties not in TIE_MODES:
            raise ValueError(
                f"bc.ties={self.ties!r} must be one of {', '.join(map(repr, TIE_MODES))}"
            )
        if not isinstance(self.per_id, dict):
            raise ValueError("bc.per_id must map environment IDs to option blocks")
        for env_id, opts in self.per_id.items():
            where = f"bc.per_id[{env_id!r}]"
            if not isinstance(opts, dict):
                raise ValueError(f"{where} must be a block of options, not {opts!r}")
            unknown = set(opts) - set(PER_ID_OPTIONS)
            if unknown:
                raise ValueError(
                    f"{where}: unknown options {sorted(unknown)} (allowed: {', '.join(PER_ID_OPTIONS)})"
                )
            if "ties" in opts and opts["ties"] not in TIE_MODES:
                raise ValueError(
                    f"{where}.ties={opts['ties']!r} must be one of {', '.join(map(repr, TIE_MODES))}"
                )
            if "teacher" in opts and not isinstance(opts["teacher"], str):
                raise ValueError(f"{where}.teacher={opts['teacher']!r} must be a teacher's name")
            for key, low in (("episodes", 1), ("dagger_episodes", 0)):
                v = opts.get(key, low)
                if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= 100_000:
                    raise ValueError(f"{where}.{key}={v!r} must be an integer in [{low}, 100000]")

    def teacher_for(self, env_id: str) -> str:
        """The teacher of ``env_id``: its ``per_id`` teacher, else :attr:`teacher`."""
        return str(self.per_id.get(env_id, {}).get("teacher", self.teacher))

    def episodes_for(self, env_id: str, episodes: int) -> int:
        """How many of the run's ``episodes`` demonstration episodes ``env_id`` records."""
        return min(episodes, int(self.per_id.get(env_id, {}).get("episodes", episodes)))

    def ties_for(self, env_id: str) -> str:
        """What the loss counts as the expert's choice on ``env_id``'s set: its ``per_id`` ties,
        else :attr:`ties`."""
        return str(self.per_id.get(env_id, {}).get("ties", self.ties))

    def dagger_episodes_for(self, env_id: str) -> int:
        """Episodes rolled out on ``env_id`` in each DAgger round."""
        return int(self.per_id.get(env_id, {}).get("dagger_episodes", self.dagger_episodes))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


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
        expert_rule: CROP's ranking rule (:class:`crop_gym.baselines.expert.CropExpert`): ``"best"`` (the
            default CROP: better of the ΔF and ΔF-per-GPU passes) or a single pass (``"gain"``,
            ``"density"``), whose next action is a function of the current state alone.
        teacher: The teacher (:func:`teacher_of`): ``"crop"``, or an online policy's name.
    """
    return rollouts(
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
    from crop_gym.baselines.crop import crop_greedy

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


def epoch_batches(
    train: Sequence[NDArray[np.int64]],
    batch_size: int,
    balance: str,
    rng: np.random.Generator,
) -> list[tuple[int, NDArray[np.int64]]]:
    """One epoch's minibatches over several demonstration sets, as ``(set, state indices)``.

    Each set's training states are permuted and cut into minibatches of ``batch_size`` (the last
    one shorter). With ``balance="states"`` that is all; with ``"sets"`` a set with fewer
    minibatches than the largest set is permuted again (a fresh permutation each pass) until it
    has as many, the last pass cut short, so every set is seen in the same number of minibatches.
    With several sets the minibatches are then shuffled together.

    Args:
        train: The training state indices of each set.
        batch_size: States per minibatch (>= 1).
        balance: ``"states"`` or ``"sets"`` (:data:`BALANCE_MODES`).
        rng: The generator of the permutations.

    Returns:
        The minibatches, in the order to visit them.
    """
    per_set: list[list[NDArray[np.int64]]] = []
    for idx in train:
        perm = rng.permutation(idx)
        per_set.append([perm[i : i + batch_size] for i in range(0, len(perm), batch_size)])
    if balance == "sets":
        most = max((len(b) for b in per_set), default=0)
        for g, idx in enumerate(train):
            while 0 < len(per_set[g]) < most:
                perm = rng.permutation(idx)
                more = [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
                per_set[g] += more[: most - len(per_set[g])]
    batches = [(g, b) for g, bs in enumerate(per_set) for b in bs]
    if len(train) > 1:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _split(
    demos: Demonstrations, val_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train state indices, validation state indices, validation episodes)`` of one set: a
    ``val_fraction`` of its episodes (none when it has fewer than 10) is held out."""
    n_ep = demos.num_episodes
    n_val = round(val_fraction * n_ep) if n_ep >= 10 else 0
    val_eps = rng.choice(n_ep, size=n_val, replace=False) if n_val else np.zeros(0, np.int64)
    is_val = np.isin(demos.episode, val_eps)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val), val_eps


def _pooled(per_set: list[dict[str, Any]], part: str) -> float:
    """The agreement over the states of all sets (each set's agreement weighted by its states)."""
    if len(per_set) == 1:
        return float(per_set[0][f"{part}_agreement"])
    n = sum(r[f"{part}_states"] for r in per_set)
    if n == 0:
        return float("nan")
    return (
        sum(r[f"{part}_agreement"] * r[f"{part}_states"] for r in per_set if r[f"{part}_states"])
        / n
    )


def behaviour_cloning(
    policy: Any,
    demos: Demonstrations | Sequence[Demonstrations],
    config: BCConfig,
    *,
    seed: int = 0,
    epochs: int | None = None,
    logger: Any = None,
    step_offset: int = 0,
    progress: bool = False,
    env_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Train ``policy`` (in place) to imitate the demonstrations.

    The loss is the cross-entropy of the expert's action under the policy's masked logits (the
    environment's mask, which the scorer's own padding mask agrees with; with ``config.ties ==
    "equal_gain"``, ``-log`` of the total probability of the expert's equal-gain actions), plus ``vf_coef`` times
    the squared error of the value head against the scaled return-to-go on expert-driven states.
    A ``val_fraction`` of the episodes is held out to report agreement.

    Several sets (one per environment, e.g. a run's own and those of ``bc.also_on``) are cloned
    together: each minibatch is drawn from one set (their observation layouts may differ; the
    candidate scorer does not depend on them), and an epoch visits every set's minibatches in a
    shuffled order, so each set weighs in proportion to its states (``config.balance ==
    "states"``) or, with ``"sets"``, each set is drawn as many minibatches as the largest set has
    (:func:`epoch_batches`).

    Args:
        policy: An SB3 policy (``model.policy``).
        demos: The demonstrations: one set, or a list of sets.
        config: Options.
        seed: Seed of the minibatch order and the validation split.
        epochs: Override of ``config.epochs``.
        logger: An SB3 logger (TensorBoard) to record ``bc/*`` scalars.
        step_offset: Added to the logged step (for DAgger rounds).
        progress: Show a progress bar over epochs.
        env_ids: The sets' environment IDs (the keys of ``config.per_id``: each set's loss is
            that of :meth:`BCConfig.ties_for` its ID); ``None``: :attr:`BCConfig.ties` for all.

    Returns:
        History: per-epoch loss and the final train/validation agreement (over all sets;
        ``val_episodes`` are those of the first set, ``per_set`` the agreement of each set).
    """
    rng = np.random.default_rng([seed, 1])
    sets = [demos] if isinstance(demos, Demonstrations) else list(demos)
    splits = [_split(d, config.val_fraction, rng) for d in sets]
    ids = list(env_ids) if env_ids is not None else [""] * len(sets)
    if len(ids) != len(sets):
        raise ValueError(f"behaviour_cloning: {len(ids)} environment IDs for {len(sets)} sets")
    tie_modes = [config.ties_for(i) for i in ids]
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
        batches = epoch_batches(
            [train_idx for train_idx, _, _ in splits], config.batch_size, config.balance, rng
        )
        tot = ce_tot = v_tot = 0.0
        nb = 0
        for g, idx in batches:
            obs, act, mask, ret, vw = _batch(sets[g], idx, policy.device)
            logits, values = policy_logits(policy, obs)
            logits = logits.masked_fill(~mask, MASKED_LOGIT)
            if tie_modes[g] == "equal_gain":
                # -log of the probability of the expert's equal-gain actions (its own included).
                tie = th.as_tensor(sets[g].targets[idx], device=policy.device) & mask
                ce = (
                    th.logsumexp(logits, dim=1)
                    - th.logsumexp(logits.masked_fill(~tie, MASKED_LOGIT), dim=1)
                ).mean()
            else:
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
    per_set = [
        {
            "train_agreement": agreement(policy, d, tr),
            "val_agreement": agreement(policy, d, va) if len(va) else None,
            "train_states": len(tr),
            "val_states": len(va),
        }
        for d, (tr, va, _) in zip(sets, splits, strict=True)
    ]
    history["train_states"] = sum(r["train_states"] for r in per_set)
    history["val_states"] = sum(r["val_states"] for r in per_set)
    history["train_agreement"] = _pooled(per_set, "train")
    history["val_agreement"] = _pooled(per_set, "val") if history["val_states"] else None
    history["val_episodes"] = sorted(int(e) for e in splits[0][2])
    if len(sets) > 1:
        history["per_set"] = per_set
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
    env: gym.Env[Any, Any] | Sequence[gym.Env[Any, Any]],
    demos: Demonstrations | Sequence[Demonstrations],
    config: BCConfig,
    seed_fn: Callable[[int, int], int],
    *,
    seed: int = 0,
    env_ids: Sequence[str] | None = None,
    logger: Any = None,
    progress: bool = False,
) -> tuple[Any, list[dict[str, Any]]]:
    """DAgger: roll out the policy, label its states with the teacher, aggregate, re-train.

    Round ``i`` (from 1) rolls out ``config.dagger_episodes`` episodes on seeds ``seed_fn(i, e)``
    (in every environment, when several are given);
    each step follows the expert with probability ``dagger_beta / 2**(i-1)``, else the policy's
    greedy action; every visited state is labelled with the expert's action (the teacher of
    ``config.teacher``, :func:`crop_gym.agents.teachers.teacher_of`); with ``env_ids`` (one per
    environment), each environment's ``per_id`` teacher and ``dagger_episodes``
    (:meth:`BCConfig.teacher_for`, :meth:`BCConfig.dagger_episodes_for`).

    Args:
        policy: The (already cloned) SB3 policy, trained in place.
        env: A candidate-mode placement environment, or a list of them.
        demos: The demonstrations so far: one set, or one set per environment of ``env``.
        config: Options (``dagger_*``).
        seed_fn: ``(round, episode) -> reset seed`` (training range).
        seed: Seed of the mixing draws and re-training.
        env_ids: The environments' IDs (the keys of ``config.per_id``); ``None``: run-wide
            options everywhere.
        logger: SB3 logger for ``bc/*`` scalars.
        progress: Show progress bars.

    Returns:
        The aggregated demonstrations (a set, or a list of sets as given) and each round's
        history.
    """
    single = isinstance(demos, Demonstrations)
    envs = [env] if isinstance(env, gym.Env) else list(env)
    sets = [demos] if single else list(demos)
    if len(envs) != len(sets):
        raise ValueError(f"dagger: {len(envs)} environments for {len(sets)} demonstration sets")
    ids = list(env_ids) if env_ids is not None else [""] * len(envs)
    if len(ids) != len(envs):
        raise ValueError(f"dagger: {len(ids)} environment IDs for {len(envs)} environments")
    rng = np.random.default_rng([seed, 2])
    rounds: list[dict[str, Any]] = []
    for i in range(1, config.dagger_iterations + 1):
        beta = config.dagger_beta / 2 ** (i - 1)
        policy.set_training_mode(False)

        def choose(obs: Any, mask: np.ndarray, a_exp: int, beta: float = beta) -> int:
            if rng.random() < beta:
                return a_exp
            return greedy_action(policy, obs, mask)

        for g, e in enumerate(envs):
            seeds = [seed_fn(i, k) for k in range(config.dagger_episodes_for(ids[g]))]
            if not seeds:
                continue
            new = rollouts(
                e,
                seeds,
                choose,
                gamma=config.gamma,
                expert_driven=False,
                progress=progress,
                desc=f"DAgger {i}" + (f" ({g + 1}/{len(envs)})" if len(envs) > 1 else ""),
                teacher=config.teacher_for(ids[g]),
            )
            sets[g] = sets[g].extend(new)
        hist = behaviour_cloning(
            policy,
            sets,
            config,
            seed=seed + i,
            epochs=config.dagger_epochs,
            logger=logger,
            step_offset=config.epochs + (i - 1) * config.dagger_epochs,
            progress=progress,
            env_ids=env_ids,
        )
        hist["round"] = i
        hist["beta"] = beta
        hist["states"] = sum(len(d) for d in sets)
        rounds.append(hist)
    return (sets[0] if single else sets), rounds
