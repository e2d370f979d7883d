"""One look for every figure: how each policy is drawn, and a headless, atomic ``savefig``.

CROP is the subject of every comparison, so it is drawn on top (highest z-order), thick, solid
and red; its ablations (``crop-*``) are red-family and dashed; the references (``optimum``,
``min-comm``) are black/grey and dotted; the baselines take the other tab10 colours, thin and
solid. Bars use the same colours. matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crop_gym.io import atomic_write_bytes

__all__ = [
    "KIND_COLOURS",
    "REFERENCES",
    "bar_colours",
    "bar_legend_handles",
    "new_figure",
    "policy_kind",
    "policy_style",
    "save_figure",
]

#: Policies that are references (bounds), not placement policies to beat.
REFERENCES = ("optimum", "min-comm")
_ABLATION = ("tab:pink", "tab:brown", "tab:purple")
_BASELINE = ("tab:blue", "tab:green", "tab:orange", "tab:cyan", "tab:olive", "tab:gray")


def policy_kind(name: str) -> str:
    """``"crop"``, ``"ablation"`` (``crop-*``), ``"reference"`` or ``"baseline"``."""
    if name == "crop":
        return "crop"
    if name.startswith("crop"):
        return "ablation"
    if name in REFERENCES:
        return "reference"
    return "baseline"


def policy_style(name: str, names: Sequence[str]) -> dict[str, Any]:
    """Line keywords (``color``, ``lw``, ``ls``, ``zorder``) of policy ``name`` among ``names``.

    The colour of a baseline or ablation depends on its rank among the policies of its kind in
    ``names``, so that one figure never repeats a colour within a kind.
    """
    kind = policy_kind(name)
    if kind == "crop":
        return {"color": "tab:red", "lw": 2.8, "ls": "-", "zorder": 10}
    same = [n for n in names if policy_kind(n) == kind]
    rank = same.index(name) if name in same else 0
    if kind == "ablation":
        return {"color": _ABLATION[rank % 3], "lw": 1.6, "ls": "--", "zorder": 8}
    if kind == "reference":
        return {"color": ("black", "0.45")[rank % 2], "lw": 1.6, "ls": ":", "zorder": 9}
    return {"color": _BASELINE[rank % len(_BASELINE)], "lw": 1.2, "ls": "-", "zorder": 3}


#: Bar colour of each kind of policy (bars are labelled by policy on the x axis).
KIND_COLOURS = {
    "crop": "tab:red",
    "ablation": "lightcoral",
    "baseline": "tab:blue",
    "reference": "0.55",
}
_KIND_LABELS = {
    "crop": "CROP",
    "ablation": "CROP ablation",
    "baseline": "baseline",
    "reference": "reference (optimum / min-comm)",
}


def bar_colours(names: Sequence[str]) -> list[str]:
    """The bar colour of each policy (by its :func:`policy_kind`)."""
    return [KIND_COLOURS[policy_kind(n)] for n in names]


def bar_legend_handles(names: Sequence[str]) -> list[Any]:
    """Legend patches for :func:`bar_colours`: one per kind present in ``names``."""
    from matplotlib.patches import Patch

    kinds = dict.fromkeys(policy_kind(n) for n in names)
    return [Patch(facecolor=KIND_COLOURS[k], label=_KIND_LABELS[k]) for k in kinds]


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` with an Agg canvas (headless, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: float = 120) -> None:
    """Write ``fig`` to ``path`` atomically; the format follows the suffix (png, pdf, svg)."""
    buf = io.BytesIO()
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    fig.savefig(buf, format=fmt, dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
