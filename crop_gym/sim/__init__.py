"""Discrete-event, trace-driven simulator of a GPU cluster under a placement policy (docs/SIMULATOR.md).

>>> from crop_gym.sim import Simulator, SimConfig
>>> from crop_gym.workloads import load_workload
>>> sim = Simulator(load_workload("elasticflow:cluster10"), "n32g8", profile="mild", seed=0)

then ``sim.run(policy)`` with any object that has the :class:`~crop_gym.policy.PlacementPolicy`
interface (the registered policies: ``crop_gym.policy.make_policy("crop")``). See docs/SIMULATOR.md.
"""

from __future__ import annotations

from crop_gym.sim.config import QUEUE_VIEWS, SimConfig, SimulationError
from crop_gym.sim.engine import Simulator, simulate
from crop_gym.sim.health import HealthChange, HealthProcess, ScriptedFailure
from crop_gym.sim.ledger import JobLedger
from crop_gym.sim.result import RECORD_COLUMNS, TIMELINE_COLUMNS, RunTotals, SimResult, Timeline

__all__ = [
    "QUEUE_VIEWS",
    "RECORD_COLUMNS",
    "TIMELINE_COLUMNS",
    "HealthChange",
    "HealthProcess",
    "JobLedger",
    "RunTotals",
    "ScriptedFailure",
    "SimConfig",
    "SimResult",
    "SimulationError",
    "Simulator",
    "Timeline",
    "simulate",
]
