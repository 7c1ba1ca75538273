"""Plots of the profile validation report (matplotlib, Agg backend, PNG files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(report: dict[str, Any], out: Path) -> list[Path]:
    """Write the latency scatter and the recall-vs-K curves into ``out``; returns the paths."""
    from matplotlib.ticker import MaxNLocator

    from sparseloom.evaluation.plotting import pyplot, save_figure

    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    figure, axis = plt.subplots(figsize=(5, 5))
    low, high = float("inf"), 0.0
    for name, entry in report["tasks"].items():
        points = [p for p in entry["latency"].get("points", [])
                  if p["measured_ms"] is not None and p["estimated_ms"] is not None]
        if not points:
            continue
        measured = [p["measured_ms"] for p in points]
        estimated = [p["estimated_ms"] for p in points]
        low = min(low, *measured, *estimated)
        high = max(high, *measured, *estimated)
        mape = entry["latency"].get("mape")
        label = f"{name} (MAPE {mape:.1%})" if mape is not None else name
        axis.scatter(measured, estimated, s=14, alpha=0.7, label=label)
    if high > 0:
        axis.plot([low, high], [low, high], color="grey", linewidth=1, linestyle="--")
    axis.set_xlabel("measured end-to-end latency (ms)")
    axis.set_ylabel(f"estimated latency (ms), {report['estimators']['latency']}")
    axis.set_title(f"{report['workload']}: estimated vs measured chains")
    axis.legend(fontsize=8)
    written.append(save_figure(figure, out / "latency_scatter.png", dpi=120))

    figure, axis = plt.subplots(figsize=(6, 4))
    for name, entry in report["tasks"].items():
        curve = entry["accuracy"].get("recall_curve") or []
        if curve:
            axis.plot(range(1, len(curve) + 1), curve, marker="o", markersize=3, label=name)
    axis.axhline(0.9078, color="grey", linestyle="--", linewidth=1, label="paper (90.78%)")
    axis.set_xlabel("K")
    locator = axis.xaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # a linear axis's AutoLocator is one
        locator.set_params(integer=True)
    axis.set_ylabel("top-K recall on held-out stitched variants")
    axis.set_ylim(0, 1.05)
    axis.set_title(f"{report['workload']}: accuracy estimator "
                   f"{report['estimators']['accuracy']}")
    axis.legend(fontsize=8)
    written.append(save_figure(figure, out / "recall_vs_k.png", dpi=120))
    return written
