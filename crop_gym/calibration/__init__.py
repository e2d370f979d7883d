"""Calibration of the performance model against measured data (docs/MODEL.md).

* :mod:`~crop_gym.calibration.bundled`: the bundled ElasticFlow A100 profiles and Chronus data, and
  the prediction of a profile point;
* :mod:`~crop_gym.calibration.elasticflow`: the fit to the ElasticFlow profiles (``crop-gym
  calibrate --write`` regenerates ``crop_gym/data/calibration.json`` from it);
* :mod:`~crop_gym.calibration.chronus`: the check against Chronus' placement sensitivity;
* :mod:`~crop_gym.calibration.chronus_fit`: fitting Chronus' own testbed to it (docs/MODEL.md §7.5);
* :mod:`~crop_gym.calibration.measurements`: reading measured step times in the Pollux/Sia format.
"""

from crop_gym.calibration.bundled import (
    CHRONUS_LOCAL_BATCH,
    GPUS_PER_SERVER,
    ProfilePoint,
    load_chronus,
    load_profiles,
    model_coefficients,
    predict_iteration_time,
    profile_placement,
)
from crop_gym.calibration.chronus import ChronusComparison, chronus_check
from crop_gym.calibration.elasticflow import (
    LINK_KEYS,
    MEDIAN_ERROR_TARGET,
    RANK_AGREEMENT_TARGET,
    CalibrationResult,
    ModelFit,
    calibration_json,
    choose_default,
    fit_all,
    fit_calibration,
)

__all__ = [
    "CHRONUS_LOCAL_BATCH",
    "GPUS_PER_SERVER",
    "LINK_KEYS",
    "MEDIAN_ERROR_TARGET",
    "RANK_AGREEMENT_TARGET",
    "CalibrationResult",
    "ChronusComparison",
    "ModelFit",
    "ProfilePoint",
    "calibration_json",
    "choose_default",
    "chronus_check",
    "fit_all",
    "fit_calibration",
    "load_chronus",
    "load_profiles",
    "model_coefficients",
    "predict_iteration_time",
    "profile_placement",
]
