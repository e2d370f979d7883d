"""Validate the iteration-time model against the Sia per-placement measurements (issue 12 targets).

For each Sia cluster it fits a hardware profile (crop_gym.calibration.fit) and prints:

* in sample (fit and score on every placements + scalability row): median / p90 |rel err|, per app;
* out of sample (fit on placements-<c>.csv, predict scalability-<c>.csv): the same, plus the rows
  whose placement no fitted row has ("novel");
* ordering: for the same application, local batch and GPU count, the share of pairs of multi-node
  placements whose measured step times differ by more than 5 % that the model orders right;
* fitted parameters; and a placement-sensitivity table (throughput of one 4-GPU job on 1, 2, 4 nodes
  relative to 1 node, predicted vs measured).

It also reports the ElasticFlow A100 fit and the Chronus check of the shipped defaults. Results go to
docs/results/sia_validation.{json,csv}; ``--write-profiles`` regenerates the bundled Sia profiles.

The data are not in the repository: ``--data`` names the folder of siasosp23/artifacts
``sia-simulator/traces`` (default ../shared/data/sia-profiles). The AWS files are never read.

    python scripts/validate_sia.py [--data DIR] [--clusters azure,rtx] [--write-profiles]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.calibration import fit_calibration
from crop_gym.calibration.fit import fit_profile, predict_step_time
from crop_gym.calibration.measurements import Measurements, load_measurements
from crop_gym.calibration.report import error_report
from crop_gym.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent.parent / "shared" / "data" / "sia-profiles"
SIA = (
    "Jayaram Subramanya et al., 'Sia: Heterogeneity-aware, goodput-optimized ML-cluster "
    "scheduling', SOSP 2023; measurements from siasosp23/artifacts sia-simulator/traces "
    "(commit aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70), files placements-{c}.csv and "
    "scalability-{c}.csv; constants fitted by scripts/validate_sia.py (crop_gym.calibration.fit)"
)
#: cluster suffix -> (profile name, GPU type, GPUs per node, hardware)
CLUSTERS: dict[str, tuple[str, str, int, str]] = {
    "azure": ("azure-v100", "v100", 8, "Azure ND40rs_v2, 8 x V100 per node"),
    "dgx-ext": ("dgx-a100", "a100", 8, "on-prem DGX-A100, 8 x NVLink A100 40 GB per node"),
    "dgx": ("dgx-a100-sparse", "a100", 8, "the same DGX-A100s, fewer batch sizes"),
    "rtx": ("rtx-2080ti", "rtx2080ti", 8, "on-prem, 8 x RTX 2080 Ti per node"),
    "quad": ("quadro-rtx6000", "rtx6000", 4, "on-prem, 4 x Quadro RTX 6000 (one node)"),
}
SHIPPED = ("azure", "dgx-ext", "rtx", "quad")
ORDER_MIN_DIFF = 0.05


def errors(pred: np.ndarray, m: Measurements) -> dict[str, Any]:
    return error_report(pred, m.step_time, m.app).to_mapping()


def key_of(m: Measurements) -> list[tuple[str, str, float]]:
    return [
        (str(a), "".join(str(int(v)) for v in p if v), float(b))
        for a, p, b in zip(m.app, m.placement, m.local_bsz)
    ]


def ordering(pred: np.ndarray, m: Measurements) -> dict[str, Any]:
    """Pairs of multi-node placements of the same app, batch and GPU count (measured differ > 5 %)."""
    groups: dict[tuple[str, float, int], list[int]] = {}
    multi = m.num_nodes >= 2
    for i in np.flatnonzero(multi):
        groups.setdefault((str(m.app[i]), float(m.local_bsz[i]), int(m.num_gpus[i])), []).append(i)
    right = total = 0
    for rows in groups.values():
        for x in range(len(rows)):
            for y in range(x + 1, len(rows)):
                i, j = rows[x], rows[y]
                ti, tj = m.step_time[i], m.step_time[j]
                if abs(ti - tj) <= ORDER_MIN_DIFF * min(ti, tj):
                    continue
                total += 1
                right += (pred[i] - pred[j]) * (ti - tj) > 0
    return {"pairs": total, "right": int(right), "accuracy": right / total if total else None}


def sensitivity(pred: np.ndarray, m: Measurements, k: int = 4) -> list[dict[str, Any]]:
    """Throughput of one k-GPU job on 1, 2, 4 nodes, relative to 1 node (mid local batch)."""
    spreads = {1: str(k), 2: str(k // 2) * 2, 4: "1" * 4}
    keys = key_of(m)
    index = {kk: i for i, kk in enumerate(keys)}
    out = []
    for app in np.unique(m.app):
        bs = sorted({kk[2] for kk in keys if kk[0] == app and kk[1] == spreads[1]})
        for b in bs[len(bs) // 2 : len(bs) // 2 + 1]:
            base = index.get((str(app), spreads[1], b))
            row: dict[str, Any] = {"app": str(app), "local_bsz": b}
            for n, pl in spreads.items():
                i = index.get((str(app), pl, b))
                if i is None or base is None:
                    row[f"{n}_nodes"] = None
                    continue
                row[f"{n}_nodes"] = {
                    "measured": float(m.step_time[base] / m.step_time[i]),
                    "predicted": float(pred[base] / pred[i]),
                }
            out.append(row)
    return out


def run_cluster(data: Path, cluster: str) -> tuple[dict[str, Any], Any]:
    name, gtype, gpn, hw = CLUSTERS[cluster]
    pl = load_measurements(data, cluster=cluster, kinds=("placements",))
    sc = load_measurements(data, cluster=cluster, kinds=("scalability",))
    both = Measurements.concatenate([pl, sc])
    citation = f"{hw}. " + SIA.format(c=cluster)
    full = fit_profile(both, gpus_per_node=gpn, gpu_type=gtype, name=name, citation=citation)
    pred_in = predict_step_time(full, both)
    heldout = fit_profile(pl, gpus_per_node=gpn, gpu_type=gtype, name=name, citation=citation)
    pred_out = predict_step_time(heldout, sc)
    fitted_keys = {kk[:2] for kk in key_of(pl)}
    novel = np.array([kk[:2] not in fitted_keys for kk in key_of(sc)])
    out_err = errors(pred_out, sc)
    if novel.any():
        out_err["novel"] = errors(pred_out[novel], sc.select(novel))
    result = {
        "cluster": cluster,
        "profile": name,
        "parameters": full.fit["parameters"],
        "shared": full.fit["shared"],
        "in_sample": errors(pred_in, both),
        "out_of_sample": out_err,
        "ordering": ordering(pred_in, both),
        "sensitivity": sensitivity(pred_in, both),
        "worst_in_sample": worst(pred_in, both),
        "fitted": {
            "fabric_GBps": full.fabric_bandwidth / 1e9,
            "nic_GBps": full.links[1].bandwidth / 1e9,
            "overlap": full.overlap,
            "compute_sharing": full.compute_sharing,
            "grad_MB": {m: v / 1e6 for m, v in full.grad_bytes.items()},
        },
    }
    return result, full


def worst(pred: np.ndarray, m: Measurements, n: int = 5) -> list[dict[str, Any]]:
    rel = pred / m.step_time - 1.0
    order = np.argsort(-np.abs(rel))[:n]
    return [
        {
            "source": str(m.source[i]).split("sia-profiles/")[-1],
            "placement": "".join(str(int(v)) for v in m.placement[i] if v),
            "local_bsz": float(m.local_bsz[i]),
            "measured": float(m.step_time[i]),
            "predicted": float(pred[i]),
            "rel_error": float(rel[i]),
        }
        for i in order
    ]


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--write-profiles", action="store_true")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"{args.data}: Sia measurement folder not found (see --data)", file=sys.stderr)
        return 2
    results = []
    for c in args.clusters.split(","):
        if c not in CLUSTERS:
            print(f"--clusters: {c!r} is not one of {', '.join(CLUSTERS)}", file=sys.stderr)
            return 2
        r, prof = run_cluster(args.data, c)
        results.append(r)
        if args.write_profiles and c in SHIPPED:
            dest = ROOT / "crop_gym" / "data" / "hardware" / f"{prof.name}.json"
            atomic_write_text(dest, prof.to_json())
    ef = fit_calibration("hierarchical")
    summary = {
        "clusters": results,
        "elasticflow_a100": {
            "median_abs_rel_error": ef.median_abs_rel_error,
            "chronus_mean_abs_error": ef.chronus_mean_abs_error,
            "chronus_rank_agreement": ef.chronus_rank_agreement,
            "chronus": "checked, not fitted (the latency-ratio constraint was chosen with it in view)",
        },
    }
    lines = [
        "| cluster | params | in-sample median | p90 | worst app | out-of-sample median | worst app "
        "| novel rows median | ordering (pairs) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ins, oos = r["in_sample"], r["out_of_sample"]
        wi = max(ins["per_app"].items(), key=lambda kv: kv[1]["median_abs_rel_error"])
        wo = max(oos["per_app"].items(), key=lambda kv: kv[1]["median_abs_rel_error"])
        nov = oos.get("novel")
        o = r["ordering"]
        lines.append(
            f"| {r['cluster']} | {r['parameters']} | {pct(ins['median_abs_rel_error'])} "
            f"| {pct(ins['p90_abs_rel_error'])} | {wi[0]} {pct(wi[1]['median_abs_rel_error'])} "
            f"| {pct(oos['median_abs_rel_error'])} | {wo[0]} {pct(wo[1]['median_abs_rel_error'])} "
            f"| {pct(nov['median_abs_rel_error']) + ' (' + str(nov['rows']) + ')' if nov else 'none'} "
            f"| {pct(o['accuracy'])} ({o['pairs']}) |"
        )
    lines.append("")
    lines.append("Per application, median |rel err| in sample / out of sample:")
    for r in results:
        ins, oos = r["in_sample"]["per_app"], r["out_of_sample"]["per_app"]
        lines.append(
            f"  {r['cluster']:8s} "
            + "  ".join(
                f"{a} {pct(v['median_abs_rel_error'])}/{pct(oos.get(a, {}).get('median_abs_rel_error'))}"
                for a, v in ins.items()
            )
        )
    lines.append("")
    lines.append("Placement sensitivity, 4-GPU job, throughput vs 1 node (predicted / measured):")
    for r in results:
        for s in r["sensitivity"]:
            cells = []
            for n in (2, 4):
                v = s[f"{n}_nodes"]
                cells.append(
                    f"{n} nodes {v['predicted']:.2f}/{v['measured']:.2f}" if v else f"{n} nodes n/a"
                )
            lines.append(
                f"  {r['profile']:16s} {s['app']:12s} b={s['local_bsz']:<6g} " + "  ".join(cells)
            )
    e = summary["elasticflow_a100"]
    lines.append("")
    lines.append(
        f"ElasticFlow A100 (a100-elasticflow): median {pct(e['median_abs_rel_error'])}; Chronus MAE "
        f"{e['chronus_mean_abs_error']:.3f}, rank agreement {e['chronus_rank_agreement']:.2f} ({e['chronus']})"
    )
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "sia_validation.json", json.dumps(summary, indent=2) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["cluster", "app", "split", "median_abs_rel_error", "p90_abs_rel_error", "rows"])
    for r in results:
        for split in ("in_sample", "out_of_sample"):
            blk = r[split]
            w.writerow(
                [
                    r["cluster"],
                    "all",
                    split,
                    blk["median_abs_rel_error"],
                    blk["p90_abs_rel_error"],
                    blk["rows"],
                ]
            )
            for a, v in blk["per_app"].items():
                w.writerow(
                    [
                        r["cluster"],
                        a,
                        split,
                        v["median_abs_rel_error"],
                        v["p90_abs_rel_error"],
                        v["rows"],
                    ]
                )
    atomic_write_text(args.out / "sia_validation.csv", buf.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
