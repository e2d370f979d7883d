"""Rendering of a cluster state: ``ansi`` text and ``rgb_array`` pictures (matplotlib, headless).

:class:`ClusterRenderer` is shared by every placement environment. The text view prints one row per
server and one cell per GPU; the picture is :func:`draw_placement` (crop_gym/envs/picture.py: the
tree with servers as boxes of GPU cells, jobs coloured, health marked, a legend; one bar per server
above 128 GPUs). The matplotlib figure is created once (Agg canvas, no pyplot state, fixed size)
and redrawn for every frame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.picture import (
    TEXT_PT,
    draw_placement,
    draw_state,
    draw_topology,
    new_placement_figure,
)
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import Topology

__all__ = ["ANSI_LEGEND", "ClusterRenderer", "draw_placement"]

#: The legend printed under the ``ansi`` view.
ANSI_LEGEND = (
    "legend: .  free   XX failed   <id> job   ! slow   ? failure-prone   * chosen (GPU mode)"
)

_FREE = (1.0, 1.0, 1.0, 1.0)
_BACKGROUND = (0.70, 0.76, 0.84, 1.0)
_FAILED = (0.1, 0.1, 0.1, 1.0)
_CHOSEN = (1.0, 0.85, 0.0, 1.0)


class ClusterRenderer:
    """Draws a :class:`ClusterState` as text or as an RGB array.

    Args:
        topology: The cluster (positions are computed once from it).
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._fig: Any = None

    # --------------------------------------------------------------- helpers
    def _labels(self, state: ClusterState) -> list[str]:
        labels = [""] * self.topology.num_gpus
        for job in state.placed_jobs():
            for g in state.placement(job.job_id):
                labels[int(g)] = job.job_id
        return labels

    # ------------------------------------------------------------------ ansi
    def ansi(
        self,
        state: ClusterState,
        *,
        header: Sequence[str] = (),
        chosen: Sequence[int] = (),
    ) -> str:
        """Text view: a header, one row per server (``name [switch] | cell cell …``) and a legend.

        Args:
            state: The cluster state.
            header: Lines printed first (e.g. F and the queue).
            chosen: GPUs marked ``*`` (picked for the job being placed in GPU mode).
        """
        topo = self.topology
        h = state.health
        labels = self._labels(state)
        chosen_set = {int(g) for g in chosen}
        names = topo.node_names
        lines = list(header)
        width = max(4, *(len(lab) for lab in labels)) if labels else 4
        for s in range(topo.num_servers):
            node = int(topo.server_node[s])
            parent = int(topo.parent[node])
            cells = []
            for g in range(int(topo.server_gpu_lo[s]), int(topo.server_gpu_hi[s])):
                if h.gpu_failed[g]:
                    lab = "XX"
                elif g in chosen_set:
                    lab = "*"
                else:
                    lab = labels[g] or "."
                mark = "!" if h.gpu_slowdown[g] > 1.0 else "?" if h.gpu_fail_prob[g] > 0 else " "
                cells.append(f"{lab:>{width}}{mark}")
            up = f"[{names[parent]}]" if parent > 0 else ""
            lines.append(f"{names[node]!s:>8} {up:<8}|{' '.join(cells)} |")
        lines.append(ANSI_LEGEND)
        return "\n".join(lines) + "\n"

    # --------------------------------------------------------------- picture
    def rgb(
        self,
        state: ClusterState,
        *,
        title: str = "",
        episode_jobs: Mapping[str, int] | None = None,
        chosen: Sequence[int] = (),
    ) -> NDArray[np.uint8]:
        """RGB picture ``uint8[H, W, 3]`` of the state (:func:`draw_placement`; fixed size).

        Args:
            state: The cluster state.
            title: Header lines (``"\\n"``-separated) drawn above the picture.
            episode_jobs: Job id → colour index for jobs placed in this episode; other placed jobs
                (background) are drawn muted.
            chosen: GPUs drawn gold (picked for the job being placed in GPU mode).
        """
        if self._fig is None:
            self._fig = new_placement_figure()
            self._title = self._fig.text(
                0.005, 0.985, "", fontsize=TEXT_PT, family="monospace", va="top", ha="left"
            )
            self._layout = draw_topology(self._fig.axes[0], self.topology)
            self._drawn: list[Any] = []
        for artist in self._drawn:
            artist.remove()
        ax, legend_ax = self._fig.axes
        self._drawn = draw_state(
            ax, state, self._layout, new_jobs=episode_jobs or {}, chosen=chosen, legend=legend_ax
        )
        self._title.set_text("\n".join(_clip(line, 190) for line in title.splitlines()))
        canvas = self._fig.canvas
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[:, :, :3].copy()

    def close(self) -> None:
        """Drop the figure (it is re-created on the next :meth:`rgb`)."""
        if self._fig is not None:
            self._fig.clear()
        self._fig = None

    def __getstate__(self) -> dict[str, Any]:
        state = {"topology": self.topology, "_fig": None}
        return state


def _clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` characters (an ellipsis marks the cut)."""
    return line if len(line) <= width else line[: width - 1] + "…"
