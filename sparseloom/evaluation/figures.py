"""Render the comparison's tables as PNG figures (matplotlib, Agg backend).

Each figure is drawn from the rows :mod:`sparseloom.evaluation.results` returns, which are
saved beside it as JSON/CSV; nothing here computes a number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparseloom.evaluation.plotting import pyplot, save_figure


def _bars(path: Path, labels: Sequence[str], values: Sequence[float], ylabel: str,
          title: str, hatched: Sequence[bool] = ()) -> Path:
    figure, axes = pyplot().subplots(figsize=(max(4.0, 0.7 * len(labels) + 1.5), 3.2))
    bars = axes.bar(range(len(labels)), values, color="#4c72b0")
    for bar, hatch in zip(bars, hatched, strict=False):
        if hatch:
            bar.set_hatch("//")
            bar.set_alpha(0.6)
    axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    return save_figure(figure, path)


def _orders(plt: Any, path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Fig. 13: measured throughput per forced order beside the simulated one (hatched)."""
    figure, axes = plt.subplots(figsize=(max(4.5, 1.1 * len(rows) + 1.5), 3.4))
    where = range(len(rows))
    axes.bar([i - 0.2 for i in where], [r["throughput_rps"] for r in rows], 0.4,
             label="measured", color="#4c72b0")
    axes.bar([i + 0.2 for i in where], [r["simulated_rps"] for r in rows], 0.4,
             label="simulated", color="#4c72b0", alpha=0.5, hatch="//")
    axes.set_xticks(list(where), [r["order"].replace(">", "\n") for r in rows], fontsize=7)
    axes.set_ylabel("throughput (requests/s)")
    axes.set_title("Fig. 13: throughput per processor order (Alg. 1, order forced)")
    axes.legend(fontsize=8)
    return save_figure(figure, path)


def render_all(out: Path, tables: Mapping[str, Any]) -> list[Path]:
    """Write fig10_violation.png, fig11_throughput.png, fig13_orders.png, fig14_budget.png and
    fig3_stitching.png under ``out`` from the tables of :func:`~sparseloom.evaluation.cli`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    rows = tables["contenders"]
    names = [r["contender"] for r in rows]
    simulated_only = [r["cells_measured"] == 0 for r in rows]
    written.append(_bars(out / "fig10_violation.png", names,
                         [100 * r["violation_rate"] for r in rows], "SLO violation rate (%)",
                         "Fig. 10: violation per contender", simulated_only))
    written.append(_bars(out / "fig11_throughput.png", names,
                         [r["throughput_rps"] for r in rows], "throughput (requests/s)",
                         "Fig. 11: throughput per contender (measured)"))
    plt = pyplot()
    written.append(_orders(plt, out / "fig13_orders.png", tables["orders"]))
    budget = tables["budget"]
    figure, axes = plt.subplots(figsize=(4.5, 3.2))
    axes.plot([100 * r["budget"] for r in budget], [100 * r["violation_rate"] for r in budget],
              marker="o")
    axes.set_xlabel("memory budget (% of full preloading)")
    axes.set_ylabel("SLO violation rate (%)")
    axes.set_title("Fig. 14: violation vs memory budget")
    written.append(save_figure(figure, out / "fig14_budget.png"))
    benefit = tables["stitching"]
    figure, axes = plt.subplots(figsize=(5.5, 3.2))
    ks = [r["slo_config"] for r in benefit]
    axes.bar([k - 0.2 for k in ks], [r["original_ok"] for r in benefit], 0.4,
             label="original variants")
    axes.bar([k + 0.2 for k in ks], [r["stitched_ok"] for r in benefit], 0.4,
             label="stitched variants")
    axes.set_xlabel("SLO configuration (accuracy-major)")
    axes.set_ylabel("tasks that can meet it")
    axes.set_title("Fig. 3: stitching benefit per SLO configuration")
    axes.legend(fontsize=8)
    written.append(save_figure(figure, out / "fig3_stitching.png"))
    return written
