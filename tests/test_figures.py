"""Issue 30, item 12: the figures people look at.

* the placement picture (notebook 04 and every ``rgb_array`` frame): at least 1,400 pixels wide,
  12 pt text, each server named once;
* notebook 06: one colour per policy in every figure;
* notebook 05: the learning curve has more than a handful of points and its bands stay on the axes;
* the study's JCT CDFs: CROP's thick line no longer hides a policy whose curve is the same.

Notebook cells are run here on small synthetic inputs (their real inputs take minutes to compute);
``tests/test_notebooks.py`` runs the notebooks themselves.
"""

from __future__ import annotations

import json
import re
import struct
import types
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from crop_gym.envs.picture import TEXT_PT, draw_placement, server_labels
from crop_gym.envs.placement import PlacementEnv
from crop_gym.model.topology import PRESETS, make_topology

ROOT = Path(__file__).resolve().parents[1]


def _cell(notebook: str, marker: str) -> str:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(cells) == 1, marker
    return "".join(cells[0]["source"])


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# ----------------------------------------------------------------- the placement picture
@pytest.mark.parametrize("scenario", ["testbed-8", "default", "pollux-16x4", "n64g8"])
def test_the_placement_picture_is_wide_with_12_pt_text(scenario: str) -> None:
    env = PlacementEnv(scenario)
    env.reset(seed=0)
    for action in np.flatnonzero(env.action_masks())[:3]:
        if not env.action_masks()[action]:
            break
        env.step(int(action))
    ax = draw_placement(env.state)
    fig = ax.figure
    fig.canvas.draw()
    width, _ = fig.canvas.get_width_height()
    assert width >= 1400
    drawn = [*fig.texts]
    for a in fig.axes:  # (the axes are off: their tick labels are not drawn)
        ticks = {id(t) for axis in (a.xaxis, a.yaxis) for t in axis.findobj(matplotlib.text.Text)}
        drawn += [t for t in a.findobj(matplotlib.text.Text) if id(t) not in ticks]
    texts = [t for t in drawn if t.get_text().strip()]
    assert len(texts) > 5
    in_cells = {str(i + 1) for i in range(200)}  # job numbers inside GPU cells fit their cell
    for t in texts:
        floor = 9.0 if t.get_text() in in_cells else TEXT_PT
        assert t.get_fontsize() >= floor, (t.get_text(), t.get_fontsize())
    topo = env.state.topology
    if topo.num_gpus <= 128:  # the GPU view names every server, each once
        shown = [t.get_text() for t in ax.texts]
        for label in server_labels(topo):
            assert shown.count(label) == 1, label


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_server_gets_its_own_label(preset: str) -> None:
    labels = server_labels(make_topology(preset))
    assert len(set(labels)) == len(labels)


def test_notebook_04_shows_the_picture_at_full_size() -> None:
    nb = json.loads((ROOT / "notebooks" / "04_gymnasium_environment.ipynb").read_text())
    import base64

    sizes = [
        _png_size(base64.b64decode(o["data"]["image/png"]))
        for c in nb["cells"]
        if c["cell_type"] == "code" and "rgb_array" in "".join(c["source"])
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert sizes and all(w >= 1400 for w, _ in sizes), sizes


# ----------------------------------------------------------------- notebook 06: colours
class _Result:
    def __init__(self, rng: np.random.Generator) -> None:
        self.records = {"jct_s": rng.exponential(3600.0, 50)}
        t = np.sort(rng.uniform(0, 3.6e5, 40))
        self.timeline = {
            "t": t,
            "busy": rng.uniform(0, 64, 40),
            "F": rng.uniform(0, 64, 40),
            "queued": rng.integers(0, 9, 40),
        }


def test_notebook_06_keeps_one_colour_per_policy() -> None:
    policies = ("crop", "crop-nonrobust", "best-fit", "first-fit")
    rng = np.random.default_rng(0)
    ns: dict[str, Any] = {
        "plt": plt,
        "np": np,
        "policies": policies,
        "results": {("severe", p, 0): _Result(rng) for p in policies},
        "cluster": types.SimpleNamespace(num_gpus=64),
    }
    colours: dict[str, set[str]] = {}
    for marker in ('ax.set_xscale("log")', "utilisation, F and queue over time"):
        exec(_cell("06_online_simulator.ipynb", marker), ns)
        for ax in plt.gcf().axes:
            for line in ax.get_lines():
                label = line.get_label()
                policy = label.split(":")[0]
                if policy in policies:
                    colours.setdefault(policy, set()).add(
                        matplotlib.colors.to_hex(line.get_color())
                    )
        plt.close("all")
    assert set(colours) == set(policies)
    assert all(len(c) == 1 for c in colours.values()), colours  # one colour per policy everywhere
    assert len({next(iter(c)) for c in colours.values()}) == len(policies)  # and distinct


# ----------------------------------------------------------------- notebook 05: learning curve
def test_notebook_05_learning_curve_has_points_and_keeps_its_bands_on_the_axes() -> None:
    setup = _cell("05_training_an_agent.ipynb", "common = dict(")
    steps = int(re.search(r"STEPS = (\d+)", setup).group(1))  # type: ignore[union-attr]
    every = int(re.search(r"eval_freq=(\d+)", setup).group(1))  # type: ignore[union-attr]
    assert steps // every + 1 >= 10  # validation points per curve, step 0 included
    rng = np.random.default_rng(1)
    x = np.arange(0, steps + 1, every)
    meta = {
        (m, s): {"curve": [{"steps": int(v), "gain_ratio_to_crop": float(y), "random_gain_ratio": 0.8}
                           for v, y in zip(x, rng.uniform(-0.5 if s == 1 else 0.9, 1.0, len(x)))]}
        for m in ("scratch", "bc+ppo")
        for s in (1, 2, 3)
    }  # fmt: skip
    ns: dict[str, Any] = {
        "plt": plt, "np": np, "io": __import__("io"), "meta": meta, "SEEDS": (1, 2, 3),
        "STEPS": steps, "ENV": "crop_gym/Placement-Testbed8-v0",
        "Image": lambda data: data, "display": lambda obj: None,
    }  # fmt: skip
    exec(_cell("05_training_an_agent.ipynb", "fill_between"), ns)
    ax = ns["ax"]
    low, high = ax.get_ylim()
    for _, mean, half in ns["curves"].values():
        assert len(mean) == len(x)
        assert low <= float(np.min(mean - half)) and float(np.max(mean + half)) <= high
    plt.close("all")


# ----------------------------------------------------------------- study CDFs
def _records(policy: str, scale: float) -> list[dict[str, Any]]:
    q = list(np.geomspace(600.0, 36_000.0, 101) * scale)
    return [
        {"trace": "t", "cluster": "n32g8", "hardware": "default", "jobs": None, "arrival_scale": 1.0,
         "sim": {}, "policy": policy, "abnormal": "mild", "seed": s, "jct_quantiles_s": q}
        for s in (0, 1, 2)
    ]  # fmt: skip


def _pixels_near(rgb: np.ndarray, colour: str, tol: int = 12) -> int:
    target = np.array(matplotlib.colors.to_rgb(colour)) * 255
    return int((np.abs(rgb[..., :3].astype(int) - target).max(axis=-1) <= tol).sum())


def test_crop_does_not_hide_a_policy_with_the_same_cdf() -> None:
    from crop_gym.plotting import policy_style
    from crop_gym.study.figures import jct_cdf_figure

    records = [*_records("crop", 1.0), *_records("crop-plain", 1.0), *_records("first-fit", 1.4)]
    fig = jct_cdf_figure(records)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())
    plain = policy_style("crop-plain", ["crop", "crop-plain", "first-fit"])["color"]
    first = policy_style("first-fit", ["crop", "crop-plain", "first-fit"])["color"]
    # crop-plain's curve is CROP's: its own colour must show, about as much as first-fit's does
    # (before, CROP's line on top covered it).
    assert _pixels_near(rgb, plain) > 0.5 * _pixels_near(rgb, first) > 0
