"""Can the time model meet the Chronus target (spread penalties: MAE <= 0.05, rank agreement >= 0.95)?

Three rows, all scored by :func:`crop_gym.calibration.chronus_check` on the bundled Chronus data
(30 spread points of 20 (model, k) pairs):

* ``checked``: the shipped ElasticFlow A100 links and compute (nothing fitted to Chronus);
* ``fitted-1``: Chronus' own testbed fitted (:func:`crop_gym.calibration.chronus_fit.fit_chronus`):
  4 shared link parameters and 1 per model (compute time at the assumed local batch), ν = 1;
* ``fitted-2``: the same and a gradient-size scale per model (2 per model).

For the fitted rows it also reports a **leave-one-(model, k)-out** error: each pair's points
predicted by a fit that never saw them (the model's compute is still fitted from its other job
sizes), the honest figure for points the fit did not see.

Results go to docs/results/chronus_feasibility.{json,txt}. About 1 minute on 2 cores::

    python scripts/chronus_feasibility.py [--starts 24] [--loo-starts 8] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.calibration import chronus_check, load_chronus
from crop_gym.calibration.chronus_fit import ChronusFit, fit_chronus
from crop_gym.io import atomic_write_text
from crop_gym.model.jobs import calibration_data

ROOT = Path(__file__).resolve().parents[1]


def _spread_points(rows: Any) -> list[tuple[float, str, int, int]]:
    """``(|predicted - measured|, model, k, s)`` of every spread point (s > 1) of ``rows``."""
    return [
        (abs(p - m), r.model, r.gpus, s)
        for r in rows
        for s, p, m in zip(r.servers, r.predicted, r.measured, strict=True)
        if s > 1
    ]


def leave_one_out(grad_scale: bool, starts: int) -> dict[str, float]:
    """MAE and rank agreement of each (model, k) predicted by a fit without it."""
    data = load_chronus()
    errors: list[float] = []
    matches = []
    for model in sorted(data):
        for k in sorted(data[model]):
            train = {
                m: {kk: v for kk, v in ks.items() if (m, kk) != (model, k)}
                for m, ks in data.items()
            }
            train = {m: ks for m, ks in train.items() if ks}
            fit = fit_chronus(grad_scale=grad_scale, data=train, starts=starts, seed=1)
            rows, _, _ = chronus_check(
                "hierarchical",
                fit.links,
                fit.coefficients,
                data={model: {k: data[model][k]}},
                nic_sharing=fit.nic_sharing,
            )
            errors += [e for e, *_ in _spread_points(rows)]
            matches.append(rows[0].order_matches)
    return {
        "mean_abs_error": float(np.mean(errors)),
        "max_abs_error": float(np.max(errors)),
        "rank_agreement": float(np.mean(matches)),
    }


def _row(name: str, rows: Any, agreement: float, mae: float, params: str) -> dict[str, Any]:
    worst = max(_spread_points(rows))
    return {
        "variant": name,
        "params": params,
        "mean_abs_error": mae,
        "max_abs_error": float(worst[0]),
        "worst_point": f"{worst[1]} k={worst[2]} s={worst[3]}",
        "rank_agreement": agreement,
    }


def _fitted(name: str, fit: ChronusFit, loo: dict[str, float]) -> dict[str, Any]:
    n_models = len(fit.coefficients)
    row = _row(
        name,
        fit.comparisons,
        fit.rank_agreement,
        fit.mean_abs_error,
        f"{fit.shared_params} shared + {fit.per_model_params} x {n_models} models",
    )
    row["links"] = fit.links
    row["coefficients"] = fit.coefficients
    row["leave_one_out"] = loo
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--starts", type=int, default=24, help="random starts of the full fits")
    ap.add_argument("--loo-starts", type=int, default=8, help="random starts of each held-out fit")
    ap.add_argument("--out-dir", default=str(ROOT / "docs" / "results"))
    args = ap.parse_args(argv)
    if args.starts < 1 or args.loo_starts < 1:
        print("error: --starts and --loo-starts must be >= 1", file=sys.stderr)
        return 2
    shipped = calibration_data()
    rows, agreement, mae = chronus_check("hierarchical", shipped["links"], shipped["models"])
    out = [_row("checked", rows, agreement, mae, "0 (shipped A100 fit)")]
    for name, scale in (("fitted-1", False), ("fitted-2", True)):
        print(f"fitting {name} ...", file=sys.stderr)
        fit = fit_chronus(grad_scale=scale, starts=args.starts)
        out.append(_fitted(name, fit, leave_one_out(scale, args.loo_starts)))
    lines = [
        "Chronus spread penalties (30 points, 20 (model, k) pairs); target MAE <= 0.05, rank >= 0.95",
        f"{'variant':<10} {'fitted parameters':<28} {'MAE':>6} {'max':>6} {'rank':>5}  "
        f"{'held-out MAE':>12} {'held-out rank':>13}  worst point",
    ]
    for r in out:
        loo = r.get("leave_one_out")
        held = (
            f"{loo['mean_abs_error']:12.3f} {loo['rank_agreement']:13.2f}"
            if loo
            else f"{'n/a':>12} {'n/a':>13}"
        )
        lines.append(
            f"{r['variant']:<10} {r['params']:<28} {r['mean_abs_error']:6.3f} {r['max_abs_error']:6.3f} "
            f"{r['rank_agreement']:5.2f}  {held}  {r['worst_point']}"
        )
    for r in out[1:]:
        links = ", ".join(f"{k} {v:.3g}" for k, v in r["links"].items())
        lines.append(f"{r['variant']} links: {links}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "chronus_feasibility.txt", text)
    atomic_write_text(out_dir / "chronus_feasibility.json", json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
