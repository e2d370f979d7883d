"""The permutation-invariant candidate scorer (pure torch; no SB3 here).

:class:`CandidateScorer` maps a placement observation (the ``Dict`` built by
:class:`crop_gym.envs.ObservationBuilder`) to one logit per candidate row, a stop logit and a state
value. Its structure makes it independent of the cluster size ``G``, the view size ``Q`` and the
number of rows ``M``:

* a shared MLP embeds every GPU row and every queued-job row; the embeddings are pooled (masked mean
  and max), so the context does not depend on how many GPUs or jobs there are, nor on their order;
* the pooled context and the summary vector pass through a context MLP;
* a shared MLP embeds every candidate row together with the context (deep-sets style); a second
  shared MLP turns each row embedding, concatenated with the pooled embedding of all valid rows, into
  that row's logit. Permuting the candidate rows therefore permutes the logits the same way
  (permutation equivariance) and leaves the stop logit and the value unchanged (invariance);
* the stop logit and the value come from the context and the pooled row embeddings.

Every layer is shared across rows, so the parameter count does not depend on the environment.

Padding rows (``candidates[..., 0] == 0``) get the logit :data:`MASKED_LOGIT`, so the scorer masks
itself from its observation: the same module works under MaskablePPO (which also applies
``action_masks()``), plain PPO and DQN (masked Q-values).

By default the value head reads the actor's pooled features with gradients stopped
(``critic="detached"``), so value regression never disturbs the logits learnt by behaviour cloning
during PPO fine-tuning, and the critic costs no second pass over the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch as th
from torch import nn

__all__ = [
    "MASKED_LOGIT",
    "CandidateScorer",
    "ObsSpec",
    "ScorerConfig",
    "adapt_observation",
    "obs_to_tensors",
]

#: Logit given to invalid rows (finite, so that softmax and entropy stay NaN-free).
MASKED_LOGIT = -1e8


@dataclass(frozen=True)
class ObsSpec:
    """The column names of each table of a placement observation, and its job-size normaliser.

    Attributes:
        gpu_features: Columns of a ``"gpus"`` row (the environment may append extras).
        candidate_features: Columns of a ``"candidates"`` row.
        job_features: Columns of a ``"queue"`` row.
        summary_features: Entries of ``"summary"``.
        max_job_gpus: The normaliser of the ``job_gpus`` columns (``k / max_job_gpus``).
        context: Further 1-D keys read into the context, as ``(key, length)`` pairs (e.g. the
            online environment's ``("online", 6)``).
        slot_tables: Per-view-slot tables appended to the candidate rows of their slot, as
            ``(key, columns)`` pairs (``OnlinePlacement-v1``'s ``("slots", 2)``: the remaining
            work and the wait of the slot's job). Row ``q * C + c`` is candidate ``c`` of slot
            ``q``, so each slot row is repeated ``C`` times. Without them a row cannot tell its
            own job's remaining work from the others' (the context pools over slots).
    """

    gpu_features: tuple[str, ...]
    candidate_features: tuple[str, ...]
    job_features: tuple[str, ...]
    summary_features: tuple[str, ...]
    max_job_gpus: int
    context: tuple[tuple[str, int], ...] = ()
    slot_tables: tuple[tuple[str, int], ...] = ()

    @classmethod
    def default(cls, max_job_gpus: int = 32) -> ObsSpec:
        """The columns of crop_gym's :class:`~crop_gym.envs.ObservationBuilder` (no extras)."""
        from crop_gym.envs import observation as f

        return cls(
            tuple(f.GPU_FEATURES),
            tuple(f.CANDIDATE_FEATURES),
            tuple(f.JOB_FEATURES),
            tuple(f.SUMMARY_FEATURES),
            int(max_job_gpus),
        )

    @classmethod
    def from_env(cls, env: Any) -> ObsSpec:
        """The spec of a (possibly wrapped) crop_gym placement environment."""
        from crop_gym.envs import observation as f

        base = env.unwrapped
        feats = base.features
        known = {"gpus", "candidates", "queue", "summary", "gain"}
        context = tuple(
            (str(k), int(np.prod(sp.shape)))
            for k, sp in base.observation_space.spaces.items()
            if k not in known
        )
        slots = base.observation_space.spaces.get("slots")
        q = int(getattr(base, "queue_view", 0) or 0)
        slot_tables = (
            (("slots", int(np.prod(slots.shape)) // q),)
            if slots is not None and q > 0 and int(np.prod(slots.shape)) % q == 0
            else ()
        )
        return cls(
            tuple(feats.gpu_features),
            tuple(f.CANDIDATE_FEATURES),
            tuple(f.JOB_FEATURES),
            tuple(f.SUMMARY_FEATURES),
            int(feats.max_job_gpus),
            context,
            slot_tables,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        out["context"] = [[k, n] for k, n in self.context]
        out["slot_tables"] = [[k, n] for k, n in self.slot_tables]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObsSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            tuple(data["gpu_features"]),
            tuple(data["candidate_features"]),
            tuple(data["job_features"]),
            tuple(data["summary_features"]),
            int(data["max_job_gpus"]),
            tuple((str(k), int(n)) for k, n in data.get("context", ())),
            tuple((str(k), int(n)) for k, n in data.get("slot_tables", ())),
        )


@dataclass
class ScorerConfig:
    """Sizes and options of a :class:`CandidateScorer` (stored in checkpoints).

    Attributes:
        hidden: Width of the hidden layers.
        embed: Width of the GPU, job and context embeddings.
        spec: The observation columns the scorer reads (those of the environment it is trained
            on); observations of other environments are mapped onto them by
            :func:`adapt_observation`. ``None`` = crop_gym's current default columns.
        use_gain: Read the privileged ``"gain"`` key as an extra candidate input.
        critic: How the value head sees the observation: ``"detached"`` (default) reads the
            actor's pooled features with gradients stopped, so value regression never moves the
            logits (e.g. those learnt by behaviour cloning) and costs no second pass; ``"separate"``
            gives the critic its own encoders (twice the compute); ``"shared"`` backpropagates the
            value loss into the actor's encoders.
    """

    hidden: int = 64
    embed: int = 32
    spec: ObsSpec | None = None
    use_gain: bool = False
    critic: str = "detached"

    def __post_init__(self) -> None:
        if self.critic not in ("detached", "separate", "shared"):
            raise ValueError(f"critic={self.critic!r} must be 'detached', 'separate' or 'shared'")
        if isinstance(self.spec, Mapping):
            self.spec = ObsSpec.from_dict(self.spec)
        if self.spec is None:
            self.spec = ObsSpec.default()

    @property
    def obs_spec(self) -> ObsSpec:
        """The (resolved) observation spec."""
        assert self.spec is not None
        return self.spec

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "hidden": self.hidden,
            "embed": self.embed,
            "spec": self.obs_spec.to_dict(),
            "use_gain": self.use_gain,
            "critic": self.critic,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScorerConfig:
        """Build from :meth:`to_dict` output (unknown keys are refused)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown scorer options: {sorted(unknown)}")
        return cls(**dict(data))


def _mlp(sizes: Sequence[int], *, last_gain: float = 1.0) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(lin.weight, gain=last_gain if last else float(np.sqrt(2.0)))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _rows(x: th.Tensor, width: int) -> th.Tensor:
    """A table as ``(B, rows, width)``: flat ``(B, rows * width)`` input is reshaped (row-major)."""
    return x.reshape(x.shape[0], -1, width) if x.dim() == 2 else x


def _masked_pool(x: th.Tensor, mask: th.Tensor) -> th.Tensor:
    """Masked mean and max over rows: ``x (B, N, D)``, ``mask (B, N)`` → ``(B, 2 D)``.

    Rows with ``mask == 0`` are ignored; an all-masked batch entry pools to zeros.
    """
    m = mask.unsqueeze(-1)
    count = m.sum(dim=1).clamp_min(1.0)
    mean = (x * m).sum(dim=1) / count
    neg = th.finfo(x.dtype).min
    mx = th.where(m > 0, x, th.full_like(x, neg)).amax(dim=1)
    mx = th.where(mask.sum(dim=1, keepdim=True) > 0, mx, th.zeros_like(mx))
    return th.cat([mean, mx], dim=-1)


def _slot_columns(table: th.Tensor, width: int, rows: int) -> list[th.Tensor]:
    """A per-slot table ``(B, Q * width)`` as columns of the ``rows = Q * C`` candidate rows.

    Slot ``q``'s row goes to candidate rows ``q * C ... q * C + C - 1``. Its columns are times
    squashed as ``x = t / (t + 1 h)``; they are given as they are and as ``log(1 + t / 1 h) =
    -log(1 - x)``, which keeps long jobs apart (``x`` crowds near 1 beyond a few hours).
    """
    slots = _rows(table, width)
    per_row = slots.repeat_interleave(rows // slots.shape[1], dim=1)
    return [per_row, -th.log1p(-per_row.clamp(0.0, 1.0 - 1e-6))]


class _Trunk(nn.Module):
    """GPU/job encoders, context MLP and candidate encoder (one per actor, one per critic)."""

    def __init__(self, cfg: ScorerConfig) -> None:
        super().__init__()
        h, e = cfg.hidden, cfg.embed
        sp = cfg.obs_spec
        self.widths = (len(sp.gpu_features), len(sp.candidate_features), len(sp.job_features))
        cf = sp.candidate_features
        self.cols = (
            cf.index("valid"),
            cf.index("job_gpus"),
            cf.index("value_per_gpu"),
            cf.index("weight"),
            sp.job_features.index("present"),
        )
        self.use_gain = cfg.use_gain
        self.context_keys = tuple(k for k, _ in sp.context)
        self.slot_tables = sp.slot_tables
        self.gpu_enc = _mlp([self.widths[0], h, e])
        self.job_enc = _mlp([self.widths[2], h, e])
        self.ctx = _mlp([4 * e + len(sp.summary_features) + sum(n for _, n in sp.context), h, e])
        # + the k·η·s·w product, + each slot-table column twice (squashed and unsquashed)
        cand_in = self.widths[1] + 1 + int(cfg.use_gain) + 2 * sum(n for _, n in sp.slot_tables)
        self.cand_enc = _mlp([cand_in + e, h, h])

    def forward(
        self, obs: Mapping[str, th.Tensor]
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """Return ``(context (B, e), rows (B, M, h), pooled rows (B, 2h), valid (B, M))``."""
        wg, wc, wj = self.widths
        c_valid, c_k, c_vpg, c_w, j_present = self.cols
        gpus = _rows(obs["gpus"], wg)
        queue = _rows(obs["queue"], wj)
        cand = _rows(obs["candidates"], wc)
        summary = obs["summary"]
        g = self.gpu_enc(gpus)
        gpool = _masked_pool(g, th.ones(g.shape[:2], dtype=g.dtype, device=g.device))
        jpool = _masked_pool(self.job_enc(queue), queue[..., j_present])
        extra = [obs[k] for k in self.context_keys]
        ctx = self.ctx(th.cat([gpool, jpool, summary, *extra], dim=-1))
        valid = cand[..., c_valid]
        # Own value proxy k·η·s·w (in units of max_job_gpus; weight column is w/(1+w), 1/2 at w=1).
        dens = cand[..., c_vpg] * 2.0 * cand[..., c_w]
        prod = cand[..., c_k] * dens
        parts = [cand, prod.unsqueeze(-1)]
        if self.use_gain:
            parts.append(obs["gain"].reshape(cand.shape[0], -1, 1))
        for key, width in self.slot_tables:
            parts += _slot_columns(obs[key], width, cand.shape[1])
        parts.append(ctx.unsqueeze(1).expand(-1, cand.shape[1], -1))
        rows = self.cand_enc(th.cat(parts, dim=-1))
        pooled = _masked_pool(rows, valid)
        return ctx, rows, pooled, valid


class CandidateScorer(nn.Module):
    """Per-candidate logits, a stop logit and a value from a placement observation.

    Args:
        config: Sizes and options.

    Example:
        >>> import torch as th
        >>> net = CandidateScorer(ScorerConfig(hidden=16, embed=8))
        >>> sp = net.config.obs_spec
        >>> obs = {"gpus": th.rand(2, 64, len(sp.gpu_features)),
        ...        "candidates": th.rand(2, 128, len(sp.candidate_features)),
        ...        "queue": th.rand(2, 16, len(sp.job_features)),
        ...        "summary": th.rand(2, len(sp.summary_features))}
        >>> net.logits(obs).shape
        torch.Size([2, 129])
    """

    def __init__(self, config: ScorerConfig | None = None) -> None:
        super().__init__()
        cfg = config or ScorerConfig()
        self.config = cfg
        h, e = cfg.hidden, cfg.embed
        self.actor = _Trunk(cfg)
        # Row head: relu(W_r row + W_p pooled) -> logit (cheap: one h x h product per row).
        self.row_lin = nn.Linear(h, h)
        self.pool_lin = nn.Linear(2 * h, h, bias=False)
        self.row_out = nn.Linear(h, 1)
        for lin in (self.row_lin, self.pool_lin):
            nn.init.orthogonal_(lin.weight, gain=float(np.sqrt(2.0)))
        nn.init.zeros_(self.row_lin.bias)
        nn.init.orthogonal_(self.row_out.weight, gain=0.01)
        nn.init.zeros_(self.row_out.bias)
        self.stop_head = _mlp([e + 2 * h, h, 1], last_gain=0.01)
        self.critic = None if cfg.critic != "separate" else _Trunk(cfg)
        self.value_head = _mlp([e + 2 * h, h, 1], last_gain=1.0)

    def logits(self, obs: Mapping[str, th.Tensor]) -> th.Tensor:
        """Masked logits ``(B, M + 1)``: the rows' logits, then the stop logit."""
        ctx, rows, pooled, valid = self.actor(obs)
        return self._logits(ctx, rows, pooled, valid)

    def _logits(
        self, ctx: th.Tensor, rows: th.Tensor, pooled: th.Tensor, valid: th.Tensor
    ) -> th.Tensor:
        z = th.relu(self.row_lin(rows) + self.pool_lin(pooled).unsqueeze(1))
        row_logits = self.row_out(z).squeeze(-1)
        row_logits = th.where(valid > 0.5, row_logits, th.full_like(row_logits, MASKED_LOGIT))
        stop = self.stop_head(th.cat([ctx, pooled], dim=-1))
        return th.cat([row_logits, stop], dim=-1)

    def _value(self, ctx: th.Tensor, pooled: th.Tensor) -> th.Tensor:
        x = th.cat([ctx, pooled], dim=-1)
        return self.value_head(x.detach() if self.config.critic == "detached" else x)

    def value(self, obs: Mapping[str, th.Tensor]) -> th.Tensor:
        """State value ``(B, 1)``."""
        trunk = self.critic if self.critic is not None else self.actor
        ctx, _, pooled, _ = trunk(obs)
        return self._value(ctx, pooled)

    def forward(self, obs: Mapping[str, th.Tensor]) -> tuple[th.Tensor, th.Tensor]:
        """``(logits (B, M + 1), value (B, 1))`` in one pass."""
        ctx, rows, pooled, valid = self.actor(obs)
        logits = self._logits(ctx, rows, pooled, valid)
        value = self._value(ctx, pooled) if self.critic is None else self.value(obs)
        return logits, value


def adapt_observation(
    obs: Mapping[str, np.ndarray], env_spec: ObsSpec, scorer_spec: ObsSpec
) -> dict[str, np.ndarray]:
    """Map an observation of one environment onto the columns a scorer was trained with.

    Tables are reshaped to ``(rows, columns)`` (flat and 2-D layouts are both accepted), their
    columns selected and ordered by name (extra columns of the environment are dropped), and the
    job-size columns rescaled from the environment's normaliser to the scorer's (job sizes are
    observed as ``k / max_job_gpus``: 32 on the 64-GPU env, 64 on the 512-GPU env; values are
    clipped to 1). Other columns are scale-free or absolute, so a scorer trained on one cluster
    reads another one's observation correctly.

    Args:
        obs: An observation (batched or not) of an environment with columns ``env_spec``.
        env_spec: The environment's columns.
        scorer_spec: The scorer's columns.

    Returns:
        A new dict of 3-D (batched) or 2-D tables, the summary vector, the scorer's context keys
        and ``"gain"`` when present.

    Raises:
        ValueError: If the environment lacks a column the scorer reads.
    """
    batched = np.asarray(obs["summary"]).ndim == 2
    f = float(env_spec.max_job_gpus) / float(scorer_spec.max_job_gpus)
    out: dict[str, np.ndarray] = {}
    for key, have, want in (
        ("gpus", env_spec.gpu_features, scorer_spec.gpu_features),
        ("candidates", env_spec.candidate_features, scorer_spec.candidate_features),
        ("queue", env_spec.job_features, scorer_spec.job_features),
        ("summary", env_spec.summary_features, scorer_spec.summary_features),
    ):
        arr = np.asarray(obs[key], dtype=np.float32)
        if key != "summary":
            lead = arr.shape[:1] if batched else ()
            arr = arr.reshape(*lead, -1, len(have))
        missing = [c for c in want if c not in have]
        if missing:
            raise ValueError(
                f"observation key {key!r} lacks the columns {missing} the policy reads"
            )
        idx = [have.index(c) for c in want]
        sel = np.array(arr[..., idx], dtype=np.float32, copy=True)
        if "job_gpus" in want and f != 1.0:
            j = want.index("job_gpus")
            sel[..., j] = np.minimum(sel[..., j] * f, 1.0)
        out[key] = sel
    for key, n in scorer_spec.context:
        if key not in obs:
            raise ValueError(f"observation lacks the key {key!r} the policy reads")
        arr = np.asarray(obs[key], dtype=np.float32)
        if arr.shape[-1] != n:
            raise ValueError(
                f"observation key {key!r} has {arr.shape[-1]} entries, the policy reads {n}"
            )
        out[key] = np.array(arr, copy=True)
    for key, _n in scorer_spec.slot_tables:
        if key not in obs:
            raise ValueError(f"observation lacks the key {key!r} the policy reads")
        out[key] = np.array(obs[key], dtype=np.float32, copy=True)
    if "gain" in obs:
        out["gain"] = np.array(obs["gain"], dtype=np.float32, copy=True)
    return out


def obs_to_tensors(
    obs: Mapping[str, np.ndarray], device: th.device | str = "cpu"
) -> dict[str, th.Tensor]:
    """A batched dict of float tensors (a leading batch axis is added to unbatched input).

    Whether ``obs`` is batched is read from its ``"summary"`` vector (1-D unbatched).
    """
    out: dict[str, th.Tensor] = {}
    batched = np.asarray(obs["summary"]).ndim == 2
    for k, v in obs.items():
        t = th.as_tensor(np.asarray(v, dtype=np.float32), device=device)
        out[k] = t if batched else t.unsqueeze(0)
    return out
