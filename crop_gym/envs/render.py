"""Rendering of a cluster state: ``ansi`` text and ``rgb_array`` pictures (matplotlib, headless).

:class:`ClusterRenderer` is shared by every placement environment. The text view prints one row per
server and one cell per GPU; the picture draws the tree (GPUs at the bottom in DFS order, switches
above), colours GPUs by job and shades each inter-server link by the number of rings crossing it.
The matplotlib figure is created once (Agg canvas, no pyplot state) and updated in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.state import ClusterState
from crop_gym.model.topology import Topology

__all__ = ["ANSI_LEGEND", "ClusterRenderer"]

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
        lo = topology.node_gpu_lo.astype(np.float64)
        hi = topology.node_gpu_hi.astype(np.float64)
        self._x = (lo + hi - 1.0) / 2.0
        self._y = -topology.depth.astype(np.float64)
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
    def _setup(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure

        topo = self.topology
        n_gpu = topo.num_gpus
        width = float(np.clip(n_gpu / 10.0, 6.0, 20.0))
        fig = Figure(figsize=(width, 4.0), dpi=80)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.02, 0.04, 0.96, 0.84))
        ax.set_axis_off()
        x, y = self._x, self._y
        child = np.arange(1, topo.num_nodes)
        par = topo.parent[child]
        segs = np.stack([np.stack([x[child], y[child]], 1), np.stack([x[par], y[par]], 1)], 1)
        self._inter = ~topo.is_intra[child]
        widths = np.where(self._inter, 2.5, 0.6)
        self._links = LineCollection(list(segs), linewidths=widths, colors="0.8", zorder=1)
        ax.add_collection(self._links)
        sw = np.flatnonzero(topo.kind != 0)
        ax.scatter(x[sw], y[sw], s=18, marker="s", c="0.35", zorder=2)
        gx, gy = x[topo.gpu_node], y[topo.gpu_node]
        size = float(np.clip(4000.0 / n_gpu, 3.0, 120.0))
        self._gpus: Any = ax.scatter(
            gx,
            gy,
            s=size,
            marker="o",
            facecolors="white",
            edgecolors="0.4",
            linewidths=0.8,
            zorder=3,
        )
        self._failed = ax.scatter([], [], s=size, marker="x", c="k", zorder=4)
        self._gxy = np.stack([gx, gy], 1)
        pad = 1.0
        ax.set_xlim(-pad, n_gpu - 1 + pad)
        ax.set_ylim(float(y.min()) - 0.5, 0.5)
        self._title = fig.text(0.02, 0.93, "", fontsize=10, family="monospace")
        self._fig = fig
        self._cmap = _colormap("Reds")
        self._jobmap = _colormap("tab20")

    def rgb(
        self,
        state: ClusterState,
        *,
        title: str = "",
        episode_jobs: Mapping[str, int] | None = None,
        chosen: Sequence[int] = (),
    ) -> NDArray[np.uint8]:
        """RGB picture ``uint8[H, W, 3]`` of the state.

        Args:
            state: The cluster state.
            title: A line drawn above the tree.
            episode_jobs: Job id → colour index for jobs placed in this episode; other placed jobs
                (background) are drawn in one muted colour.
            chosen: GPUs drawn in yellow (picked for the job being placed in GPU mode).
        """
        if self._fig is None:
            self._setup()
        topo = self.topology
        h = state.health
        face = np.tile(np.array(_FREE), (topo.num_gpus, 1))
        episode_jobs = episode_jobs or {}
        for job in state.placed_jobs():
            gp = state.placement(job.job_id)
            idx = episode_jobs.get(job.job_id)
            face[gp] = _BACKGROUND if idx is None else self._jobmap((idx % 20) / 20.0 + 0.025)
        if len(chosen):
            face[np.asarray(chosen, dtype=np.intp)] = _CHOSEN
        face[h.gpu_failed] = _FAILED
        edge = np.tile(np.array((0.4, 0.4, 0.4, 1.0)), (topo.num_gpus, 1))
        edge[h.gpu_fail_prob > 0] = (1.0, 0.55, 0.0, 1.0)
        edge[h.gpu_slowdown > 1.0] = (0.85, 0.0, 0.0, 1.0)
        self._gpus.set_facecolor(face)
        self._gpus.set_edgecolor(edge)
        self._failed.set_offsets(
            self._gxy[h.gpu_failed] if h.gpu_failed.any() else np.empty((0, 2))
        )
        load = state.link_load[1:].astype(np.float64)
        peak = max(2.0, float(load.max()) if len(load) else 2.0)
        colors = self._cmap(0.15 + 0.85 * load / peak)
        colors[~self._inter] = (0.75, 0.75, 0.75, 1.0)
        colors[(load == 0) & self._inter] = (0.55, 0.55, 0.55, 1.0)
        self._links.set_colors(colors)
        self._title.set_text(title)
        canvas = self._fig.canvas
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[:, :, :3].copy()

    def close(self) -> None:
        """Drop the figure (it is re-created on the next :meth:`rgb`)."""
        if self._fig is not None:
            self._fig.clear()
        self._fig = None

    def __getstate__(self) -> dict[str, Any]:
        state = {
            k: v for k, v in self.__dict__.items() if not k.startswith("_") or k in ("_x", "_y")
        }
        state["_fig"] = None
        return state


def _colormap(name: str) -> Any:
    import matplotlib

    return matplotlib.colormaps[name]
