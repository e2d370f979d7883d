"""Placement policies by name: a registry that the commands look policies up in.

``crop_gym`` defines the policy *interface* (:class:`crop_gym.sim.PlacementPolicy`) but no policy:
CROP and the baselines live in the ``baselines`` package, one layer above. So that the core never
depends on that layer, ``crop_gym`` contains no ``import crop_gym.baselines`` statement; instead, a provider
package registers its policies here when it is imported (``baselines/__init__.py`` does so for CROP
and every heuristic), and this module imports the provider packages listed in
:data:`PROVIDER_MODULES` *by name* (:func:`importlib.import_module`) the first time a lookup misses.
A provider that is not installed is skipped; any other error while importing it propagates.

Example:
    >>> from crop_gym.policies import make_policy, policy_names
    >>> "crop" in policy_names()
    True
    >>> policy = make_policy("first-fit")
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crop_gym.errors import ConfigError

if TYPE_CHECKING:
    from crop_gym.sim.protocol import PlacementPolicy

__all__ = [
    "PROVIDER_MODULES",
    "PolicyEntry",
    "make_policy",
    "policy_description",
    "policy_names",
    "register_policy",
    "unregister_policy",
]

#: Packages imported (by name, once each) when a policy name is not registered yet.
PROVIDER_MODULES: tuple[str, ...] = ("baselines",)

_NAME = re.compile(r"[a-z0-9][a-z0-9_.+-]*\Z")


@dataclass(frozen=True)
class PolicyEntry:
    """A registered policy.

    Attributes:
        name: Registry name (lower case letters, digits and ``_.+-``; no spaces or commas).
        factory: Builds the policy; takes the keyword arguments given to :func:`make_policy`.
        description: One line for tables and ``--help``.
    """

    name: str
    factory: Callable[..., PlacementPolicy]
    description: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"policy name {self.name!r}: use lower case letters, digits and _.+- "
                "(starting with a letter or digit)"
            )
        if not callable(self.factory):
            raise ConfigError(f"policy {self.name!r}: factory {self.factory!r} is not callable")
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigError(f"policy {self.name!r}: description must be a non-empty string")
        if "\n" in self.description:
            raise ConfigError(f"policy {self.name!r}: description must be one line")


_REGISTRY: dict[str, PolicyEntry] = {}
_IMPORTED: set[str] = set()


def register_policy(
    name: str,
    factory: Callable[..., PlacementPolicy],
    *,
    description: str,
    replace: bool = False,
) -> None:
    """Register a policy under ``name``.

    Registering the same name with the same factory again (a provider imported twice) is a no-op.

    Args:
        name: Registry name (lower case letters, digits and ``_.+-``).
        factory: Called with :func:`make_policy`'s keyword arguments; returns the policy.
        description: One line for tables and ``--help``.
        replace: Allow replacing a different factory already registered under ``name``.

    Raises:
        ConfigError: On a malformed name or description, a non-callable factory, or a name already
            registered with another factory (unless ``replace``).
    """
    entry = PolicyEntry(name, factory, description)
    old = _REGISTRY.get(name)
    if old is not None and old.factory is not factory and not replace:
        raise ConfigError(f"policy {name!r} is already registered (by {old.factory!r})")
    _REGISTRY[name] = entry


def unregister_policy(name: str) -> None:
    """Remove policy ``name`` (a no-op when it is not registered); for plug-ins and tests."""
    _REGISTRY.pop(name, None)


def _import_providers() -> None:
    for module in PROVIDER_MODULES:
        if module in _IMPORTED:
            continue
        _IMPORTED.add(module)
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the provider exists but something it needs is missing
                raise


def _entry(name: str) -> PolicyEntry:
    entry = _REGISTRY.get(name)
    if entry is None:
        _import_providers()
        entry = _REGISTRY.get(name)
    if entry is None:
        known = ", ".join(policy_names()) or "none registered"
        raise ConfigError(f"unknown policy {name!r}; policies: {known}")
    return entry


def make_policy(name: str, **kwargs: object) -> PlacementPolicy:
    """Build the policy registered as ``name``.

    Args:
        name: A name of :func:`policy_names`.
        **kwargs: Passed to the factory (e.g. ``seed=3`` for ``random``).

    Raises:
        ConfigError: For an unknown name (the message lists the known ones) or, from the factory,
            a bad argument.
    """
    return _entry(name).factory(**kwargs)


def policy_description(name: str) -> str:
    """The one-line description of policy ``name``.

    Raises:
        ConfigError: For an unknown name.
    """
    return _entry(name).description


def policy_names() -> tuple[str, ...]:
    """Every registered name, in registration order (imports the providers first)."""
    _import_providers()
    return tuple(_REGISTRY)
