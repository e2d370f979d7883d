"""The progress bar of :meth:`Simulator.run <crop_gym.sim.Simulator.run>`: simulated hours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crop_gym.sim.engine import Simulator

__all__ = ["SimProgress"]


class SimProgress:
    """A tqdm bar over simulated hours fed from the simulator's public state (a no-op when off).

    Args:
        sim: The simulator (its last arrival sets the initial total).
        enabled: Whether to show the bar (tqdm is imported only then).
        every: Refresh every this many events.
    """

    def __init__(self, sim: Simulator, enabled: bool, every: int = 64) -> None:
        self.every = every
        self.bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            horizon_h = sim.jobs[-1].arrival / 3600.0 if sim.jobs else 0.0
            total = round(max(horizon_h, 1e-3), 2)
            self.bar = tqdm(total=total, unit="h", desc="simulated", dynamic_ncols=True)

    def update(self, sim: Simulator) -> None:
        """Advance the bar to the simulator's time (every ``every`` events)."""
        bar = self.bar
        if bar is None or sim.events % self.every:
            return
        h = round(sim.now / 3600.0, 2)
        if h > bar.total:
            bar.total = h
        bar.set_postfix(
            done=sim.completed, queued=sim.queue_length, running=sim.running, refresh=False
        )
        bar.update(h - bar.n)  # redraws at most every ``mininterval``

    def close(self, sim: Simulator) -> None:
        """Show the final simulated time and close the bar."""
        if self.bar is not None:
            self.bar.n = round(sim.now / 3600.0, 2)
            self.bar.total = max(self.bar.total, self.bar.n)
            self.bar.close()
