"""Registers CROP and every baseline of :data:`crop_gym.baselines.policy.POLICIES` with :mod:`crop_gym.policies`.

Imported by ``baselines/__init__.py``, so importing any part of ``baselines`` (or a lookup in
:mod:`crop_gym.policies`, which imports ``baselines`` by name when a name is missing) registers them.
The policy classes themselves are still imported only when a policy is built.
"""

from __future__ import annotations

import functools

from crop_gym.baselines.policy import POLICIES, make_policy
from crop_gym.policies import register_policy

__all__ = ["register_all"]


@functools.cache
def _factory(name: str) -> functools.partial[object]:
    # One factory object per name, so that importing this module again re-registers the same one.
    return functools.partial(make_policy, name)


def register_all() -> None:
    """Register every policy of :data:`~crop_gym.baselines.policy.POLICIES` (idempotent)."""
    for name, info in POLICIES.items():
        register_policy(name, _factory(name), description=info.description)


register_all()
