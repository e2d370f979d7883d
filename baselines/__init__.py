"""Placement policies under one model: CROP, classic baselines and exact optima.

* :mod:`crop_gym.baselines.policy`: the :class:`~crop_gym.baselines.policy.PlacementPolicy` interface, :class:`~crop_gym.baselines.policy.Placement`,
  :func:`~crop_gym.baselines.policy.apply` and the registry (:data:`~crop_gym.baselines.policy.POLICIES`, :func:`~crop_gym.baselines.policy.make_policy`).
* :mod:`crop_gym.baselines.crop`: CROP (lazy submodular greedy on the true ΔF, docs/CROP.md) — :func:`~crop_gym.baselines.crop.crop_greedy`.
* :mod:`crop_gym.baselines.heuristics`: random, first-fit, best-fit, spread, hived, comm-greedy.
* :mod:`crop_gym.baselines.exact`: branch-and-bound optimum of F and the min-communication MILP, for small instances.
* :mod:`crop_gym.baselines.compare`: the logic of ``crop-gym compare``.
* :mod:`crop_gym.baselines.registry`: registers every policy with :mod:`crop_gym.policies` on import.

docs/CROP.md describes the reconstruction and the measured ratios to the optimum.
"""

from crop_gym.baselines import registry as _registry  # noqa: F401  (registers the policies with crop_gym)
