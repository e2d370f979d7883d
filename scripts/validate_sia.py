"""Validate the iteration-time model against the Sia per-placement measurements (issue 12 targets).

For each Sia cluster it fits a hardware profile (crop_gym.calibration.fit) and prints:

* in sample (fit and score on every placements + scalability row): median / p90 |rel err|, per app;
* out of sample (fit on placements-<c>.csv, predict scalability-<c>.csv): the same, plus the rows
  whose placement no fitted row has ("novel");
* ordering: for the same application, local batch and GPU count, the share of pairs of two
  different multi-node placements whose measured step times differ by more than 5 % that the model
  orders right (also for pairs differing by more than the repeat noise, below);
* repeat noise: the same DGX-A100s were measured twice (``dgx`` and ``dgx-ext``); on the rows
  measured independently in both (identical values are copies, left out) the median and p90
  difference, and how often the repeat orders a pair the way the first measurement does (the
  ceiling of any model's ordering accuracy);
* the compute variants of :func:`fit_profile` (``measured``: curve through the 1-GPU rows;
  ``affine``: fitted ``t0 + per_sample · b``; ``mixed``: per application the better of the two on
  the fitted rows); :data:`SHIPPED` says which variant each bundled profile is;
* fitted parameters; and a placement-sensitivity table (throughput of one 4-GPU job on 1, 2, 4 nodes
  relative to 1 node, predicted vs measured).

It also reports the ElasticFlow A100 fit and the Chronus check of the shipped defaults. Results go to
docs/results/sia_validation.{json,csv}; ``--write-profiles`` regenerates the bundled Sia profiles.

The data are not in the repository: ``--data`` names the folder of siasosp23/artifacts
``sia-simulator/traces`` (default ../shared/data/sia-profiles). The AWS files are never read.

    python scripts/validate_sia.py [--data DIR] [--clusters azure,rtx] [--variants mixed] [--merge]
        [--write-profiles]
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
#: The clusters whose fit is shipped as a bundled profile, and the compute variant shipped: "mixed"
#: (each application the better of its two curves on the fitted rows) where it fits better in
#: sample; azure keeps "measured" (mixed: same median, ordering 81 % -> 77 %); quad keeps
#: "measured" (1.8 %; the affine curves are worse on every application but one).
SHIPPED: dict[str, str] = {
    "azure": "measured",
    "dgx-ext": "mixed",
    "rtx": "mixed",
    "quad": "measured",
}
ORDER_MIN_DIFF = 0.05
VARIANTS = ("measured", "affine", "mixed")
#: Rows neither fitted nor scored (reported apart): another regime, not a placement effect.
#: azure imagenet on >= 3 nodes (all of scalability-azure.csv): sync grows linearly with the batch
#: (input I/O over the network, we suspect); (2,2,2) at b=600 takes 5.28 s, 22 at b=600 1.33 s.
OUTLIERS = {"azure": (("imagenet", "scalability", 3),)}


def outlier_mask(m: Measurements, cluster: str) -> np.ndarray:
    """Rows of ``m`` in a documented outlier regime of ``cluster`` (:data:`OUTLIERS`)."""
    bad = np.zeros(len(m), dtype=bool)
    for app, kind, nodes in OUTLIERS.get(cluster, ()):
        bad |= (m.app == app) & (m.kind == kind) & (m.num_nodes >= nodes)
    return bad


def errors(pred: np.ndarray, m: Measurements) -> dict[str, Any]:
    return error_report(pred, m.step_time, m.app).to_mapping()


def key_of(m: Measurements) -> list[tuple[str, str, float]]:
    return [
        (str(a), "".join(str(int(v)) for v in p if v), float(b))
        for a, p, b in zip(m.app, m.placement, m.local_bsz)
    ]


def order_pairs(m: Measurements, min_diff: float = ORDER_MIN_DIFF) -> list[tuple[int, int]]:
    """Pairs of rows: two different multi-node placements of the same app, batch and GPU count
    whose measured step times differ by more than ``min_diff`` (the same placement measured twice
    is not a pair of placements)."""
    groups: dict[tuple[str, float, int], list[int]] = {}
    for i in np.flatnonzero(m.num_nodes >= 2):
        groups.setdefault((str(m.app[i]), float(m.local_bsz[i]), int(m.num_gpus[i])), []).append(i)
    out = []
    for rows in groups.values():
        for x in range(len(rows)):
            for y in range(x + 1, len(rows)):
                i, j = rows[x], rows[y]
                ti, tj = m.step_time[i], m.step_time[j]
                if np.array_equal(m.placement[i], m.placement[j]):
                    continue
                if abs(ti - tj) > min_diff * min(ti, tj):
                    out.append((i, j))
    return out


def ordering(pred: np.ndarray, m: Measurements, min_diff: float = ORDER_MIN_DIFF) -> dict[str, Any]:
    """The share of :func:`order_pairs` the prediction orders like the measurement."""
    pairs = order_pairs(m, min_diff)
    right = sum((pred[i] - pred[j]) * (m.step_time[i] - m.step_time[j]) > 0 for i, j in pairs)
    n = len(pairs)
    return {"pairs": n, "right": int(right), "accuracy": right / n if n else None}


def repeat_noise(data: Path) -> dict[str, Any]:
    """The DGX-A100s measured twice (dgx, dgx-ext): noise of a row and the ordering ceiling."""
    a = load_measurements(data, cluster="dgx-ext")
    b = load_measurements(data, cluster="dgx")
    first = {kk: float(t) for kk, t in zip(key_of(b), b.step_time)}
    other = [first.get(kk) for kk in key_of(a)]
    common = np.array([t is not None for t in other])
    tb = np.array([t if t is not None else np.nan for t in other])
    indep = common & (tb != a.step_time)
    diff = np.abs(a.step_time[indep] / tb[indep] - 1.0)
    out: dict[str, Any] = {
        "common_rows": int(common.sum()),
        "identical_rows": int((common & ~indep).sum()),
        "independent_rows": int(indep.sum()),
        "median_abs_rel_diff": float(np.median(diff)),
        "p90_abs_rel_diff": float(np.quantile(diff, 0.9)),
    }
    pairs = [(i, j) for i, j in order_pairs(a) if indep[i] and indep[j]]
    right = sum((tb[i] - tb[j]) * (a.step_time[i] - a.step_time[j]) > 0 for i, j in pairs)
    out["repeat_orders_pairs"] = {"pairs": len(pairs), "accuracy": right / len(pairs)}
    return out


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


def run_cluster(
    data: Path, cluster: str, compute: str = "measured", noise: float | None = None
) -> tuple[dict[str, Any], Any]:
    name, gtype, gpn, hw = CLUSTERS[cluster]
    pl = load_measurements(data, cluster=cluster, kinds=("placements",))
    sc_all = load_measurements(data, cluster=cluster, kinds=("scalability",))
    all_rows = Measurements.concatenate([pl, sc_all])
    bad_all = outlier_mask(all_rows, cluster)
    both = all_rows.select(~bad_all)
    sc = sc_all.select(~outlier_mask(sc_all, cluster))
    pl = pl.select(~outlier_mask(pl, cluster))
    citation = f"{hw}. " + SIA.format(c=cluster)
    kw = dict(gpus_per_node=gpn, gpu_type=gtype, name=name, citation=citation, compute=compute)
    full = fit_profile(both, **kw)  # type: ignore[arg-type]
    pred_in = predict_step_time(full, both)
    heldout = fit_profile(pl, **kw)  # type: ignore[arg-type]
    pred_out = predict_step_time(heldout, sc)
    fitted_keys = {kk[:2] for kk in key_of(pl)}
    novel = np.array([kk[:2] not in fitted_keys for kk in key_of(sc)])
    out_err = errors(pred_out, sc)
    if novel.any():
        out_err["novel"] = errors(pred_out[novel], sc.select(novel))
    result = {
        "cluster": cluster,
        "profile": name,
        "compute": compute,
        "parameters": full.fit["parameters"],
        "shared": full.fit["shared"],
        "in_sample": errors(pred_in, both),
        "out_of_sample": out_err,
        "ordering": ordering(pred_in, both),
        "ordering_beyond_noise": None if noise is None else ordering(pred_in, both, noise),
        "sensitivity": sensitivity(pred_in, both),
        "worst_in_sample": worst(pred_in, both),
        "fitted": {
            "fabric_GBps": full.fabric_bandwidth / 1e9,
            "nic_GBps": full.links[1].bandwidth / 1e9,
            "overlap": full.overlap,
            "step_latency_ms": full.step_latency * 1e3,
            "compute_sharing": full.compute_sharing,
            "model_compute_sharing": dict(full.model_compute_sharing),
            "compute_scale": dict(full.fit.get("compute_scale", {})),
            "grad_MB": {m: v / 1e6 for m, v in full.grad_bytes.items()},
        },
    }
    if bad_all.any():
        out_rows = all_rows.select(bad_all)
        result["outliers"] = {
            "rule": [list(r) for r in OUTLIERS[cluster]],
            **errors(predict_step_time(full, out_rows), out_rows),
            "rows_named": sorted(
                {str(s).split("sia-profiles/")[-1].split(":")[0] for s in out_rows.source}
            ),
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
    ap.add_argument("--variants", default=",".join(VARIANTS), help="compute variants to run")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the (cluster, variant) results of OUT/sia_validation.json that this run does not redo",
    )
    ap.add_argument(
        "--merge-from",
        type=Path,
        action="append",
        default=[],
        help="also keep the results of this sia_validation.json (repeatable; --clusters '' only merges)",
    )
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"{args.data}: Sia measurement folder not found (see --data)", file=sys.stderr)
        return 2
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            print(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
    noise = repeat_noise(args.data)
    results = []
    for c in [c for c in args.clusters.split(",") if c]:
        if c not in CLUSTERS:
            print(f"--clusters: {c!r} is not one of {', '.join(CLUSTERS)}", file=sys.stderr)
            return 2
        for v in variants:
            r, prof = run_cluster(args.data, c, v, noise["p90_abs_rel_diff"])
            results.append(r)
            print(f"  fitted {c} ({v})", file=sys.stderr, flush=True)
            if args.write_profiles and SHIPPED.get(c) == v:
                dest = ROOT / "crop_gym" / "data" / "hardware" / f"{prof.name}.json"
                atomic_write_text(dest, prof.to_json())
    earlier = [args.out / "sia_validation.json"] if args.merge else []
    earlier += args.merge_from
    done = {(r["cluster"], r["compute"]) for r in results}
    for path in reversed(earlier):  # later files win over earlier ones, this run over all
        if not path.is_file():
            continue
        for r in json.loads(path.read_text())["clusters"]:
            if (r["cluster"], r["compute"]) not in done:
                results.append(r)
                done.add((r["cluster"], r["compute"]))
    order = {c: i for i, c in enumerate(CLUSTERS)}
    results.sort(key=lambda r: (order[r["cluster"]], VARIANTS.index(r["compute"])))
    ef = fit_calibration("hierarchical")
    summary = {
        "repeat_noise_dgx": noise,
        "clusters": results,
        "elasticflow_a100": {
            "median_abs_rel_error": ef.median_abs_rel_error,
            "chronus_mean_abs_error": ef.chronus_mean_abs_error,
            "chronus_rank_agreement": ef.chronus_rank_agreement,
            "chronus": "checked, not fitted (the latency-ratio constraint was chosen with it in view)",
        },
    }
    lines = [
        "| cluster | compute | params | in-sample median | p90 | worst app | out-of-sample median "
        f"| worst app | novel rows median | ordering (pairs) | ordering > {pct(noise['p90_abs_rel_diff'])} (pairs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ins, oos = r["in_sample"], r["out_of_sample"]
        wi = max(ins["per_app"].items(), key=lambda kv: kv[1]["median_abs_rel_error"])
        wo = max(oos["per_app"].items(), key=lambda kv: kv[1]["median_abs_rel_error"])
        nov = oos.get("novel")
        o, on = r["ordering"], r["ordering_beyond_noise"]
        lines.append(
            f"| {r['cluster']} | {r['compute']} | {r['parameters']} | {pct(ins['median_abs_rel_error'])} "
            f"| {pct(ins['p90_abs_rel_error'])} | {wi[0]} {pct(wi[1]['median_abs_rel_error'])} "
            f"| {pct(oos['median_abs_rel_error'])} | {wo[0]} {pct(wo[1]['median_abs_rel_error'])} "
            f"| {pct(nov['median_abs_rel_error']) + ' (' + str(nov['rows']) + ')' if nov else 'none'} "
            f"| {pct(o['accuracy'])} ({o['pairs']}) | {pct(on['accuracy'])} ({on['pairs']}) |"
        )
    lines.append("")
    lines.append("Per application, median |rel err| in sample / out of sample:")
    for r in results:
        ins, oos = r["in_sample"]["per_app"], r["out_of_sample"]["per_app"]
        lines.append(
            f"  {r['cluster']:8s} {r['compute']:8s} "
            + "  ".join(
                f"{a} {pct(v['median_abs_rel_error'])}/{pct(oos.get(a, {}).get('median_abs_rel_error'))}"
                for a, v in ins.items()
            )
        )
    lines.append("")
    lines.append("Placement sensitivity, 4-GPU job, throughput vs 1 node (predicted / measured):")
    for r in results:
        if SHIPPED.get(r["cluster"], VARIANTS[0]) != r["compute"]:
            continue
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
    lines.append("")
    rn = noise["repeat_orders_pairs"]
    lines.append(
        f"Repeat noise (dgx vs dgx-ext, {noise['independent_rows']} independent rows of "
        f"{noise['common_rows']} common; {noise['identical_rows']} identical copies left out): median "
        f"{pct(noise['median_abs_rel_diff'])}, p90 {pct(noise['p90_abs_rel_diff'])}; the repeat orders "
        f"{pct(rn['accuracy'])} of {rn['pairs']} dgx-ext pairs right"
    )
    for r in results:
        if "outliers" in r and SHIPPED.get(r["cluster"]) == r["compute"]:
            o = r["outliers"]
            lines.append(
                f"Outliers left out ({r['cluster']}: {o['rule']}, {o['rows']} rows of "
                f"{', '.join(o['rows_named'])}): median {pct(o['median_abs_rel_error'])} on them"
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
    w.writerow(
        ["cluster", "compute", "app", "split", "median_abs_rel_error", "p90_abs_rel_error", "rows"]
    )
    for r in results:
        for split in ("in_sample", "out_of_sample"):
            blk = r[split]
            w.writerow(
                [
                    r["cluster"],
                    r["compute"],
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
                        r["compute"],
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
