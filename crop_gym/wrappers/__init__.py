"""Wrappers that change what an agent of a placement environment sees or may do.

* :class:`~crop_gym.wrappers.safe_stop.SafeStop`: no stop trap — stop is masked while a
  placement that raises F remains (or while any placement remains).
"""

from crop_gym.wrappers.safe_stop import STOP_MODES, SafeStop

__all__ = ["STOP_MODES", "SafeStop"]
