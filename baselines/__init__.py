"""Placement policies under one model: CROP, classic baselines and exact optima.

Installed as ``crop_gym.baselines``; its policies plug into the core's registry
(:mod:`crop_gym.policy`) through the ``crop_gym.policies`` entry point, and ``crop-gym compare``
into the command line through ``crop_gym.commands``.

* :mod:`crop_gym.baselines.crop`: CROP (lazy submodular greedy on the true ΔF, docs/CROP.md) — :func:`~crop_gym.baselines.crop.crop_greedy`.
* :mod:`crop_gym.baselines.heuristics`: random, first-fit, best-fit, spread, hived, comm-greedy.
* :mod:`crop_gym.baselines.exact`: branch-and-bound optimum of F, for small instances, and its search space.
* :mod:`crop_gym.baselines.milp`: the min-communication MILP.
* :mod:`crop_gym.baselines.compare`: the logic of ``crop-gym compare``.
* :mod:`crop_gym.baselines.registry`: the policies this package provides to :mod:`crop_gym.policy`.

docs/CROP.md describes the reconstruction and the measured ratios to the optimum.
"""
