"""Argument checks shared by every placement environment (constructors and reset options).

:func:`check_count`, :func:`check_options` and :func:`check_render_mode` validate constructor
arguments and reset options the same way in every environment: one :class:`ConfigError` naming
the parameter and what is allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from crop_gym.errors import ConfigError

__all__ = [
    "DEFAULT_QUEUE_VIEW",
    "RENDER_MODES",
    "check_count",
    "check_options",
    "check_render_mode",
]

#: Default largest queue view (capped at the scenario's queue size).
DEFAULT_QUEUE_VIEW = 64
#: Render modes of every placement environment.
RENDER_MODES = ("ansi", "rgb_array")


def check_render_mode(render_mode: str | None) -> str | None:
    """``render_mode`` if it is ``None`` or one of :data:`RENDER_MODES`, else a :class:`ConfigError`."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ConfigError(f"render_mode={render_mode!r} is not one of {list(RENDER_MODES)}")
    return render_mode


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer ``>= low`` (not a bool, not a float).

    Raises:
        ConfigError: Naming ``name`` and the allowed range otherwise.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
    if value < low:
        raise ConfigError(f"{name}={value!r} is outside its allowed range [{low}, inf)")
    return int(value)


def check_options(options: Mapping[str, Any] | None, allowed: Collection[str]) -> dict[str, Any]:
    """``options`` as a dict (empty for ``None``), refusing keys outside ``allowed``.

    Raises:
        ConfigError: Naming the unknown key and the allowed ones.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"options must be a dict, got {type(options).__name__}")
    for key in options:
        if key not in allowed:
            raise ConfigError(f"unknown reset option {key!r}; allowed: {sorted(allowed) or 'none'}")
    return dict(options)
