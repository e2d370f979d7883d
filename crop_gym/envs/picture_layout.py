"""Where the placement picture puts things: server boxes, GPU cells, switches and links.

A pure function of the (immutable) topology, cached. Data units: a GPU cell is about one unit;
y grows upwards and the servers lie below y = 0, the switches above. The servers under one
switch form a block, wrapped into rows when that makes the cells larger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.topology import Topology

__all__ = ["PlacementLayout", "placement_layout"]

_GAP = 0.12  # gap between GPU cells, in cell units
_BOX_PAD = 0.2  # padding inside a server box


@dataclass(frozen=True)
class PlacementLayout:
    """Where everything of one topology goes (data units; y grows upwards, servers below y = 0).

    Attributes:
        aggregate: One bar per server (``True``) or one cell per GPU.
        server_box: ``float[S, 4]`` ``(x, y, width, height)`` of each server's box.
        gpu_cell: ``float[G, 4]`` ``(x, y, width, height)`` of each GPU's cell (GPU view only;
            empty when aggregated).
        node_xy: ``float[N, 2]`` anchor of every node: a switch's centre, a server's top centre.
        link_child: ``int[L]`` the child node of each drawn link (the link is the one above it).
        link_xy: ``float[L, 2, 2]`` its two end points.
        switches: ``int[W]`` switch nodes.
        block_frame: ``float[B, 4]`` frames around the servers of one switch when they wrap rows.
        xlim / ylim: Data limits of the whole picture.
    """

    aggregate: bool
    server_box: NDArray[np.float64]
    gpu_cell: NDArray[np.float64]
    node_xy: NDArray[np.float64]
    link_child: NDArray[np.intp]
    link_xy: NDArray[np.float64]
    switches: NDArray[np.intp]
    block_frame: NDArray[np.float64]
    xlim: tuple[float, float]
    ylim: tuple[float, float]


def _grid(n: int) -> tuple[int, int]:
    """Rows and columns of the cells of an ``n``-GPU server (one row up to 4 GPUs, else two)."""
    rows = 1 if n <= 4 else 2
    return rows, math.ceil(n / rows)


@lru_cache(maxsize=16)
def placement_layout(topology: Topology, aggregate: bool, aspect: float = 1.57) -> PlacementLayout:
    """Lay out ``topology`` (a pure function of the immutable topology, hence cached).

    The servers under one switch form a block of ``c`` columns; ``c`` is chosen to make the
    cells as large as possible in an area of width/height ``aspect``.

    Args:
        topology: The cluster.
        aggregate: One bar per server instead of one cell per GPU.
        aspect: Width / height of the area the picture should fill.
    """
    topo = topology
    n_srv = topo.num_servers
    per = (topo.server_gpu_hi - topo.server_gpu_lo).astype(np.int64)
    rows_g, cols_g = _grid(int(per.max()))
    if aggregate:
        bw, bh, pad_y = 3.0, 1.0, 0.75
    else:
        bw, bh, pad_y = cols_g + 2 * _BOX_PAD, rows_g + 2 * _BOX_PAD, 0.55
    pad_x, block_gap, level_h = 0.45, 1.2, 1.6
    parent = topo.parent
    owner = parent[topo.server_node]  # the switch right above each server
    blocks = list(dict.fromkeys(int(o) for o in owner))
    members = [np.flatnonzero(owner == b) for b in blocks]
    n_b = max(len(m) for m in members)
    depth = topo.depth
    d_low = int(depth[blocks].max())
    scales: list[float] = []
    for c in range(1, n_b + 1):
        r = math.ceil(n_b / c)
        width = len(blocks) * c * (bw + pad_x) + (len(blocks) - 1) * block_gap
        height = r * (bh + pad_y) + (d_low + 1) * level_h
        scale = min(aspect / width, 1.0 / height)
        scales.append(scale)
    # The fewest rows whose cells are within 15 % of the largest possible.
    top = max(scales)
    cols = next(c for c in range(n_b, 0, -1) if scales[c - 1] >= 0.85 * top)
    server_box = np.zeros((n_srv, 4))
    node_xy = np.zeros((topo.num_nodes, 2))
    frames = []
    x0 = 0.0
    for b, mem in zip(blocks, members, strict=True):
        c = min(cols, len(mem))
        r = math.ceil(len(mem) / c)
        for i, srv in enumerate(mem):
            x = x0 + (i % c) * (bw + pad_x)
            y = -(i // c) * (bh + pad_y) - bh
            server_box[srv] = (x, y, bw, bh)
            node_xy[topo.server_node[srv]] = (x + bw / 2, 0.0 if r > 1 else y + bh)
        block_w = c * (bw + pad_x) - pad_x
        if r > 1:
            frames.append((x0 - 0.2, -r * (bh + pad_y) + pad_y - 0.45, block_w + 0.4, 0.0))
        node_xy[b] = (x0 + block_w / 2, (d_low - depth[b] + 1) * level_h - 0.5)
        x0 += block_w + pad_x + block_gap
    # Upper switches sit above the middle of their children (deepest first: DFS preorder reversed).
    switches = np.flatnonzero(topo.kind == 2)
    for n in sorted((int(s) for s in switches if int(s) not in blocks), key=lambda s: -depth[s]):
        kids = np.flatnonzero(parent == n)
        node_xy[n] = (node_xy[kids, 0].mean(), (d_low - depth[n] + 1) * level_h - 0.5)
    frame_arr = np.array(frames, dtype=np.float64).reshape(-1, 4)
    if len(frame_arr):
        frame_arr[:, 3] = -frame_arr[:, 1] + 0.2
    # Links: switch to switch, and switch to server (to the block's top when its servers wrap).
    link_child: list[int] = []
    link_xy: list[NDArray[np.float64]] = []
    for n in range(1, topo.num_nodes):
        if topo.kind[n] == 0:
            continue
        a, p = node_xy[n].copy(), node_xy[parent[n]]
        if topo.kind[n] == 1 and a[1] == 0.0 and frames:
            a[0] = node_xy[parent[n], 0]  # wrapped block: all uplinks meet at its frame
            a[1] = 0.2
        link_child.append(n)
        link_xy.append(np.stack([a, p]))
    gpu_cell = np.zeros((0, 4))
    if not aggregate:
        gpu_cell = np.zeros((topo.num_gpus, 4))
        for s in range(n_srv):
            x, y, _, _ = server_box[s]
            lo, hi = int(topo.server_gpu_lo[s]), int(topo.server_gpu_hi[s])
            for j, g in enumerate(range(lo, hi)):
                row, col = divmod(j, cols_g)
                top = y + bh - _BOX_PAD - row
                gpu_cell[g] = (
                    x + _BOX_PAD + col + _GAP / 2,
                    top - 1 + _GAP / 2,
                    1 - _GAP,
                    1 - _GAP,
                )
    top = float(node_xy[0, 1]) + 0.6
    bottom = float(server_box[:, 1].min()) - pad_y
    right = float((server_box[:, 0] + server_box[:, 2]).max())
    return PlacementLayout(
        aggregate=aggregate,
        server_box=server_box,
        gpu_cell=gpu_cell,
        node_xy=node_xy,
        link_child=np.array(link_child, dtype=np.intp),
        link_xy=np.array(link_xy, dtype=np.float64).reshape(-1, 2, 2),
        switches=switches.astype(np.intp),
        block_frame=frame_arr,
        xlim=(-0.6, right + 0.6),
        ylim=(bottom, top),
    )
