"""Accuracy-estimator routes, judged offline on the cached ground truth of a workload.

    .venv/bin/python benchmarks/estimator_routes.py [--workload default] [--redraws 10]
        [--samples 40,50,60,70,80] [--routes xgboost/extended,xgboost-rank/extended,...]
        [--subset 1,0.5,0.25] [--json OUT.json]

Reads what ``sparseloom profile WORKLOAD --validate`` left in the profile cache: the table
(source accuracies, fidelities: the features) and ``truth-<task>.npz`` (every stitched
variant's exact metric). Nothing is measured, so it runs on a busy machine. Printed:

1. **Routes × N**: strict top-10 recall on the held-out variants (the headline figure of
   ``--validate``), mean over ``--redraws`` training draws (± the standard deviation of the
   draws), per task; ``random`` is what a random ranking scores on that many held-out
   variants (10 / held-out), because the held-out set shrinks as N grows; ``table`` is the
   top-10 recall over *all* V^S variants of what a policy reads (measured where measured,
   estimated elsewhere), comparable across N.
2. **Eval-row subsets**: the error a stratified subset of f of the eval rows adds to a
   training label, as the binomial standard error of the metric on f·n rows drawn from the n
   (finite-population corrected: ``sqrt(a(1-a)/(f n) · (1 - f))``), beside the gaps between
   the true top-10 variants; and the recall when that error is added, independently per
   variant, to the training labels (an upper bound: on shared rows the errors of two
   variants are positively correlated, so their order moves less).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sparseloom.core.cache import cache_dir
from sparseloom.profile.estimate import create_accuracy_estimator, fit_and_predict
from sparseloom.profile.features import sample_training_rows, stitched_features
from sparseloom.profile.metrics import spearman, top_k_recall
from sparseloom.profile.table import ProfileTable
from sparseloom.profile.validation import task_features

DEFAULT_ROUTES = ("xgboost/extended", "lightgbm/extended", "xgboost-rank/extended",
                  "xgboost-ndcg/extended", "lightgbm-rank/extended", "xgboost/paper",
                  "xgboost-rank/paper")
K = 10


def find_cached(workload: str) -> tuple[ProfileTable, dict[str, np.ndarray]]:
    """The newest cached table of ``workload`` and the ground truth of its tasks."""
    root = cache_dir() / "profiles" / workload
    tables = sorted(root.glob("*/table-*/profile.json"), key=lambda p: p.stat().st_mtime)
    if not tables:
        sys.exit(f"no cached profile table under {root}; run `sparseloom profile {workload} "
                 f"--validate` first")
    table = ProfileTable.load(tables[-1].parent)
    truth: dict[str, np.ndarray] = {}
    for name in table.tasks:
        found = sorted(root.glob(f"*/truth-{name}.npz"), key=lambda p: p.stat().st_mtime)
        if not found:
            sys.exit(f"no ground truth for task {name!r} under {root}; run `sparseloom profile "
                     f"{workload} --validate` first")
        with np.load(found[-1]) as data:
            truth[name] = np.asarray(data["truth"], dtype=np.float64)
    return table, truth


def eval_rows(workload: str) -> dict[str, int]:
    """Eval-set size of every task (for the binomial error of a subset)."""
    from sparseloom.api import load_workload

    return {task.name: int(task.num_eval) for task in load_workload(workload, progress=False).tasks}


def judge(profile: Any, truth: np.ndarray, estimator: str, feature_set: str, n: int,
          seed: int, label_error: float = 0.0) -> dict[str, float]:
    """One training draw: held-out top-10 recall, Spearman ρ, table top-10 recall."""
    features = task_features(profile)
    v, s = features.n_variants, features.n_positions
    choices = np.stack(np.unravel_index(np.arange(truth.size), (v,) * s), axis=-1)
    x = stitched_features(features, choices, feature_set)
    train = sample_training_rows(v, s, n, seed)
    test = np.setdiff1d(np.arange(truth.size), train)
    labels = truth.copy()
    if label_error > 0:
        noise = np.random.default_rng(seed + 1000).normal(0, 1, truth.size)
        labels = np.clip(truth + noise * np.sqrt(np.clip(truth * (1 - truth), 0, None))
                         * label_error, 0, 1)
    model, registration = create_accuracy_estimator(estimator, seed)
    predicted = fit_and_predict(model, registration, x[train], labels[train], x)
    table = predicted.copy()
    table[train] = labels[train]
    return {"recall": top_k_recall(truth[test], predicted[test], K),
            "spearman": spearman(truth[test], predicted[test]),
            "table_recall": top_k_recall(truth, table, K),
            "random": min(1.0, K / test.size)}


def routes_table(table: ProfileTable, truth: dict[str, np.ndarray], routes: list[str],
                 samples: list[int], redraws: int) -> list[dict[str, Any]]:
    """Every route × N × task, averaged over the redraws."""
    rows = []
    for route in routes:
        estimator, feature_set = route.split("/")
        for n in samples:
            row: dict[str, Any] = {"route": route, "n": n, "tasks": {}}
            for name, values in truth.items():
                draws = [judge(table.task(name), values, estimator, feature_set, n, seed)
                         for seed in range(redraws)]
                recall = np.array([d["recall"] for d in draws])
                row["tasks"][name] = {
                    "recall": float(recall.mean()), "recall_sd": float(recall.std()),
                    "min_draw": float(recall.min()),
                    "spearman": float(np.nanmean([d["spearman"] for d in draws])),
                    "table_recall": float(np.mean([d["table_recall"] for d in draws])),
                    "random": draws[0]["random"]}
            tasks = row["tasks"].values()
            row["mean"] = float(np.mean([t["recall"] for t in tasks]))
            row["worst"] = float(np.min([t["recall"] for t in tasks]))
            row["table_mean"] = float(np.mean([t["table_recall"] for t in tasks]))
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def format_row(row: dict[str, Any]) -> str:
    """One markdown table row: route, N, per-task recall (± sd), mean, worst, table, random."""
    cells = [f"{t['recall']:.1%} ±{t['recall_sd']:.0%}" for t in row["tasks"].values()]
    random = next(iter(row["tasks"].values()))["random"]
    return (f"| {row['route']} | {row['n']} | " + " | ".join(cells) +
            f" | **{row['mean']:.1%}** | {row['worst']:.1%} | {row['table_mean']:.1%} | "
            f"{random:.0%} |")


def subset_gaps(truth: dict[str, np.ndarray], rows: dict[str, int], fractions: list[float]
                ) -> list[dict[str, Any]]:
    """Per task: the true top-10's spread and gaps against the binomial error of subsets."""
    out = []
    for name, values in truth.items():
        top = np.sort(values)[::-1][:K + 1]
        best = float(top[0])
        entry = {"task": name, "eval_rows": rows.get(name), "top1": best,
                 "top1_minus_top10": float(top[0] - top[K - 1]),
                 "top10_minus_11th": float(top[K - 1] - top[K]),
                 "median_gap": float(np.median(-np.diff(top))), "errors": {}}
        n = rows.get(name)
        for fraction in fractions:
            if n:
                se = math.sqrt(best * (1 - best) / (fraction * n) * max(1 - fraction, 0.0))
                entry["errors"][str(fraction)] = {"rows": round(fraction * n), "se": se}
        out.append(entry)
        print(f"| {name} | {n} | {best:.2%} | {entry['top1_minus_top10'] * 100:.2f} pp | "
              f"{entry['median_gap'] * 100:.2f} pp | " + " | ".join(
                  f"{e['rows']} rows: ±{e['se'] * 100:.2f} pp" for e in entry["errors"].values())
              + " |", flush=True)
    return out


def subset_recall(table: ProfileTable, truth: dict[str, np.ndarray], rows: dict[str, int],
                  route: str, samples: list[int], fractions: list[float], redraws: int
                  ) -> list[dict[str, Any]]:
    """Held-out top-10 recall when training labels carry a subset's sampling error."""
    estimator, feature_set = route.split("/")
    out = []
    for n in samples:
        for fraction in fractions:
            recalls = {}
            for name, values in truth.items():
                count = rows.get(name) or 0
                error = (math.sqrt(max(1 - fraction, 0.0) / (fraction * count))
                         if count and fraction < 1 else 0.0)
                recalls[name] = float(np.mean([
                    judge(table.task(name), values, estimator, feature_set, n, seed,
                          label_error=error)["recall"] for seed in range(redraws)]))
            mean = float(np.mean(list(recalls.values())))
            out.append({"route": route, "n": n, "fraction": fraction, "tasks": recalls,
                        "mean": mean, "relative_cost": n * fraction / 50})
            print(f"| {route} | {n} | {fraction:g} | {n * fraction / 50:.2f} | " + " | ".join(
                f"{r:.1%}" for r in recalls.values()) + f" | **{mean:.1%}** |", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the route tables (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--redraws", type=int, default=10)
    parser.add_argument("--samples", default="40,50,60,70,80")
    parser.add_argument("--routes", default=",".join(DEFAULT_ROUTES))
    parser.add_argument("--subset", default="1,0.5,0.25",
                        help="eval-row fractions for the subset-error experiment ('' skips)")
    parser.add_argument("--subset-route", default="xgboost/extended")
    parser.add_argument("--subset-samples", default="50,80")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    table, truth = find_cached(args.workload)
    samples = [int(n) for n in args.samples.split(",")]
    names = " | ".join(truth)
    print(f"## Strict top-10 recall on held-out variants ({args.redraws} draws)\n")
    print(f"| route | N | {names} | mean | worst | table | random |")
    print("|---" * (6 + len(truth)) + "|")
    result: dict[str, Any] = {"routes": routes_table(table, truth, args.routes.split(","),
                                                     samples, args.redraws)}
    if args.subset:
        fractions = [float(f) for f in args.subset.split(",")]
        rows = eval_rows(args.workload)
        print("\n## Sampling error of an eval-row subset vs the true top-10 gaps\n")
        print("| task | eval rows | best | top-1 − top-10 | median gap | " +
              " | ".join(f"f = {f:g}" for f in fractions) + " |")
        print("|---" * (5 + len(fractions)) + "|")
        result["subset_gaps"] = subset_gaps(truth, rows, fractions)
        print(f"\n## Held-out top-10 recall with subset label error ({args.redraws} draws)\n")
        print(f"| route | N | f | cost vs N=50 full | {names} | mean |")
        print("|---" * (5 + len(truth)) + "|")
        result["subset_recall"] = subset_recall(
            table, truth, rows, args.subset_route,
            [int(n) for n in args.subset_samples.split(",")], fractions, args.redraws)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
