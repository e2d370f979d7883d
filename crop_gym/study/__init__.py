"""Studies: grids of simulations run locally or on Ray, resumable, summarised with intervals.

``crop-gym study`` (:mod:`crop_gym.study.cli`) expands a :class:`StudySpec` (traces × clusters ×
hardware × policies × abnormality profiles × seeds, :mod:`crop_gym.study.grid`) into runs with
stable ids, executes the unfinished ones on a backend (:mod:`crop_gym.study.backends`), writes each
record atomically (:mod:`crop_gym.study.results`) and summarises them (:mod:`crop_gym.study.report`).
See docs/STUDY.md.
"""

from __future__ import annotations

from crop_gym.study.backends import BACKENDS, LocalBackend, RayBackend, StudyError, make_backend
from crop_gym.study.grid import Run, apply_hardware, cluster_on, expand
from crop_gym.study.runner import StudyOutcome, run_study
from crop_gym.study.spec import HARDWARE_PROFILES, StudySpec, load_study

__all__ = [
    "BACKENDS",
    "HARDWARE_PROFILES",
    "LocalBackend",
    "RayBackend",
    "Run",
    "StudyError",
    "StudyOutcome",
    "StudySpec",
    "apply_hardware",
    "cluster_on",
    "expand",
    "load_study",
    "make_backend",
    "run_study",
]
