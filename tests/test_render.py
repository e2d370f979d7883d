"""The placement picture (crop_gym/envs/picture.py) and the envs' ``rgb_array`` frames.

Frames at 8, 64 and 1,024 GPUs for a static and an online env have the fixed shape and dtype and
are not blank; :func:`draw_placement` marks jobs, health and background as its legend says; the
renderer reuses one figure without piling up artists.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from crop_gym.envs import GPUPlacementEnv, PlacementEnv
from crop_gym.envs.online import OnlinePlacementEnv
from crop_gym.envs.picture import (
    AGGREGATE_ABOVE,
    FIGSIZE,
    draw_placement,
    placement_layout,
)
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology

SHAPE = (round(FIGSIZE[1] * 80), round(FIGSIZE[0] * 80), 3)


def _check_frame(frame: Any) -> None:
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.shape == SHAPE
    # Not blank: a good share of the pixels is drawn (not the white background).
    drawn = np.any(frame < 250, axis=2).mean()
    assert drawn > 0.05, drawn
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 20


def _placed_colours(frame: Any) -> int:
    """Distinct saturated colours in a frame (job colours; greys and white are not)."""
    f = frame.reshape(-1, 3).astype(int)
    sat = f.max(axis=1) - f.min(axis=1) > 60
    return len(np.unique(f[sat] // 16, axis=0))


@pytest.mark.parametrize(
    ("scenario", "gpus"), [("testbed-8", 8), ("default-severe", 64), ("n128g8", 1024)]
)
def test_static_env_frames(scenario: str, gpus: int) -> None:
    env = PlacementEnv(scenario, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.topology.num_gpus == gpus
    first = env.render()
    _check_frame(first)
    for _ in range(3):
        valid = np.flatnonzero(env.action_masks()[:-1])
        if not len(valid):
            break
        env.step(int(valid[0]))
    frame = env.render()
    _check_frame(frame)
    assert env.placed, "the test needs a placed job"
    assert not np.array_equal(frame, first)  # the picture follows the state
    assert _placed_colours(frame) > _placed_colours(first) or gpus > AGGREGATE_ABOVE
    env.close()


@pytest.mark.parametrize(
    ("cluster", "gpus"), [("testbed-8", 8), ("leafspine-64", 64), ("n128g8", 1024)]
)
def test_online_env_frames(cluster: str, gpus: int) -> None:
    env = OnlinePlacementEnv(cluster=cluster, window_jobs=24, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.topology.num_gpus == gpus
    _check_frame(env.render())
    for _ in range(12):
        valid = np.flatnonzero(env.action_masks())
        _, _, term, trunc, _ = env.step(int(valid[0]))
        if term or trunc:
            break
    frame = env.render()
    _check_frame(frame)
    env.close()


def test_gpu_mode_marks_chosen_gpus() -> None:
    env = GPUPlacementEnv("testbed-8", render_mode="rgb_array")
    env.reset(seed=1)
    before = env.render()
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    after = env.render()
    gold = np.all(np.abs(after.astype(int) - (255, 209, 0)) < 8, axis=2)
    assert gold.sum() > np.all(np.abs(before.astype(int) - (255, 209, 0)) < 8, axis=2).sum()


def _sick_state(name: str) -> ClusterState:
    """A state with two jobs, one failed, one slow and one failure-prone GPU."""
    topo = make_topology(name)
    g = topo.num_gpus
    slow, failed, prone = np.ones(g), np.zeros(g, bool), np.zeros(g)
    slow[5], failed[6], prone[7] = 2.0, True, 0.1
    health = Health(slow, failed, prone, np.ones(topo.num_nodes), np.zeros(topo.num_nodes))
    state = ClusterState(topo, health)
    state.add(Job("alpha", "resnet50", 4, 128), np.arange(4))
    state.add(Job("beta", "vgg16", 2, 64), np.array([4, 5]))
    return state


def _legend_texts(ax: Any) -> list[str]:
    legends = [a for a in ax.figure.findobj() if type(a).__name__ == "Legend"]
    assert len(legends) == 1
    return [t.get_text() for t in legends[0].get_texts()]


def test_draw_placement_gpu_view() -> None:
    state = _sick_state("leafspine-64")
    ax = draw_placement(state)
    texts = _legend_texts(ax)
    assert any("alpha resnet50 ×4" in t for t in texts) and any("beta vgg16 ×2" in t for t in texts)
    assert {"free GPU", "slow GPU (σ > 1)", "failure-prone GPU (π > 0)", "failed GPU"} <= set(texts)
    cells = [c for c in ax.collections if len(c.get_paths()) == state.topology.num_gpus]
    assert len(cells) == 1  # one cell per GPU
    assert any(c.get_hatch() for c in ax.collections)  # the slow GPU
    # Job numbers are written in the cells (the legend's "1: alpha …").
    assert {"1", "2"} <= {t.get_text() for t in ax.texts}
    assert "leafspine-64" in ax.get_title(loc="left")


def test_background_jobs_are_muted_and_counted() -> None:
    state = _sick_state("leafspine-64")
    ax = draw_placement(state, new_jobs={"beta": 0})
    texts = _legend_texts(ax)
    assert any(t.startswith("background job (1") for t in texts)
    assert not any("alpha" in t for t in texts)


def test_draw_placement_aggregates_large_clusters() -> None:
    state = _sick_state("n128g8")
    lay = placement_layout(state.topology, True)
    assert lay.aggregate and len(lay.server_box) == 128 and len(lay.gpu_cell) == 0
    ax = draw_placement(state)
    assert not any(len(c.get_paths()) == state.topology.num_gpus for c in ax.collections)
    texts = {t.get_text() for t in ax.texts}
    assert {"!1 ?1", "x1"} & texts or any("x1" in t for t in texts)  # health counts of server 0
    assert any("failed GPUs" in t for t in _legend_texts(ax))


def test_draw_into_a_given_axes() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    out = draw_placement(_sick_state("testbed-8"), ax, title="mine", legend=False)
    assert out is ax and ax.get_title(loc="left") == "mine" and ax.get_legend() is None


def test_renderer_reuses_one_figure() -> None:
    env = PlacementEnv("default", render_mode="rgb_array")
    env.reset(seed=0)
    env.render()
    fig = env._renderer._fig
    valid = np.flatnonzero(env.action_masks())
    env.step(int(valid[0]))
    env.render()
    n_artists = len(fig.axes[0].get_children())
    for _ in range(3):
        frame = env.render()  # the same state: nothing piles up
    assert env._renderer._fig is fig and len(fig.axes[0].get_children()) == n_artists
    clone = pickle.loads(pickle.dumps(env))
    assert clone.render().shape == frame.shape
    env.close()
    assert env._renderer._fig is None
