"""Rendering a ``bench serve`` report: Markdown tables, one line per scenario, figures.

The report itself is the JSON of :func:`sparseloom.evaluation.bench_serve.bench_serve`; this
module only renders it (MLPerf LoadGen's habit: the measurement and its presentation apart).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _cell(row: dict[str, Any], digits: int) -> str:
    if not row.get("n"):
        # A scenario that counts only runs at equal accuracy (steady) leaves out VALID runs
        # whose picks lost accuracy on the held-out rows: say so, not that none was VALID.
        if row.get("invalid_runs", 0) < len(row.get("rounds", ())):
            return "no VALID run at equal accuracy"
        return "no VALID run"
    return f"{_num(row['median'], digits)} [{_num(row['min'], digits)}–{_num(row['max'], digits)}]"


def _ratio_lines(name: str, result: dict[str, Any]) -> list[str]:
    """The ratio lines of every sparseloom policy of a scenario (or one k of it)."""
    by_policy = result.get("ratios_by_policy") or {"sparseloom": result["ratios"]}
    return [line for policy, ratios in by_policy.items()
            for line in _ratio_line(name, ratios, policy)]


def _ratio_line(name: str, ratios: dict[str, Any], policy: str = "sparseloom") -> list[str]:
    lines = []
    for key, label in (("vs_best_stock", "best stock runtime"),
                       ("vs_best_baseline", "best baseline"),
                       ("vs_picks_on_stock", "its picks on stock ONNX Runtime")):
        ratio = ratios.get(key) or {}
        if not ratio.get("n"):
            continue
        rounds = ", ".join(_num(x, 2) for x in ratio["rounds"])
        if ratio.get("difference"):
            lines.append(f"- {name}: {label} − {policy}, per round: {rounds}; median "
                         f"{_num(ratio['median'], 2)} (> 0: {policy} lower)")
        else:
            lines.append(f"- {name}: {policy} ÷ {label}, per round: {rounds}; median "
                         f"**{_num(ratio['median'], 2)}×** [{_num(ratio['min'], 2)}–"
                         f"{_num(ratio['max'], 2)}]")
    return lines


def _contender_table(rows: list[dict[str, Any]], header: str, digits: int) -> list[str]:
    lines = [f"| contender | {header} median [min–max] | VALID rounds | per round | at equal "
             "accuracy |", "|---|---|---|---|---|"]
    for row in rows:
        rounds = ", ".join(_num(x, digits) for x in row["rounds"])
        invalid = f" ({row['invalid_runs']} INVALID)" if row["invalid_runs"] else ""
        equal = row["figures"].get("equal_accuracy", {}).get("median", math.nan)
        equal_text = "–" if equal != equal else ("yes" if equal >= 1 else "**no**")
        lines.append(f"| {row['contender']} | {_cell(row, digits)} | {row['n']}{invalid} | "
                     f"{rounds} | {equal_text} |")
    return lines


def _floor_lines(result: dict[str, Any]) -> list[str]:
    """What no contender can go under on the grid, and why (``violation_floor``)."""
    floor = result.get("floor")
    if not floor:
        return []
    if not floor["unreachable"]:
        return [f"Floor: {_num(floor['violation_rate'], 2)} (some variant reaches every "
                f"accuracy level of every task)."]
    axis = result["accuracy_axis"]
    why = "; ".join(
        f"{task} at level {', '.join(str(level) for level in levels)} (SLO "
        f"{', '.join(_num(axis[task][level], 4) for level in levels)}; best variant "
        f"{_num(floor['best_accuracy'][task], 4)})"
        for task, levels in floor["unreachable"].items())
    return [f"Floor: **{_num(floor['violation_rate'], 2)}** at every k: no variant reaches the "
            f"accuracy SLO of {why}. No contender can have a lower violation rate; one at "
            f"the floor meets every cell that any variant can."]


def _above_floor_lines(above: dict[str, Any] | None) -> list[str]:
    """Each contender's violation rate above the grid's floor, and the best stock runtime's."""
    if not above or not above["contenders"]:
        return []
    text = ", ".join(f"{name} {_num(row['median'], 2)} [{_num(row['min'], 2)}–"
                     f"{_num(row['max'], 2)}]" for name, row in above["contenders"].items())
    best = above.get("best_stock")
    tail = (f"; the best stock runtime ({best['contender']}) {_num(best['median'], 2)}"
            if best else "")
    return [f"- Above the floor ({_num(above['floor'], 2)}; lower is better): {text}{tail}."]


def render_markdown(report: dict[str, Any]) -> str:
    """The whole report as Markdown: machine, load, configurations, one table per scenario;
    an incomplete one (Ctrl-C) says so at the top and lists the runs of the scenario it
    stopped in at the end."""
    incomplete = report.get("incomplete")
    if "machine" not in report:  # stopped before the benchmark began
        return (f"# bench serve: {report['workload']}\n\n**INCOMPLETE**: this report is "
                f"incomplete — {incomplete['reason'] if incomplete else 'nothing measured'}.\n")
    machine, load = report["machine"], report["load"]
    lines = [f"# bench serve: {report['workload']}", "",
             f"Machine: {machine['cpu']}, cores {machine['cores']}; ONNX Runtime "
             f"{machine['onnxruntime']}, OpenVINO {machine['openvino']}. 1-minute load average "
             f"before the first run {_num(load['before_first'], 2)}; other processes kept "
             f"{_num(load['foreign_cores_mean'], 3)} cores busy on average while the runs "
             f"served ({_num(load['foreign_cores_max'], 2)} in the busiest run)"
             + ("" if load["quiet"] else f" — **not a quiet machine (load above "
                                          f"{load['threshold']} before the first run, or other "
                                          f"processes above {load['foreign_threshold']} cores "
                                          f"on average): not a headline**") + ".", "",
             "sparseloom's processors: " + "; ".join(report["processors"]) + ".", ""]
    if incomplete:
        lines[1:1] = ["", f"**INCOMPLETE**: this report is incomplete — {incomplete['reason']}. "
                          "The tables below cover only the scenarios that finished; the runs "
                          "measured before Ctrl-C are listed at the end (and in report.json's "
                          "`runs`)."]
    for name, text in report["stock_configurations"].items():
        lines.append(f"- `{name}`: {text}")
    lines += _tuning_lines(report.get("stock_tuning") or [])
    for scenario, result in report["scenarios"].items():
        lines += ["", f"## {scenario} ({_num(result['seconds'] / 60, 1)} min)", ""]
        if result.get("run_length"):
            lines += [f"Closed runs: {result['run_length']}.", ""]
        digits = 2 if result["figure"] == "violation_rate" else 1
        header = f"{result['figure']} ({result['unit']})"
        if "k" in result:
            for k, part in result["k"].items():
                lines += ["", f"### k = {k}", ""]
                lines += _contender_table(part["contenders"], header, digits)
                if part.get("at_bracket_top"):
                    lines += ["", f"Met the SLOs at every probe, up to the top of the bracket "
                              f"(the capacity is at least the figure above): "
                              f"{', '.join(part['at_bracket_top'])}."]
                lines += ["", *_ratio_lines(f"k = {k}", part),
                          *_above_floor_lines(part.get("above_floor"))]
            if scenario == "grid":
                lines += ["", "### all k", ""]
                lines += _contender_table(result["contenders"], header, digits)
                lines += ["", *_floor_lines(result)]
        else:
            lines += _contender_table(result["contenders"], header, digits)
        if scenario == "steady":
            lines += _steady_lines(result)
        if result.get("task_rates"):
            lines += _task_rate_lines(scenario, result)
        lines += ["", *_ratio_lines(scenario, result), *_factor_lines(result.get("factors"))]
        if result.get("bounds"):
            from sparseloom.evaluation.closed_bound import render_bounds

            lines += render_bounds(result["bounds"])
        if result.get("stp_bounds"):
            from sparseloom.evaluation.steady_bound import render_steady_bounds

            lines += render_steady_bounds(result["stp_bounds"])
        if result.get("simulated"):
            from sparseloom.evaluation.sim_check import render_simulated

            lines += render_simulated(result["simulated"])
    from sparseloom.evaluation.judging import render_judging
    from sparseloom.evaluation.tightening import render_tightened

    lines += render_judging(report.get("judging") or {})
    lines += render_tightened((report.get("judging") or {}).get("tightened") or [])
    from sparseloom.evaluation.pick_speedup import render_pick_speedups

    lines += render_pick_speedups(report.get("pick_speedups") or [])
    if incomplete:
        lines += ["", *_interrupted_lines(report, incomplete)]
    return "\n".join(lines) + "\n"


def _steady_lines(result: dict[str, Any]) -> list[str]:
    """The steady scenario's ANTT table, each task's isolated latency and the worst task."""
    lines = ["", f"Every task asked for {_num(result['duration_s'], 1)} s per run. Isolated "
                 "latency per task (its dense model alone, fastest stock configuration): "
             + ", ".join(f"{t} {_num(ms, 3)} ms" for t, ms in result["isolated_hot_ms"].items())
             + ".", "", *_contender_table(result["antt"], "ANTT (lower is better)", 2)]
    return lines


def _task_rate_lines(scenario: str, result: dict[str, Any]) -> list[str]:
    """Each task's own rate per contender (median [min–max] over the rounds at equal
    accuracy), and per sparseloom policy its slowest task against the best stock runtime."""
    rates = result["task_rates"]
    tasks = sorted({t for per_task in rates.values() for t in per_task})
    own = (" (its requests ÷ the seconds from its first to its last: a light task ends "
           "before the makespan does)" if scenario == "closed" else "")
    lines = ["", f"Each task's rate, requests/s{own}, median [min–max] over the rounds at "
                 f"equal accuracy:", "", "| contender | " + " | ".join(tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    for name, per_task in rates.items():
        cells = [f"{_num(c['median'], 1)} [{_num(c['min'], 1)}–{_num(c['max'], 1)}]"
                 if (c := per_task.get(t)) and c["n"] else "–" for t in tasks]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for policy, worst in result["worst_task"].items():
        if worst["n"]:
            lines += ["", f"- {policy}: its slowest task's rate ÷ that task's rate under the "
                          f"round's best stock runtime, median {_num(worst['median'], 2)} "
                          f"[{_num(worst['min'], 2)}–{_num(worst['max'], 2)}] "
                          f"({', '.join(worst['tasks'])})"]
    return lines


def _tuning_lines(tunings: list[dict[str, Any]]) -> list[str]:
    """What ``stock-tuned`` and ``picks-tuned`` found, and every configuration they measured."""
    lines: list[str] = []
    for tuning in tunings:
        lines += ["", f"`{tuning['contender']}` as found: {tuning['configuration']} (predicted "
                      f"bottleneck {_num(tuning['predicted_bottleneck_ms'], 3)} ms per request "
                      f"of every task). Each task alone, per configuration:", "",
                  "| task | runtime | precision | threads | median latency (ms) | accuracy "
                  "served | used |", "|---|---|---|---|---|---|---|"]
        for row in tuning["measured"]:
            lines.append(f"| {row['task']} | {row['backend']} | {row['precision']} | "
                         f"{row['threads']} | {_num(row['latency_ms'], 3)} | "
                         f"{_num(row['accuracy'], 4)} | "
                         f"{'yes' if row['usable'] else 'no: ' + row['reason']} |")
        if tuning.get("layouts"):
            lines += ["", "Its best layouts, each served with every task at once (closed runs "
                          "in interleaved rounds); the fastest serves:", "",
                      "| layout | predicted bottleneck (ms) | req/s per round | median | "
                      "serves |", "|---|---|---|---|---|"]
            for layout in tuning["layouts"]:
                rounds = ", ".join(f"{x:.0f}" for x in layout["throughput_rps"])
                lines.append(
                    f"| {layout['configuration']} | "
                    f"{_num(layout['predicted_bottleneck_ms'], 3)} | {rounds or '—'} | "
                    f"{_num(layout['median_rps'], 1)} | "
                    + ("yes" if layout["configuration"] == tuning["configuration"] else
                       "no" + (f": {layout['failure']}" if layout["failure"] else "")) + " |")
    return lines


def _factor_lines(factors: dict[str, dict[str, Any]] | None) -> list[str]:
    """Each sparseloom policy's ratio to the best stock runtime as its three factors."""
    lines = []
    for policy, parts in (factors or {}).items():
        if not parts["whole"]["n"]:
            continue
        text = "; ".join(
            f"{label} {_num(parts[key]['median'], 2)}× [{_num(parts[key]['min'], 2)}–"
            f"{_num(parts[key]['max'], 2)}]" for key, label in (
                ("variant_choice", "variant choice (picks-tuned ÷ stock-tuned)"),
                ("runtime_placement", f"runtime and placement ({policy} ÷ picks-tuned)"),
                ("tuning", "tuning (stock-tuned ÷ best stock)")))
        lines.append(f"- {policy} ÷ best stock = {_num(parts['whole']['median'], 2)}× over "
                     f"{parts['whole']['n']} round(s), as factors (medians, per round): {text}")
    return lines


def _interrupted_lines(report: dict[str, Any], incomplete: dict[str, Any]) -> list[str]:
    """The runs the scenario cut short by Ctrl-C had measured: raw, one per line (too few to
    summarise, and none of them is evidence yet)."""
    scenario = incomplete.get("scenario")
    runs = [r for r in report.get("runs", ())
            if scenario and r["scenario"].split("-")[0] == scenario]
    lines = [f"## {scenario or 'no scenario'} (INCOMPLETE: interrupted, not summarised)", ""]
    if not runs:
        return [*lines, "No run had finished."]
    lines += ["| run | contender | round | throughput (requests/s) | verdict |",
              "|---|---|---|---|---|"]
    for run in runs:
        verdict = ("interrupted" if run.get("interrupted") else
                   "VALID" if run["valid"] else "INVALID: " + "; ".join(run["reasons"]))
        lines.append(f"| {run['scenario']} | {run['contender']} | {run['round'] + 1} | "
                     f"{_num(run['figures'].get('throughput_rps'))} | {verdict} |")
    if incomplete.get("skipped_scenarios"):
        lines += ["", f"Not run: {', '.join(incomplete['skipped_scenarios'])}."]
    return lines


def _why_no_ratio(result: dict[str, Any], policy: str) -> str:
    """Why a scenario has no ratio for ``policy``: its VALID runs all missed equal accuracy
    (judged on the held-out rows), or no round had a VALID run of both."""
    row = next((r for r in result.get("contenders", ()) if r["contender"] == policy), None)
    equal = (row or {}).get("figures", {}).get("equal_accuracy", {})
    if row and row.get("n") and equal.get("n") and equal.get("max", 1.0) < 1:
        return ("none of its VALID runs served at equal accuracy as judged on the held-out "
                "rows (see the report's \"Accuracy on held-out rows\")")
    return "no round in which both had a VALID run at equal accuracy"


def headline_lines(report: dict[str, Any]) -> list[str]:
    """One line per scenario and sparseloom policy: it against the best stock runtime."""
    incomplete = report.get("incomplete")
    out = [f"INCOMPLETE: this report is incomplete ({incomplete['reason']}); the lines below "
           f"cover the scenarios that finished"] if incomplete else []
    if "load" not in report:  # stopped before the benchmark began
        return out
    for scenario, result in report["scenarios"].items():
        by_policy = result.get("ratios_by_policy") or {"sparseloom": result["ratios"]}
        for policy, ratios in by_policy.items():
            ratio = ratios.get("vs_best_stock") or {}
            if not ratio.get("n"):
                out.append(f"{scenario}: {policy} ÷ best stock runtime: "
                           + _why_no_ratio(result, policy))
            elif ratio.get("difference"):
                floor = (result.get("floor") or {}).get("violation_rate")
                at_floor = "" if floor is None else (f" (floor {_num(floor, 2)}: no contender "
                                                     f"can go under it)")
                out.append(f"{scenario}: violation rate of the best stock runtime − {policy}'s, "
                           f"median {_num(ratio['median'], 2)} over {ratio['n']} round(s)"
                           + at_floor)
            else:
                what = " STP" if result["figure"] == "stp" else ""
                out.append(f"{scenario}: {policy}{what} ÷ best stock runtime{what} = "
                           f"{_num(ratio['median'], 2)}× (median of {ratio['n']} round(s), "
                           f"{_num(ratio['min'], 2)}–{_num(ratio['max'], 2)})")
    load = report["load"]
    if not load["quiet"]:
        out.append(f"not a quiet machine (load {_num(load['before_first'], 2)} before the "
                   f"first run, other processes {_num(load['foreign_cores_mean'], 2)} cores on "
                   f"average): not a headline")
    return out


def write_figures(report: dict[str, Any], folder: Path) -> list[Path]:
    """Bar charts with min–max whiskers per scenario (and k), and violation rate against k."""
    from sparseloom.evaluation.plotting import pyplot, save_figure

    plt = pyplot()
    written = []
    for scenario, result in report["scenarios"].items():
        parts = result["k"].items() if scenario == "capacity" else [("", result)]
        for k, part in parts:
            rows = [r for r in part["contenders"] if r["n"]]
            if not rows:
                continue
            figure, axes = plt.subplots(figsize=(8, 3.5))
            medians = [r["median"] for r in rows]
            errors = [[r["median"] - r["min"] for r in rows],
                      [r["max"] - r["median"] for r in rows]]
            axes.bar([r["contender"] for r in rows], medians, yerr=errors, capsize=3)
            axes.set_ylabel(f"{result['figure']} ({result['unit']})")
            axes.set_title(f"{report['workload']}: {scenario}" + (f", k = {k}" if k else ""))
            axes.tick_params(axis="x", rotation=45)
            written.append(save_figure(figure,
                                       folder / f"serve_{scenario}{'_k' + k if k else ''}.png"))
    grid = report["scenarios"].get("grid")
    if grid:
        figure, axes = plt.subplots(figsize=(7, 4))
        ks = list(grid["k"])
        names = [r["contender"] for r in grid["contenders"]]
        for name in names:
            values = [next((r["median"] for r in grid["k"][k]["contenders"]
                            if r["contender"] == name), math.nan) for k in ks]
            axes.plot([float(k) for k in ks], values, marker="o", label=name)
        axes.set_xlabel("k (latency SLO = k × isolated dense latency)")
        axes.set_ylabel("violation rate")
        axes.set_xscale("log")
        axes.legend(fontsize=7, ncol=2)
        written.append(save_figure(figure, folder / "serve_grid_violation_vs_k.png"))
    return written
