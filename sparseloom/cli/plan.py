"""``sparseloom plan``: a placement plan and a preload set for a workload (docs/plan.md)."""

from __future__ import annotations

import math
from typing import Any

import click

from sparseloom.cli.executor_options import executor_options
from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.placement_options import placement_options, read_placement


def _check_available(table: Any) -> None:
    from sparseloom.core.errors import PlanError
    from sparseloom.core.processors import discover_processors

    available = {p.name for p in discover_processors() if p.available}
    missing = [name for name in table.processors if name not in available]
    if missing:
        raise PlanError(f"the profile was measured on {', '.join(missing)}, not available now; "
                        f"available: {', '.join(sorted(available)) or 'none'}. Profile again "
                        "with --processor")


def plan_report(result: Any, table: Any) -> dict[str, Any]:
    """The JSON document of ``sparseloom plan --json`` (keys documented in docs/plan.md).

    Optional plan fields a policy left out read as the SLO it was given and NaN estimates
    (``make_plan`` fills them from the profile, so only a hand-made result lacks them).
    """
    plan, preload = result.plan, result.preload
    tasks = {}
    for name, variant in plan.variants.items():
        profile, slo = table.task(name), plan.slos.get(name) or result.slos[name]
        tasks[name] = {
            "variant": list(variant.choices),
            "variant_names": [profile.variant_names[c] for c in variant.choices],
            "stitched": len(set(variant.choices)) > 1,
            "processors": list(plan.processors_of(name)),
            "accuracy": plan.estimated_accuracy.get(name, math.nan),
            "accuracy_measured": plan.accuracy_measured.get(name, False),
            "latency_ms": plan.estimated_latency_ms.get(name, math.nan),
            "slo": {"accuracy": slo.accuracy, "latency_ms": slo.latency_ms,
                    "source": result.slo_sources[name]},
            "feasible": bool(plan.feasible.get(name, True)),
            "reason": plan.infeasible_reason.get(name, ""),
            "merged": name in plan.merged, "wide": name in plan.wide,
            "wide_when_quiet": name in plan.wide_when_quiet, "lane": name in plan.lanes,
            "pinned_lane": name in plan.lanes and plan.lanes_pinned,
            "lane_borrows": name in plan.lanes and plan.lanes_pinned and plan.lanes_borrow,
            "spare": name in plan.spares,
        }
    return {
        "workload": table.workload, "policy": plan.policy, "processors": list(table.processors),
        "order": list(plan.order), "decision_seconds": plan.decision_seconds, "tasks": tasks,
        "overflow": list(plan.overflow),
        "refused": {task: list(picks) for task, picks in result.refused.items()},
        "preload": {
            "budget_bytes": preload.budget_bytes, "full_bytes": preload.full_bytes,
            "resident_bytes": preload.resident_bytes,
            "switch_cost_ms": preload.switch_cost_ms(plan),
            "resident": [{"task": r.task, "position": r.position, "variant": r.variant,
                          "variant_name": table.task(r.task).variant_names[r.variant],
                          "processor": r.processor, "memory_bytes": r.memory_bytes,
                          "hotness": r.hotness} for r in preload.resident]},
    }


def _echo(report: dict[str, Any]) -> None:
    click.echo(f"workload {report['workload']}, policy {report['policy']}, order "
               f"{' → '.join(report['order'])}")
    rows = []
    for name, task in report["tasks"].items():
        slo = task["slo"]
        rows.append([
            name, ",".join(map(str, task["variant"])) + (" (stitched)" if task["stitched"]
                                                         else ""),
            "+".join(task["variant_names"]),
            "→".join(task["processors"]) + "".join(
                f" ({flag.replace('_', ' ')})"
                for flag in ("merged", "wide", "wide_when_quiet", "lane", "pinned_lane",
                             "lane_borrows", "spare")
                if task[flag] and not (flag == "wide" and task["wide_when_quiet"])
                and not (flag == "lane" and task["pinned_lane"])),
            f"{task['accuracy']:.4f}{'' if task['accuracy_measured'] else ' (est.)'} "
            f"≥ {slo['accuracy']:.4f}",
            f"{task['latency_ms']:.3f} ≤ {slo['latency_ms']:.3f}",
            slo["source"], "yes" if task["feasible"] else "NO"])
    echo_table(["task", "variant", "sources", "processors", "accuracy vs SLO",
                "latency ms vs SLO", "SLO from", "feasible"], rows)
    for name, task in report["tasks"].items():
        if not task["feasible"]:
            click.echo(f"{name}: {task['reason']}")
        if task["slo"]["source"] == "grid-middle":
            click.echo(f"{name}: no SLO given or in the workload file; used the middle of its "
                       "SLO grid")
    for name, picks in report.get("refused", {}).items():
        click.echo(f"{name}: the paired gate refused {', '.join(picks)} (their selection rows "
                   f"do not vouch for the margin beside dense); planned without them")
    if report["overflow"]:
        click.echo(f"overflow: {', '.join(report['overflow'])} (a request that would miss its "
                   f"latency SLO waiting for the running call runs on the other processors' "
                   f"cores)")
    preload = report["preload"]
    click.echo(f"preloaded {len(preload['resident'])} subgraphs, "
               f"{preload['resident_bytes'] / 2**20:.1f} MiB of a "
               f"{preload['budget_bytes'] / 2**20:.1f} MiB budget (full preloading "
               f"{preload['full_bytes'] / 2**20:.1f} MiB); switch cost of this plan "
               f"{preload['switch_cost_ms']:.1f} ms")
    click.echo(f"decision time: {report['decision_seconds'] * 1e3:.2f} ms")


@click.command("plan")
@click.argument("workload")
@placement_options("Processor spec (repeat), as for `sparseloom profile`.")
@click.option("--validate", is_flag=True,
              help="Measure ground truth and report the decision quality over the SLO grid.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@executor_options
def plan_command(workload: str, policy: str, slo_specs: tuple[str, ...], memory_budget: str,
                 processors: tuple[str, ...], paired_gate: bool, validate: bool, as_json: bool,
                 executor_settings: dict[str, Any] | None = None) -> None:
    """Plan WORKLOAD: a processor order and a stitched variant per task, and what to preload.

    Builds or loads the cached profile as `sparseloom profile` does, runs the policy and the
    hot-subgraph preloader, and prints each task's choice against its SLO.
    """
    from sparseloom.cli.profile import profile_options
    from sparseloom.core.errors import PlanError
    from sparseloom.plan.api import make_plan
    from sparseloom.profile.builder import build_profile, resolve_processors
    from sparseloom.workload.load import load_workload

    slos, budget = read_placement(policy, slo_specs, memory_budget)
    loaded = load_workload(workload, progress=False)
    unknown = sorted(set(slos) - {t.name for t in loaded.tasks})
    if unknown:
        raise PlanError(f"--slo names unknown task(s) {', '.join(unknown)}; workload "
                        f"{loaded.name!r} has: {', '.join(t.name for t in loaded.tasks)}")
    chosen = resolve_processors(processors or None, loaded)
    options = profile_options(loaded, **(executor_settings or {}))
    table = build_profile(loaded, processors=chosen, options=options, progress=False)
    _check_available(table)
    gate = None
    if paired_gate:
        from sparseloom.plan.paired_gate import workload_gate

        gate = workload_gate(loaded, table)
    result = make_plan(table, policy=policy, slos=slos, memory_budget=budget,
                       workload_slos={t.name: t.slo for t in loaded.tasks}, gate=gate)
    report = plan_report(result, table)
    if validate:
        from sparseloom.plan.quality import decision_quality, measure_truth

        truth = measure_truth(loaded, table, chosen, options)
        report["validation"] = {
            name: value if isinstance(value, str)
            else decision_quality(table.task(name), value[0], value[1])
            for name, value in truth.items()}
    if as_json:
        echo_json(report)
        return
    _echo(report)
    for name, quality in report.get("validation", {}).items():
        if isinstance(quality, str):
            click.echo(f"validation {name}: {quality}")
            continue
        click.echo(f"validation {name}: over {quality['reachable']} reachable SLOs of "
                   f"{quality['slos']}, the profile's pick truly meets "
                   f"{_pct(quality['meets_rate'])}; regret {_num(quality['latency_regret_ms'])}"
                   f" ms, {_num(quality['accuracy_regret'])} metric")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.4f}"


COMMANDS = (plan_command,)
