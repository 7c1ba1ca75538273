"""The comparison's tables as Markdown, with the paper's figures beside them.

:func:`render_markdown` turns the tables of :func:`~sparseloom.evaluation.report.
evaluate_workload` into Markdown (written as ``OUT/results.md``); nothing here computes a
metric, only the paper's ratios (SparseLoom's violation against the best AV baseline and SV-LO,
its throughput against the best baseline and vanilla OpenVINO).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The paper's numbers (SparseLoom §5.2–5.3), for the side-by-side columns.
PAPER = {
    "violation_vs_sv": "up to 74 % lower (Jetson Orin, vs SV-LO-NP)",
    "violation_vs_av": "up to 24.7 % lower (desktop, vs AV-NP)",
    "throughput_vs_best": "up to 1.53× (desktop, vs SV-LO-P)",
    "throughput_vs_worst": "up to 2.31× (laptop, vs SV-AO-NP)",
    "memory": "28 % less on average",
    "orders": "72–146 req/s on the laptop, up to 2× between orders",
    "budget": "15 % budget: 24.4 / 29.5 / 25.4 % violation; 55 %: within 2.7 points of full",
    "stitching": "up to 63 % fewer violations at strict SLOs (C7)",
}

BASELINES = ("sv-ao-p", "sv-ao-np", "sv-lo-p", "sv-lo-np", "av-p", "av-np", "adms")


def _pct(value: float) -> str:
    return "—" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _num(value: float, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def headline(rows: Sequence[Mapping[str, Any]], ours: str = "sparseloom") -> dict[str, Any]:
    """SparseLoom against the best AV baseline, SV-LO, the best baseline and vanilla OpenVINO:
    violation differences (points, negative = fewer) and throughput ratios."""
    by = {r["contender"]: r for r in rows}
    if ours not in by:
        return {}
    me = by[ours]

    def best(names: Sequence[str], key: str, pick: Any) -> tuple[str, float]:
        found = [(n, by[n][key]) for n in names if n in by and not math.isnan(by[n][key])]
        return pick(found, key=lambda item: item[1]) if found else ("—", math.nan)

    av, av_violation = best(("av-p", "av-np"), "violation_rate", min)
    sv_lo, sv_lo_violation = best(("sv-lo-p", "sv-lo-np"), "violation_rate", min)
    top, top_rps = best(BASELINES, "throughput_rps", max)
    vanilla = by.get("vanilla-ov", {}).get("throughput_rps", math.nan)
    return {"best_av": av, "violation_vs_av_points": 100 * (me["violation_rate"] - av_violation),
            "sv_lo": sv_lo,
            "violation_vs_sv_lo_points": 100 * (me["violation_rate"] - sv_lo_violation),
            "best_baseline": top, "throughput_vs_best": me["throughput_rps"] / top_rps
            if top_rps else math.nan,
            "throughput_vs_vanilla_ov": me["throughput_rps"] / vanilla if vanilla else math.nan}


def render_markdown(tables: Mapping[str, Any], *, images: str = "img/eval_") -> str:
    """The evaluation section's tables (contenders, ratios, Fig. 13, 14, 3, validation)."""
    lines = ["| contender | violation % (25 configs) | violation % (measured) | "
             "throughput rps | loaded memory MB | throughput / pipeline bound | "
             "measured / simulated cells |", "|---|---|---|---|---|---|---|"]
    for r in tables["contenders"]:
        lines.append(f"| {r['contender']} | {_pct(r['violation_rate'])} | "
                     f"{_pct(r['violation_rate_measured'])} | {_num(r['throughput_rps'])} | "
                     f"{_num(r['memory_bytes'] / 1e6)} | {_num(r['pipeline_share'], 2)} | "
                     f"{r['cells_measured']} / {r['cells_simulated']} |")
    lines += ["", f"![Fig. 10]({images}fig10_violation.png) "
              f"![Fig. 11]({images}fig11_throughput.png)", ""]
    ratio = headline(tables["contenders"])
    if ratio:
        lines += ["| SparseLoom against | here | paper |", "|---|---|---|",
                  f"| best AV baseline ({ratio['best_av']}), violation | "
                  f"{ratio['violation_vs_av_points']:+.1f} points | {PAPER['violation_vs_av']} |",
                  f"| SV-LO ({ratio['sv_lo']}), violation | "
                  f"{ratio['violation_vs_sv_lo_points']:+.1f} points | "
                  f"{PAPER['violation_vs_sv']} |",
                  f"| best baseline ({ratio['best_baseline']}), throughput | "
                  f"{_num(ratio['throughput_vs_best'], 2)}× | {PAPER['throughput_vs_best']} |",
                  f"| vanilla OpenVINO, throughput | "
                  f"{_num(ratio['throughput_vs_vanilla_ov'], 2)}× | not in the paper |", ""]
    lines += ["Fig. 13 (Algorithm 1 with the order forced; paper: " + PAPER["orders"] + "):", "",
              "| order | measured rps | measured violation % | simulated rps | source |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['order']} | {_num(r['throughput_rps'])} | {_pct(r['violation_rate'])} | "
              f"{_num(r['simulated_rps'])} | {r['source']} |" for r in tables["orders"]]
    lines += ["", f"![Fig. 13]({images}fig13_orders.png)", "",
              "Fig. 14 (`sparseloom`, measured; paper: " + PAPER["budget"] + "):", "",
              "| budget % | violation % | runs |", "|---|---|---|"]
    lines += [f"| {100 * r['budget']:.0f} | {_pct(r['violation_rate'])} | {r['runs']} |"
              for r in tables["budget"]]
    stitched = tables["stitching"]
    helped = [r["slo_config"] for r in stitched if r["only_stitched"]]
    lines += ["", f"![Fig. 14]({images}fig14_budget.png)", "",
              f"Fig. 3 (profile estimates; paper: {PAPER['stitching']}): stitching lets more "
              f"tasks meet their SLO in configurations {helped or 'none'} of 25; tasks that can "
              f"meet each configuration, original → stitched: "
              + ", ".join(f"{r['slo_config']}: {r['original_ok']}→{r['stitched_ok']}"
                          for r in stitched) + ".", "",
              f"![Fig. 3]({images}fig3_stitching.png)", ""]
    return "\n".join(lines)


def render_validation(validation: Mapping[str, Any]) -> str:
    """The simulator's error per measured cell and overall, raw and calibrated."""
    lines = ["| contender | config | measured rps | simulated rps (error) | calibrated rps "
             "(error) | slowdown | measured / simulated / calibrated violation % | load avg |",
             "|---|---|---|---|---|---|---|---|"]
    for r in validation["rows"]:
        lines.append(
            f"| {r['contender']} | {r['slo_config']} | {_num(r['measured_rps'])} | "
            f"{_num(r['simulated_rps'])} ({_pct(r['throughput_error'])} %) | "
            f"{_num(r['calibrated_simulated_rps'])} ({_pct(r['calibrated_throughput_error'])} %)"
            f" | {r['slowdown'] or '—'} | {_pct(r['measured_violation'])} / "
            f"{_pct(r['simulated_violation'])} / {_pct(r['calibrated_simulated_violation'])} | "
            f"{_num(r['load_average'])} |")
    v = validation
    lines += ["", f"Overall: mean |throughput error| {_pct(v['mean_abs_throughput_error'])} % "
              f"raw, {_pct(v['calibrated_mean_abs_throughput_error'])} % calibrated (goal 10 %; "
              f"within it: {_pct(v['within_10pct_throughput'])} % / "
              f"{_pct(v['calibrated_within_10pct_throughput'])} % of cells); mean |violation "
              f"error| {_num(v['mean_abs_violation_error_points'])} points raw, "
              f"{_num(v['calibrated_mean_abs_violation_error_points'])} calibrated (goal 5; "
              f"within it: {_pct(v['within_5pt_violation'])} % / "
              f"{_pct(v['calibrated_within_5pt_violation'])} % of cells).", ""]
    return "\n".join(lines)


def render_sweep(rows: Sequence[Mapping[str, Any]]) -> str:
    """The scale sweep's table."""
    lines = ["| case | T | S | V | P | policy | violation % | throughput rps | "
             "decision ms |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['tasks']} | {r['positions']} | {r['variants']} | "
              f"{r['processors']} | {r['policy']} | {_pct(r['violation_rate'])} | "
              f"{_num(r['throughput_rps'])} | {_num(r['decision_ms'], 2)} |" for r in rows]
    return "\n".join(lines) + "\n"
