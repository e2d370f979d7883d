"""Training jobs and the model zoo.

A job is synchronous data-parallel training: one worker per GPU, gang-placed, gradients all-reduced
every iteration. The model zoo gives, per model, the gradient size ``M`` (fp32, 4 bytes per parameter)
and the per-GPU compute time of one iteration on the reference GPU (an A100) as an affine function of
the local batch: ``t_c(b) = t0 + per_sample * b``.

The coefficients of measured models come from the calibration against the ElasticFlow A100
throughput profiles (``crop-gym calibrate``), shipped in ``crop_gym/data/calibration.json``. Models
without a measured profile are scaled from a calibrated base model by published multiply-accumulates
per sample (see docs/MODEL.md); their ``source`` says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

from crop_gym.errors import ConfigError, check_range

__all__ = [
    "MODEL_ZOO",
    "PARAMETER_SOURCES",
    "Job",
    "ModelSpec",
    "calibration_data",
    "get_model",
    "register_model",
    "scaling_base",
]

BYTES_PER_PARAM = 4.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of the zoo.

    Attributes:
        name: Model name as used by traces (e.g. ``"resnet50"``).
        params: Number of trainable parameters.
        gmacs: Forward multiply-accumulates per sample, in 1e9 (used to scale unmeasured models).
        t0: Fixed per-iteration compute time on the reference GPU, in seconds.
        per_sample: Compute time per local sample on the reference GPU, in seconds.
        source: Where ``t0`` and ``per_sample`` come from.
    """

    name: str
    params: float
    gmacs: float
    t0: float
    per_sample: float
    source: str = "calibrated"

    def __post_init__(self) -> None:
        check_range(f"ModelSpec({self.name}).params", self.params, 0, low_inclusive=False)
        check_range(f"ModelSpec({self.name}).t0", self.t0, 0)
        check_range(f"ModelSpec({self.name}).per_sample", self.per_sample, 0)

    @property
    def grad_bytes(self) -> float:
        """Gradient size ``M`` in bytes (fp32)."""
        return self.params * BYTES_PER_PARAM

    def compute_time(self, local_batch: float) -> float:
        """Per-GPU compute time of one iteration on the reference GPU, in seconds."""
        return self.t0 + self.per_sample * local_batch


# name: (parameters, forward GMACs per sample at the usual input size, base model or None).
# Every gradient is all-reduced densely in fp32 (4 bytes per parameter; nn.Embedding's default is
# a dense gradient, so ncf's embeddings are too). Sources per model in PARAMETER_SOURCES.
_FACTS: dict[str, tuple[float, float, str | None]] = {
    "resnet50": (25.56e6, 4.09, None),
    "vgg16": (138.36e6, 15.47, None),
    "inception3": (27.16e6, 5.71, None),
    "bert": (110.0e6, 11.2, None),
    "gpt2": (124.44e6, 12.6, None),
    "deepspeech2": (38.0e6, 9.0, None),
    "resnet50_cifar10": (23.52e6, 1.30, None),
    # Without a measured profile: scaled from a calibrated base by GMACs per sample.
    "resnet18": (11.17e6, 0.56, "resnet50_cifar10"),
    "ncf": (1.602657e6, 0.000043, "resnet50_cifar10"),
    "yolov3": (61.626049e6, 32.9, "resnet50"),
    "alexnet": (61.1e6, 0.71, "resnet50"),
    "resnet101": (44.55e6, 7.80, "resnet50"),
    "mobilenet_v2": (3.50e6, 0.30, "resnet50"),
}
#: Where each parameter count comes from (docs/MODEL.md §4 has the table).
PARAMETER_SOURCES: dict[str, str] = {
    "resnet50": "torchvision resnet50 (25,557,032); the Pollux/AdaptDL imagenet benchmark trains it",
    "vgg16": "torchvision vgg16 (138,357,544)",
    "inception3": "torchvision inception_v3 with its auxiliary head (27,161,264)",
    "bert": "HuggingFace bert-base-uncased (109,482,240 with the pooler, about 110 M); the "
    "AdaptDL bert benchmark fine-tunes it on SQuAD (+1,538 for the span head)",
    "gpt2": "HuggingFace gpt2 (124,439,808)",
    "deepspeech2": "ElasticFlow's DeepSpeech2 (35-40 M by configuration; 38 M kept, as fitted); "
    "the AdaptDL benchmark's (5 bidirectional GRU layers of 800, 29 labels) has 41,187,968",
    "resnet50_cifar10": "ResNet-50 with a 3x3 stem for 32x32 inputs (23,520,842)",
    "resnet18": "ResNet-18 for CIFAR-10 (kuangliu/pytorch-cifar, the AdaptDL cifar10 benchmark: "
    "11,173,962)",
    "ncf": "NeuMF-end of the AdaptDL ncf benchmark on MovieLens-1M (6,040 users, 3,706 items, 32 "
    "factors, 3 MLP layers): 1,247,488 + 311,872 embedding + 43,297 dense = 1,602,657",
    "yolov3": "YOLOv3 (Darknet-53) for PASCAL VOC's 20 classes, the AdaptDL yolov3 benchmark: "
    "61,626,049 (61,949,149 with COCO's 80)",
    "alexnet": "torchvision alexnet (61,100,840)",
    "resnet101": "torchvision resnet101 (44,549,160)",
    "mobilenet_v2": "torchvision mobilenet_v2 (3,504,872)",
}


def scaling_base(name: str) -> str | None:
    """The calibrated model that ``name``'s compute is scaled from (``None`` if fitted itself or
    not a zoo fact)."""
    facts = _FACTS.get(name)
    return None if facts is None else facts[2]


@cache
def calibration_data() -> dict[str, Any]:
    """The shipped calibration (``crop_gym/data/calibration.json``), parsed once."""
    text = resources.files("crop_gym").joinpath("data/calibration.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _build_zoo() -> dict[str, ModelSpec]:
    fitted = calibration_data()["models"]
    zoo: dict[str, ModelSpec] = {}
    for name, (params, gmacs, base) in _FACTS.items():
        if base is None:
            coef = fitted[name]
            zoo[name] = ModelSpec(name, params, gmacs, float(coef["t0"]), float(coef["per_sample"]))
        else:
            b = zoo[base]
            zoo[name] = ModelSpec(
                name,
                params,
                gmacs,
                b.t0,
                b.per_sample * gmacs / b.gmacs,
                source=f"scaled from {base} by GMACs per sample ({gmacs:g} / {b.gmacs:g})",
            )
    return zoo


MODEL_ZOO: dict[str, ModelSpec] = _build_zoo()


def register_model(spec: ModelSpec, *, overwrite: bool = False) -> None:
    """Add a model to the zoo (e.g. to map a trace's unknown model to measured numbers).

    Raises:
        ConfigError: If the name exists and ``overwrite`` is false.
    """
    if spec.name in MODEL_ZOO and not overwrite:
        raise ConfigError(f"model {spec.name!r} is already in the zoo (pass overwrite=True)")
    MODEL_ZOO[spec.name] = spec


def get_model(name: str) -> ModelSpec:
    """Look up a model by name.

    Raises:
        ConfigError: If the model is unknown; the message lists the known models.
    """
    try:
        return MODEL_ZOO[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_ZOO))
        raise ConfigError(f"unknown model {name!r}; known models: {known}") from None


@dataclass(frozen=True, slots=True)
class Job:
    """A data-parallel training job.

    Attributes:
        job_id: Identifier, unique within a workload.
        model: Model name, a key of :data:`MODEL_ZOO`.
        num_gpus: GPUs requested ``k`` (one worker per GPU, all or nothing).
        batch_size: Global batch per iteration (local batch = ``batch_size / num_gpus``).
        iterations: Work: iterations to train.
        arrival: Submission time in seconds (0 for static scenarios).
        weight: Weight ``w`` in the objective.
        deadline: Optional absolute deadline in seconds (informational).
    """

    job_id: str
    model: str
    num_gpus: int
    batch_size: int
    iterations: float = 1.0
    arrival: float = 0.0
    weight: float = 1.0
    deadline: float | None = field(default=None)

    def __post_init__(self) -> None:
        get_model(self.model)
        if int(self.num_gpus) != self.num_gpus or self.num_gpus < 1:
            raise ConfigError(
                f"Job {self.job_id}: num_gpus={self.num_gpus!r} must be an integer >= 1"
            )
        check_range(f"Job {self.job_id}: batch_size", self.batch_size, 0, low_inclusive=False)
        check_range(f"Job {self.job_id}: iterations", self.iterations, 0, low_inclusive=False)
        check_range(f"Job {self.job_id}: arrival", self.arrival, 0)
        check_range(f"Job {self.job_id}: weight", self.weight, 0, low_inclusive=False)
        if not math.isfinite(self.arrival):
            raise ConfigError(f"Job {self.job_id}: arrival must be finite")

    @property
    def spec(self) -> ModelSpec:
        """The job's :class:`ModelSpec`."""
        return MODEL_ZOO[self.model]

    def unchecked(self, **changes: Any) -> Job:
        """A copy with some fields changed, *without* running the validation again: for values
        the caller knows valid (a new id, a static job's arrival 0), where
        :func:`dataclasses.replace` would repeat every check of a job that passed them."""
        new = object.__new__(Job)
        for name in _JOB_FIELDS:
            object.__setattr__(new, name, changes.get(name, getattr(self, name)))
        return new

    @property
    def grad_bytes(self) -> float:
        """Gradient bytes ``M`` all-reduced every iteration."""
        return self.spec.grad_bytes

    @property
    def local_batch(self) -> float:
        """Per-GPU batch."""
        return self.batch_size / self.num_gpus

    @property
    def compute_time(self) -> float:
        """Per-GPU compute time ``t_c`` on the reference GPU at the job's local batch, seconds."""
        return self.spec.compute_time(self.local_batch)


#: The fields of :class:`Job`, in order.
_JOB_FIELDS = tuple(f.name for f in fields(Job))
