"""Regenerate the figures of docs/figures (docs/figures/README.md lists what each one is).

    python scripts/make_figures.py                 # all of them
    python scripts/make_figures.py --only traces   # the trace-study bars and JCT CDFs
    python scripts/make_figures.py --only placement
    python scripts/make_figures.py --only cli      # crop-gym compare --plot / simulate --plot
    python scripts/make_figures.py --out DIR       # somewhere else than docs/figures

* ``traces``: ``study_<setting>_bars.png`` and ``study_<setting>_jct_cdf.png`` from the stored
  runs of the full trace study, ``docs/results/study/results.json`` (no simulation is re-run;
  :func:`crop_gym.study.figures.write_setting_figures`; ``scripts/publish_study.py`` draws the
  same figures when it rewrites docs/RESULTS.md).
* ``placement``: ``placement_{8,64,1024}.png`` (static envs) and ``placement_online_64.png``: the
  ``rgb_array`` frame of a seeded episode after a few placements (first valid action each step).
* ``cli``: ``compare_default.png`` (``crop-gym compare --seeds 5 --plot``) and
  ``simulate_cluster10_severe.png`` (``crop-gym simulate ... --plot``), about a minute each.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIGURES = ROOT / "docs" / "figures"
STUDY_RESULTS = ROOT / "docs" / "results" / "study" / "results.json"
#: (file name, scenario, placements before the frame).
PLACEMENT_FRAMES = (
    ("placement_8.png", "testbed-8", 3),
    ("placement_64.png", "default-severe", 8),
    ("placement_1024.png", "n128g8", 60),
)
#: The ``crop-gym`` command lines of the ``cli`` figures (``{out}`` is the figure's path).
CLI_FIGURES = (
    ("compare_default.png", ["compare", "--scenario", "default", "--seeds", "5", "--no-progress"]),
    (
        "simulate_cluster10_severe.png",
        [
            "simulate",
            "--trace",
            "elasticflow:cluster10",
            "--cluster",
            "leafspine-64",
            "--policy",
            "crop",
            "--abnormal",
            "severe",
            "--jobs",
            "300",
            "--seed",
            "0",
            "--no-progress",
        ],
    ),
)


def trace_figures(out: Path) -> list[Path]:
    """The bars and JCT CDFs of every setting of docs/results/study/results.json."""
    import json

    from crop_gym.study.figures import write_setting_figures

    runs = json.loads(STUDY_RESULTS.read_text(encoding="utf-8"))["runs"]
    return write_setting_figures(runs, out, prefix="study_")


def _save_frame(frame: object, path: Path) -> Path:
    from matplotlib.image import imsave

    imsave(path, frame)
    return path


def placement_figures(out: Path) -> list[Path]:
    """Frames of the static envs at 8, 64 and 1,024 GPUs and of the online v1 env at 64."""
    import numpy as np

    from crop_gym.envs.online import OnlinePlacementEnv
    from crop_gym.envs.placement import PlacementEnv

    written = []
    for name, scenario, steps in PLACEMENT_FRAMES:
        env = PlacementEnv(scenario, render_mode="rgb_array")
        env.reset(seed=0)
        for _ in range(steps):
            valid = np.flatnonzero(env.action_masks()[:-1])
            if not len(valid):
                break
            env.step(int(valid[0]))
        written.append(_save_frame(env.render(), out / name))
        env.close()
    online = OnlinePlacementEnv(cluster="leafspine-64", render_mode="rgb_array")
    online.reset(seed=0)
    for _ in range(40):
        online.step(int(np.flatnonzero(online.action_masks())[0]))
    written.append(_save_frame(online.render(), out / "placement_online_64.png"))
    online.close()
    return written


def cli_figures(out: Path) -> list[Path]:
    """``crop-gym compare --plot`` and ``crop-gym simulate --plot`` on fixed arguments."""
    from crop_gym.cli import main as crop_gym

    written = []
    for name, argv in CLI_FIGURES:
        path = out / name
        if crop_gym([*argv, "--plot", str(path)]) != 0:
            raise SystemExit(f"crop-gym {' '.join(argv)} failed")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and write the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--only", choices=("traces", "placement", "cli"), action="append")
    p.add_argument("--out", type=Path, default=FIGURES, help="folder (default: docs/figures)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    kinds = args.only or ["traces", "placement", "cli"]
    makers = {"traces": trace_figures, "placement": placement_figures, "cli": cli_figures}
    for kind in kinds:
        for path in makers[kind](args.out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
