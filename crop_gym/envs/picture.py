"""The placement picture: the cluster tree with servers as boxes of GPU cells, jobs coloured, health marked.

:func:`draw_placement` draws a :class:`~crop_gym.model.state.ClusterState` into a matplotlib
``Axes`` (headless: the figure it makes has an Agg canvas and never touches pyplot). Every
environment's ``render_mode="rgb_array"`` uses it, and notebooks call it directly::

    from crop_gym.envs.render import draw_placement
    ax = draw_placement(env.unwrapped.state)      # a new figure; ax.figure is it

What is drawn:

* **Tree.** Switches (dark boxes) above the servers, joined by links. A link is grey when no job's
  ring crosses it and red, darker with more rings, when some do (the shared-link contention of
  docs/MODEL.md); a dashed link is degraded (ρ < 1) or failure-prone (π > 0).
* **Servers.** Up to :data:`AGGREGATE_ABOVE` GPUs, each server is a box of GPU cells (DFS order,
  left to right, top to bottom). A larger cluster is aggregated: one bar per server, split into
  segments by job (its occupancy), with the server's health counts under it.
* **Jobs.** Jobs placed in this episode get vivid colours and a number (the legend lists
  ``number: job model ×GPUs``); jobs that were already running (background) are muted slate.
  Free GPUs are light grey; GPUs picked for the job being placed (GPU mode) are gold.
* **Health.** Slow GPUs (σ > 1) are hatched, failure-prone GPUs (π > 0) have an orange outline,
  failed GPUs are dark and crossed. In the aggregated view a server shows these as counts
  (``x`` failed, ``!`` slow, ``?`` failure-prone, as in the ``ansi`` view), an orange outline if
  any GPU is failure-prone and hatching if any is slow.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.picture_layout import PlacementLayout, placement_layout
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import Topology

__all__ = [
    "AGGREGATE_ABOVE",
    "FIGSIZE",
    "TEXT_PT",
    "PlacementLayout",
    "draw_placement",
    "draw_state",
    "draw_topology",
    "new_placement_figure",
    "placement_layout",
    "server_labels",
]

#: Clusters with more GPUs than this are drawn one bar per server.
AGGREGATE_ABOVE = 128
#: Size (inches) of the figure :func:`new_placement_figure` makes; at 80 dpi it is 1,440 x 760
#: pixels, wide enough for a projector with :data:`TEXT_PT` text.
FIGSIZE = (18.0, 9.5)
#: Size (points) of every text of the picture: title, legend, switch and server names, health
#: counts. Job numbers inside GPU cells take it too when the cell holds it, else the largest size
#: the cell holds down to :data:`_MIN_CELL_PT`; a name that does not fit at this size is left out
#: rather than shrunk (the legend explains the rest).
TEXT_PT = 12.0
_MIN_CELL_PT = 9.0

FREE = (0.87, 0.87, 0.87, 1.0)
FAILED = (0.22, 0.22, 0.22, 1.0)
CHOSEN = (1.0, 0.82, 0.0, 1.0)
PRONE = (1.0, 0.50, 0.0, 1.0)
SLOW = (0.70, 0.0, 0.0, 1.0)
SWITCH = (0.25, 0.28, 0.33, 1.0)
#: Muted colours of background jobs (alternating, so that neighbours stay apart).
BACKGROUND = ((0.60, 0.66, 0.74, 1.0), (0.71, 0.75, 0.81, 1.0))
# tab20 without its greys (free GPUs and background jobs are grey-ish): dark shades first.
_PALETTE_INDEX = (0, 2, 4, 6, 8, 10, 12, 16, 18, 1, 3, 5, 7, 9, 11, 13, 17, 19)


def new_placement_figure(dpi: float = 80.0) -> Any:
    """A figure for :func:`draw_placement`: the picture's axes on the left, a legend axes right.

    The figure has an Agg canvas (headless) and a fixed size (:data:`FIGSIZE`), so every frame of
    an episode has the same pixel size. ``fig.axes`` is ``[picture, legend]``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=dpi)
    FigureCanvasAgg(fig)
    fig.add_axes((0.005, 0.01, 0.735, 0.86))
    fig.add_axes((0.745, 0.01, 0.25, 0.86))
    for ax in fig.axes:
        ax.set_axis_off()
    return fig


def _colormap(name: str) -> Any:
    import matplotlib

    return matplotlib.colormaps[name]


def _palette(i: int) -> tuple[float, float, float, float]:
    cmap = _colormap("tab20")
    c: tuple[float, float, float, float] = cmap(_PALETTE_INDEX[i % len(_PALETTE_INDEX)])
    return c


def _rects(boxes: NDArray[np.float64]) -> Any:
    """``float[n, 4, 2]`` corners of ``(x, y, w, h)`` rectangles (typed ``Any`` for matplotlib)."""
    x, y, w, h = boxes.T
    return np.stack(
        [
            np.stack([x, y], 1),
            np.stack([x + w, y], 1),
            np.stack([x + w, y + h], 1),
            np.stack([x, y + h], 1),
        ],
        1,
    )


def _crosses(boxes: NDArray[np.float64], inset: float = 0.12) -> NDArray[np.float64]:
    """``float[2n, 2, 2]``: the two diagonals of each rectangle (a failed GPU's cross)."""
    x, y, w, h = boxes.T
    dx, dy = w * inset, h * inset
    a = np.stack([np.stack([x + dx, y + dy], 1), np.stack([x + w - dx, y + h - dy], 1)], 1)
    b = np.stack([np.stack([x + dx, y + h - dy], 1), np.stack([x + w - dx, y + dy], 1)], 1)
    return np.concatenate([a, b])


@dataclass(frozen=True)
class _JobColours:
    """Colour, label and legend text of each placed job."""

    colour: dict[str, tuple[float, float, float, float]]
    label: dict[str, str]
    new: list[tuple[int, str]]  # (index, job id) of the episode's jobs, in index order
    background: int


def _job_colours(
    state: ClusterState, new_jobs: Mapping[str, int] | Collection[str] | None
) -> _JobColours:
    jobs = state.placed_jobs()
    if new_jobs is None:
        index = {j.job_id: i for i, j in enumerate(jobs)}
    elif isinstance(new_jobs, Mapping):
        index = {str(k): int(v) for k, v in new_jobs.items()}
    else:
        index = {str(k): i for i, k in enumerate(new_jobs)}
    colour: dict[str, tuple[float, float, float, float]] = {}
    label: dict[str, str] = {}
    new: list[tuple[int, str]] = []
    n_bg = 0
    for j in jobs:
        i = index.get(j.job_id)
        if i is None:
            colour[j.job_id] = BACKGROUND[n_bg % 2]
            n_bg += 1
        else:
            colour[j.job_id] = _palette(i)
            label[j.job_id] = str(i + 1)
            new.append((i, j.job_id))
    new.sort()
    return _JobColours(colour, label, new, n_bg)


def _px_per_unit(ax: Any, lay: PlacementLayout) -> float:
    bbox = ax.get_window_extent()
    return float(
        min(bbox.width / (lay.xlim[1] - lay.xlim[0]), bbox.height / (lay.ylim[1] - lay.ylim[0]))
    )


def _text_width_px(chars: int, dpi: float, pt: float = TEXT_PT) -> float:
    """About how many pixels ``chars`` characters of DejaVu Sans take at ``pt`` points."""
    return 0.62 * pt * chars * dpi / 72.0


def _cell_text_size(px: float, dpi: float, chars: int) -> float:
    """Font size (points) for ``chars`` characters in a cell ``px`` pixels wide: :data:`TEXT_PT`
    when it fits, else smaller down to :data:`_MIN_CELL_PT`; 0 when not even that fits."""
    pt = min(TEXT_PT, 0.85 * px / (0.62 * max(chars, 1.5)) * 72.0 / dpi)
    return pt if pt >= _MIN_CELL_PT else 0.0


def server_labels(topology: Topology) -> list[str]:
    """One label per server, each different: the shortest tail of its node name (``srv0``, else
    ``tor0/srv0``) that no other server shares, so that every server is named once."""
    names = [str(topology.node_names[n]).split("/") for n in topology.server_node]
    depth = 1
    while depth < max((len(n) for n in names), default=1):
        tails = ["/".join(n[-depth:]) for n in names]
        if len(set(tails)) == len(tails):
            return tails
        depth += 1
    return ["/".join(n) for n in names]


def draw_topology(ax: Any, topology: Topology, *, aggregate: bool | None = None) -> PlacementLayout:
    """Draw what does not change with the state: server boxes and names, switches, block frames.

    Args:
        ax: The matplotlib ``Axes``; its limits and aspect are set here.
        topology: The cluster.
        aggregate: One bar per server; ``None``: above :data:`AGGREGATE_ABOVE` GPUs.

    Returns:
        The layout, for :func:`draw_state`.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    topo = topology
    agg = topo.num_gpus > AGGREGATE_ABOVE if aggregate is None else bool(aggregate)
    lay = placement_layout(topo, agg)
    ax.set_axis_off()
    ax.set_xlim(*lay.xlim)
    ax.set_ylim(*lay.ylim)
    ax.set_aspect("equal", adjustable="box")
    dpi = float(ax.figure.dpi)
    ppu = _px_per_unit(ax, lay)
    for x, y, w, hh in lay.block_frame:
        ax.add_patch(
            Rectangle((x, y), w, hh, fill=False, edgecolor="0.6", lw=0.8, ls=":", zorder=0.5)
        )
    # Switches: boxes that hold their names at TEXT_PT (at most 2 x 0.6 units).
    sw = lay.node_xy[lay.switches]
    sw_names = [str(topo.node_names[n]).rsplit("/", 1)[-1] for n in lay.switches]
    text_px = _text_width_px(max((len(n) for n in sw_names), default=4), dpi)
    half_w = min(1.0, (text_px + 12.0) / 2 / ppu)
    half_h = min(0.3, (TEXT_PT * dpi / 72.0 + 8.0) / 2 / ppu)
    size = np.full((len(sw), 2), (2 * half_w, 2 * half_h))
    ax.add_collection(
        PolyCollection(
            _rects(np.column_stack([sw - (half_w, half_h), size])),
            facecolors=[SWITCH],
            edgecolors="none",
            zorder=2,
        )
    )
    for name, (x, y) in zip(sw_names, sw, strict=True):
        if _text_width_px(len(name), dpi) <= ppu * 2 * half_w:
            ax.text(x, y, name, ha="center", va="center", color="w", fontsize=TEXT_PT, zorder=3)
    sb = lay.server_box
    ax.add_collection(
        PolyCollection(_rects(sb), facecolors="white", edgecolors="0.35", linewidths=0.8, zorder=2)
    )
    if not agg:
        labels = server_labels(topo)
        if max(_text_width_px(len(n), dpi) for n in labels) <= ppu * sb[0, 2]:
            for s, name in enumerate(labels):
                x, y, w, _ = sb[s]
                ax.text(
                    x + w / 2, y - 0.06, name, ha="center", va="top", fontsize=TEXT_PT, color="0.3"
                )
    return lay


def draw_state(
    ax: Any,
    state: ClusterState,
    lay: PlacementLayout,
    *,
    new_jobs: Mapping[str, int] | Collection[str] | None = None,
    chosen: Sequence[int] = (),
    legend: bool | Any = True,
    max_legend_jobs: int = 16,
) -> list[Any]:
    """Draw what changes with the state over :func:`draw_topology`'s picture.

    Arguments as :func:`draw_placement`'s; ``lay`` is :func:`draw_topology`'s result.

    Returns:
        The artists added (remove them to draw the next state over the same topology).
    """
    from matplotlib.collections import LineCollection

    before = set(ax.get_children())
    dpi = float(ax.figure.dpi)
    ppu = _px_per_unit(ax, lay)
    h = state.health
    jc = _job_colours(state, new_jobs)
    # Links, coloured by the rings crossing them; dashed when degraded or failure-prone.
    load = state.link_load[lay.link_child].astype(np.float64)
    peak = max(2.0, float(load.max()) if len(load) else 2.0)
    reds = _colormap("Reds")
    colours = np.where(
        (load > 0)[:, None], reds(0.35 + 0.65 * load / peak), np.array([(0.62, 0.62, 0.62, 1.0)])
    )
    bad = (h.link_degradation[lay.link_child] < 1.0) | (h.link_fail_prob[lay.link_child] > 0)
    widths = np.where(load > 0, 1.2 + 2.3 * load / peak, 1.0)
    styles = ["--" if b else "-" for b in bad]
    ax.add_collection(
        LineCollection(
            list(lay.link_xy), colors=colours, linewidths=widths, linestyles=styles, zorder=1
        )
    )
    if lay.aggregate:
        _draw_servers_aggregated(ax, state, lay, jc, chosen, ppu, dpi)
    else:
        _draw_gpus(ax, state, lay, jc, chosen, ppu, dpi)
    added = [a for a in ax.get_children() if a not in before]
    if legend is not False:
        target = ax if isinstance(legend, bool) else legend
        added.append(
            _legend(target, state, jc, chosen, lay.aggregate, max_legend_jobs, target is ax)
        )
    return added


def draw_placement(
    state: ClusterState,
    ax: Any = None,
    *,
    new_jobs: Mapping[str, int] | Collection[str] | None = None,
    chosen: Sequence[int] = (),
    title: str | None = None,
    aggregate: bool | None = None,
    legend: bool | Any = True,
    max_legend_jobs: int = 16,
) -> Any:
    """Draw the placement picture of ``state`` (see the module docstring for what it shows).

    Example:
        >>> from crop_gym.envs.placement import PlacementEnv
        >>> env = PlacementEnv("testbed-8")
        >>> _ = env.reset(seed=0)
        >>> ax = draw_placement(env.state)
        >>> ax.figure.savefig("placement.png")  # doctest: +SKIP

    Args:
        state: The cluster state.
        ax: A matplotlib ``Axes`` to draw into; ``None`` makes a figure with
            :func:`new_placement_figure` and draws into its first axes.
        new_jobs: The jobs placed in this episode: job id → index (its colour and number), or a
            collection of job ids (numbered in order); other placed jobs are drawn as background.
            ``None``: every placed job is new.
        chosen: GPUs picked for the job being placed (gold).
        title: A title (monospace, left); ``None``: the topology, F and free GPUs; ``""``: none.
        aggregate: One bar per server; ``None``: when the cluster has more than
            :data:`AGGREGATE_ABOVE` GPUs.
        legend: ``True``: a legend (in the legend axes of a figure made here, else right of
            ``ax``); an ``Axes``: the legend is drawn there; ``False``: none.
        max_legend_jobs: At most this many episode jobs are listed (the latest); the rest are
            counted.

    Returns:
        The ``Axes`` drawn into (``ax.figure`` is the figure).
    """
    if ax is None:
        fig = new_placement_figure()
        ax = fig.axes[0]
        if legend is True:
            legend = fig.axes[1]
    lay = draw_topology(ax, state.topology, aggregate=aggregate)
    draw_state(
        ax,
        state,
        lay,
        new_jobs=new_jobs,
        chosen=chosen,
        legend=legend,
        max_legend_jobs=max_legend_jobs,
    )
    topo = state.topology
    if title is None:
        title = (
            f"{topo.name}: {topo.num_gpus} GPUs in {topo.num_servers} servers   "
            f"F = {state.F:.2f} effective GPUs   free {state.num_free}/{topo.num_gpus}"
        )
    if title:
        ax.set_title(title, loc="left", fontsize=TEXT_PT, family="monospace")
    return ax


def _draw_gpus(
    ax: Any,
    state: ClusterState,
    lay: PlacementLayout,
    jc: _JobColours,
    chosen: Sequence[int],
    ppu: float,
    dpi: float,
) -> None:
    """The GPU view: one cell per GPU; a job's number once per server it uses."""
    from matplotlib.collections import LineCollection, PolyCollection

    topo, h = state.topology, state.health
    face = np.tile(np.array(FREE), (topo.num_gpus, 1))
    first: list[tuple[int, str]] = []
    for j in state.placed_jobs():
        gp = state.placement(j.job_id)
        face[gp] = jc.colour[j.job_id]
        if j.job_id in jc.label:
            ok = gp[~h.gpu_failed[gp]]
            _, at = np.unique(topo.gpu_server[ok], return_index=True)
            first += [(int(ok[i]), jc.label[j.job_id]) for i in at]
    if len(chosen):
        face[np.asarray(chosen, dtype=np.intp)] = CHOSEN
    face[h.gpu_failed] = FAILED
    prone = h.gpu_fail_prob > 0
    edge = np.where(prone[:, None], np.array([PRONE]), np.array([(1.0, 1.0, 1.0, 1.0)]))
    lw = np.where(prone, max(1.5, min(3.0, 0.12 * ppu)), 0.4)
    cells = _rects(lay.gpu_cell)
    ax.add_collection(
        PolyCollection(cells, facecolors=face, edgecolors=edge, linewidths=lw, zorder=3)
    )
    slow = h.gpu_slowdown > 1.0
    if slow.any():
        ax.add_collection(
            PolyCollection(
                cells[slow],
                facecolors="none",
                edgecolors=[SLOW],
                linewidths=0.0,
                hatch="////",
                zorder=4,
            )
        )
    if h.gpu_failed.any():
        ax.add_collection(
            LineCollection(
                list(_crosses(lay.gpu_cell[h.gpu_failed])), colors="w", linewidths=1.5, zorder=5
            )
        )
    for g, text in first:
        x, y, w, hh = lay.gpu_cell[g]
        fs = _cell_text_size(ppu * w, dpi, len(text))
        if fs:
            ax.text(x + w / 2, y + hh / 2, text, ha="center", va="center", fontsize=fs, zorder=6)


def _draw_servers_aggregated(
    ax: Any,
    state: ClusterState,
    lay: PlacementLayout,
    jc: _JobColours,
    chosen: Sequence[int],
    ppu: float,
    dpi: float,
) -> None:
    """The aggregated view: one bar per server, split by job, with health counts."""
    from matplotlib.collections import PolyCollection

    topo, h = state.topology, state.health
    owner: list[str | None] = [None] * topo.num_gpus
    for j in state.placed_jobs():
        for g in state.placement(j.job_id):
            owner[int(g)] = j.job_id
    chosen_set = {int(g) for g in chosen}
    order = {jid: i for i, (_, jid) in enumerate(jc.new)}
    boxes: list[tuple[float, float, float, float]] = []
    face: list[tuple[float, float, float, float]] = []
    seg_labels: list[tuple[float, float, float, str]] = []
    counts: list[tuple[int, int, int, int]] = []
    inset = 0.1
    for s in range(topo.num_servers):
        x, y, w, hh = lay.server_box[s]
        lo, hi = int(topo.server_gpu_lo[s]), int(topo.server_gpu_hi[s])
        groups: dict[str, int] = {}
        n_chosen = n_failed = 0
        for g in range(lo, hi):
            if h.gpu_failed[g]:
                n_failed += 1
            elif g in chosen_set:
                n_chosen += 1
            elif (jid := owner[g]) is not None:
                groups[jid] = groups.get(jid, 0) + 1
        unit = (w - 2 * inset) / (hi - lo)
        cx = x + inset
        for jid in sorted(groups, key=lambda k: order.get(k, len(order))):
            boxes.append((cx, y + inset, unit * groups[jid], hh - 2 * inset))
            face.append(jc.colour[jid])
            if jid in jc.label:
                seg_labels.append(
                    (cx + unit * groups[jid] / 2, y + hh / 2, unit * groups[jid], jc.label[jid])
                )
            cx += unit * groups[jid]
        for n, col in (
            (n_chosen, CHOSEN),
            (hi - lo - n_failed - n_chosen - sum(groups.values()), FREE),
            (n_failed, FAILED),
        ):
            if n:
                boxes.append((cx, y + inset, unit * n, hh - 2 * inset))
                face.append(col)
                cx += unit * n
        sl = slice(lo, hi)
        counts.append(
            (n_failed, int((h.gpu_slowdown[sl] > 1).sum()), int((h.gpu_fail_prob[sl] > 0).sum()), s)
        )
    ax.add_collection(
        PolyCollection(
            _rects(np.array(boxes)), facecolors=face, edgecolors="w", linewidths=0.3, zorder=3
        )
    )
    sb = lay.server_box
    for cx, cy, wd, text in seg_labels:
        fs = _cell_text_size(wd * ppu, dpi, len(text))
        if fs:
            ax.text(cx, cy, text, ha="center", va="center", fontsize=fs, zorder=6)
    if _text_width_px(8, dpi) <= ppu * sb[0, 2]:  # "x1 !2 ?3"
        for n_failed, n_slow, n_prone, s in counts:
            parts = [
                f"x{n_failed}" if n_failed else "",
                f"!{n_slow}" if n_slow else "",
                f"?{n_prone}" if n_prone else "",
            ]
            text = " ".join(p for p in parts if p)
            if text:
                x, y, w, _ = sb[s]
                ax.text(
                    x + w / 2,
                    y - 0.06,
                    text,
                    ha="center",
                    va="top",
                    fontsize=TEXT_PT,
                    color="0.15",
                )


def _legend(
    ax: Any,
    state: ClusterState,
    jc: _JobColours,
    chosen: Sequence[int],
    agg: bool,
    max_jobs: int,
    outside: bool,
) -> Any:
    """Jobs (number: id model ×GPUs), background, free, health and links; returns the legend."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    jobs = {j.job_id: j for j in state.placed_jobs()}
    handles: list[Any] = []
    shown = jc.new[-max_jobs:] if max_jobs > 0 else []
    for i, jid in shown:
        j = jobs[jid]
        handles.append(
            Patch(facecolor=_palette(i), label=f"{i + 1}: {_short(jid)} {j.model} ×{j.num_gpus}")
        )
    if len(jc.new) > len(shown):
        handles.append(
            Patch(
                facecolor="none",
                edgecolor="none",
                label=f"… {len(jc.new) - len(shown)} more episode jobs",
            )
        )
    if jc.background:
        handles.append(
            Patch(facecolor=BACKGROUND[0], label=f"background job ({jc.background} running)")
        )
    handles.append(Patch(facecolor=FREE, label="free GPU"))
    if len(chosen):
        handles.append(Patch(facecolor=CHOSEN, label="chosen for the head job"))
    blank = Patch(facecolor="none", edgecolor="none")
    if agg:
        handles += [
            (Patch(facecolor=FAILED), Line2D([], [], marker="x", color="w", ls="", mew=1.2, ms=5)),
            blank,
            blank,
            blank,
        ]
        labels_h = [
            "failed GPUs (end of a server's bar)",
            "under a server, its GPUs that are:",
            "  xn failed  !n slow (σ > 1)",
            "  ?n failure-prone (π > 0)",
        ]
    else:
        handles += [
            Patch(facecolor=FREE, edgecolor=SLOW, hatch="////", lw=0),
            Patch(facecolor=FREE, edgecolor=PRONE, lw=2),
            (Patch(facecolor=FAILED), Line2D([], [], marker="x", color="w", ls="", mew=1.2, ms=5)),
        ]
        labels_h = ["slow GPU (σ > 1)", "failure-prone GPU (π > 0)", "failed GPU"]
    handles += [
        Line2D([], [], color=_link_red(), lw=2.5),
        Line2D([], [], color="0.62", lw=1.0, ls="--"),
    ]
    labels_h += ["link crossed by rings (darker: more)", "degraded / failure-prone link"]
    labels = [h.get_label() for h in handles[: len(handles) - len(labels_h)]] + labels_h
    kw: dict[str, Any] = {"fontsize": TEXT_PT, "handlelength": 1.6, "borderaxespad": 0.2}
    if outside:
        return ax.legend(
            handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, **kw
        )
    return ax.legend(
        handles,
        labels,
        loc="upper left",
        frameon=False,
        title="legend",
        title_fontsize=TEXT_PT,
        **kw,
    )


def _short(job_id: str, width: int = 12) -> str:
    """A job id cut to ``width`` characters (trace ids are UUIDs)."""
    return job_id if len(job_id) <= width else job_id[: width - 1] + "…"


def _link_red() -> tuple[float, float, float, float]:
    """The colour of a link crossed by many rings."""
    c: tuple[float, float, float, float] = _colormap("Reds")(0.85)
    return c
