"""Placement policies under one model: CROP, classic baselines and exact optima.

* :mod:`baselines.policy`: the :class:`~baselines.policy.PlacementPolicy` interface, :class:`~baselines.policy.Placement`,
  :func:`~baselines.policy.apply` and the registry (:data:`~baselines.policy.POLICIES`, :func:`~baselines.policy.make_policy`).
* :mod:`baselines.crop`: CROP (lazy submodular greedy on the true ΔF, docs/CROP.md) — :func:`~baselines.crop.crop_greedy`.
* :mod:`baselines.heuristics`: random, first-fit, best-fit, spread, hived, comm-greedy.
* :mod:`baselines.exact`: branch-and-bound optimum of F and the min-communication MILP, for small instances.
* :mod:`baselines.compare`: the logic of ``crop-gym compare``.
* :mod:`baselines.registry`: registers every policy with :mod:`crop_gym.policies` on import.

docs/CROP.md describes the reconstruction and the measured ratios to the optimum.
"""

from baselines import registry as _registry  # noqa: F401  (registers the policies with crop_gym)
