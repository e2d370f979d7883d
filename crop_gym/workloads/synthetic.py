"""Seeded synthetic workloads whose defaults follow the ElasticFlow traces.

:func:`generate_synthetic` draws ``num_jobs`` jobs from a :class:`SyntheticConfig` with a caller-owned
:class:`numpy.random.Generator` (never numpy's global RNG), so a seed fixes the workload.

* Arrivals: a Poisson process of rate ``arrival_rate`` jobs/s (exponential gaps), shifted so that the
  first job arrives at 0; ``arrival_rate=math.inf`` puts every job at 0 (a static batch).
* GPUs per job: drawn from ``gpu_counts`` with probabilities ``gpu_probs``; the default is the
  empirical distribution of all 69,351 jobs of the ten ElasticFlow clusters. ``max_gpus`` drops larger
  sizes and renormalises.
* Model: drawn from ``model_mix`` (name, weight); default the ElasticFlow model shares.
* Global batch: uniform over the model's entry in ``batch_choices`` (ElasticFlow uses a fixed set of
  batches per model), else over ``default_batch_sizes``.
* Work: a nominal duration ``D`` is drawn log-normally (median ``duration_median_s``, log-std
  ``duration_sigma``; defaults fitted to the ElasticFlow durations) and clipped to
  ``[min_duration_s, max_duration_s]``; iterations = ``max(1, round(D / t_c))`` where ``t_c`` is the
  job's per-GPU compute time on the reference GPU (:attr:`Job.compute_time`). ``D`` is therefore the
  compute-only run time on ``k`` reference GPUs; it is stored as the workload's duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crop_gym.errors import ConfigError, check_range
from crop_gym.model.jobs import MODEL_ZOO, get_model
from crop_gym.workloads.workload import Workload, build_workload

__all__ = [
    "ELASTICFLOW_BATCH_CHOICES",
    "ELASTICFLOW_GPU_COUNTS",
    "ELASTICFLOW_GPU_PROBS",
    "ELASTICFLOW_MODEL_MIX",
    "SyntheticConfig",
    "generate_synthetic",
]

#: GPU counts of ElasticFlow jobs.
ELASTICFLOW_GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Their empirical frequencies over the ten ElasticFlow clusters (69,351 jobs).
ELASTICFLOW_GPU_PROBS: tuple[float, ...] = (
    57_682 / 69_351,
    1_483 / 69_351,
    2_371 / 69_351,
    7_009 / 69_351,
    381 / 69_351,
    354 / 69_351,
    71 / 69_351,
)
#: Model shares of the ElasticFlow clusters.
ELASTICFLOW_MODEL_MIX: tuple[tuple[str, float], ...] = (
    ("bert", 0.1442),
    ("deepspeech2", 0.1432),
    ("gpt2", 0.1385),
    ("inception3", 0.1436),
    ("resnet50", 0.2163),
    ("vgg16", 0.2141),
)
#: Global batches each ElasticFlow model is traced with (roughly uniform within each set).
ELASTICFLOW_BATCH_CHOICES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("bert", (64, 128)),
    ("deepspeech2", (32, 64)),
    ("gpt2", (128, 256)),
    ("inception3", (64, 128)),
    ("resnet50", (64, 128, 256)),
    ("vgg16", (64, 128, 256)),
)


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the synthetic workload generator (all defaults follow ElasticFlow).

    Attributes:
        num_jobs: Jobs to draw (>= 1).
        arrival_rate: Poisson arrival rate in jobs per second (> 0); ``math.inf`` = all at 0.
        gpu_counts: GPU counts to draw from.
        gpu_probs: Their probabilities (normalised; same length as ``gpu_counts``).
        max_gpus: Drop GPU counts above this (then renormalise), or ``None``.
        model_mix: ``(model, weight)`` pairs; weights are normalised.
        batch_choices: ``(model, batches)`` pairs; a model's batch is uniform over its set.
        default_batch_sizes: Batches for models not in ``batch_choices``.
        duration_median_s: Median nominal duration, seconds.
        duration_sigma: Log-normal sigma of the duration (0 = every job the median).
        min_duration_s: Shortest duration, seconds.
        max_duration_s: Longest duration, seconds.
        name: Workload name.
    """

    num_jobs: int = 100
    arrival_rate: float = 10.0 / 3600.0
    gpu_counts: tuple[int, ...] = ELASTICFLOW_GPU_COUNTS
    gpu_probs: tuple[float, ...] = ELASTICFLOW_GPU_PROBS
    max_gpus: int | None = None
    model_mix: tuple[tuple[str, float], ...] = ELASTICFLOW_MODEL_MIX
    batch_choices: tuple[tuple[str, tuple[int, ...]], ...] = ELASTICFLOW_BATCH_CHOICES
    default_batch_sizes: tuple[int, ...] = (32, 64, 128, 256)
    duration_median_s: float = 8_260.0
    duration_sigma: float = 1.21
    min_duration_s: float = 600.0
    max_duration_s: float = 1_600_000.0
    name: str = "synthetic"

    def __post_init__(self) -> None:
        if int(self.num_jobs) != self.num_jobs or self.num_jobs < 1:
            raise ConfigError(f"SyntheticConfig.num_jobs={self.num_jobs!r} must be an integer >= 1")
        check_range("SyntheticConfig.arrival_rate", self.arrival_rate, 0, low_inclusive=False)
        if len(self.gpu_counts) != len(self.gpu_probs) or not self.gpu_counts:
            raise ConfigError(
                "SyntheticConfig.gpu_counts and gpu_probs must be non-empty, same length"
            )
        for k in self.gpu_counts:
            if int(k) != k or k < 1:
                raise ConfigError(f"SyntheticConfig.gpu_counts: {k!r} is not an integer >= 1")
        for p in self.gpu_probs:
            check_range("SyntheticConfig.gpu_probs[i]", p, 0)
        if self.max_gpus is not None:
            check_range("SyntheticConfig.max_gpus", self.max_gpus, 1)
        if sum(p for k, p in zip(self.gpu_counts, self.gpu_probs) if self._fits(k)) <= 0:
            raise ConfigError(
                "SyntheticConfig: no GPU count with positive probability fits max_gpus"
            )
        if not self.model_mix:
            raise ConfigError("SyntheticConfig.model_mix is empty")
        for model, w in self.model_mix:
            get_model(model)
            check_range(f"SyntheticConfig.model_mix[{model}]", w, 0)
        if sum(w for _, w in self.model_mix) <= 0:
            raise ConfigError("SyntheticConfig.model_mix weights sum to 0")
        for model, batches in self.batch_choices:
            if not batches:
                raise ConfigError(f"SyntheticConfig.batch_choices[{model}] is empty")
            for b in (*batches, *self.default_batch_sizes):
                if int(b) != b or b < 1:
                    raise ConfigError(f"SyntheticConfig: batch {b!r} is not an integer >= 1")
        if not self.default_batch_sizes:
            raise ConfigError("SyntheticConfig.default_batch_sizes is empty")
        check_range(
            "SyntheticConfig.duration_median_s", self.duration_median_s, 0, low_inclusive=False
        )
        check_range("SyntheticConfig.duration_sigma", self.duration_sigma, 0)
        check_range("SyntheticConfig.min_duration_s", self.min_duration_s, 0, low_inclusive=False)
        check_range("SyntheticConfig.max_duration_s", self.max_duration_s, self.min_duration_s)

    def _fits(self, k: int) -> bool:
        return self.max_gpus is None or k <= self.max_gpus


def generate_synthetic(config: SyntheticConfig, rng: np.random.Generator) -> Workload:
    """Draw a synthetic workload.

    Args:
        config: Generator parameters.
        rng: The random generator to draw from (e.g. ``np.random.default_rng(seed)``).

    Returns:
        The workload, jobs ``"syn-0"``, ``"syn-1"``, ... in arrival order, first arrival at 0, with
        nominal durations.

    Raises:
        ConfigError: If ``rng`` is not a :class:`numpy.random.Generator`.
    """
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(
            f"generate_synthetic needs a numpy.random.Generator, got {type(rng).__name__} "
            "(use np.random.default_rng(seed))"
        )
    n = int(config.num_jobs)

    if math.isinf(config.arrival_rate):
        arrival = np.zeros(n)
    else:
        gaps = rng.exponential(1.0 / config.arrival_rate, size=n)
        gaps[0] = 0.0
        arrival = np.cumsum(gaps)

    counts = np.array([k for k in config.gpu_counts if config._fits(k)], dtype=np.float64)
    probs = np.array(
        [p for k, p in zip(config.gpu_counts, config.gpu_probs) if config._fits(k)],
        dtype=np.float64,
    )
    gpus = rng.choice(counts, size=n, p=probs / probs.sum())

    names = [m for m, _ in config.model_mix]
    weights = np.array([w for _, w in config.model_mix], dtype=np.float64)
    model_idx = rng.choice(len(names), size=n, p=weights / weights.sum())

    batch_sets = dict(config.batch_choices)
    batch = np.empty(n, dtype=np.float64)
    t0 = np.empty(n, dtype=np.float64)
    per_sample = np.empty(n, dtype=np.float64)
    for m, model in enumerate(names):
        sel = model_idx == m
        count = int(sel.sum())
        if not count:
            continue
        choices = np.array(batch_sets.get(model, config.default_batch_sizes), dtype=np.float64)
        batch[sel] = choices[rng.integers(0, len(choices), size=count)]
        spec = MODEL_ZOO[model]
        t0[sel] = spec.t0
        per_sample[sel] = spec.per_sample

    duration = config.duration_median_s * np.exp(config.duration_sigma * rng.standard_normal(n))
    duration = np.clip(duration, config.min_duration_s, config.max_duration_s)
    iter_time = t0 + per_sample * (batch / gpus)
    iterations = np.maximum(1.0, np.round(duration / iter_time))

    return build_workload(
        name=config.name,
        source=f"synthetic({config.num_jobs} jobs)",
        format="synthetic",
        job_ids=[f"syn-{i}" for i in range(n)],
        models=[names[i] for i in model_idx.tolist()],
        num_gpus=gpus,
        batch_size=batch,
        iterations=iterations,
        arrival=arrival,
        duration=duration,
    )
