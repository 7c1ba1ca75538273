"""``sparseloom workloads``: list the registered workloads and build (or load) one."""

from __future__ import annotations

import time
from typing import Any

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.parsing import CheckedGroup


@click.group("workloads", cls=CheckedGroup)
def workloads_group() -> None:
    """Workloads: sets of tasks (model + labelled data + SLO) run together.

    A WORKLOAD is a registered name (see `sparseloom workloads list`) or the path of a
    workload .toml file (see docs/workloads.md).
    """


@workloads_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def list_command(as_json: bool) -> None:
    """List the registered workloads, their tasks, and whether they are built (cached)."""
    from sparseloom.core.cache import cache_dir
    from sparseloom.core.errors import SparseloomError
    from sparseloom.core.registry import get_registry
    from sparseloom.workload.build import META_FILE, builder_cache_key
    from sparseloom.workload.load import resolve_workload

    rows: list[dict[str, Any]] = []
    for registration in get_registry().workloads():
        try:
            definition = resolve_workload(registration.name)
        except SparseloomError as error:  # one broken workload must not hide the others
            rows.append({"name": registration.name, "description": registration.description,
                         "distribution": registration.distribution, "source": None,
                         "processors": [], "tasks": [], "error": str(error)})
            continue
        tasks: list[dict[str, Any]] = []
        for task in definition.tasks:
            built = None
            if task.builder is not None:
                _, folder = builder_cache_key(task.builder, task.options)
                built = (cache_dir() / "workloads" / folder / META_FILE).is_file()
            tasks.append({"name": task.name, "builder": task.builder and task.builder.name,
                          "built": built})
        rows.append({
            "name": registration.name,
            "description": registration.description or definition.description,
            "distribution": registration.distribution,
            "source": str(definition.source) if definition.source else None,
            "processors": list(definition.processors),
            "tasks": tasks,
            "error": None,
        })
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["name", "tasks", "built", "description"],
        [
            [row["name"], ", ".join(t["name"] for t in row["tasks"]),
             f"{sum(bool(t['built']) for t in row['tasks'])}/{len(row['tasks'])}",
             row["error"] or row["description"]]
            for row in rows
        ],
    )


def task_report(task: Any) -> dict[str, Any]:
    """One task's build facts as a JSON-ready dict (dense metric evaluated when unknown)."""
    from sparseloom.workload.checks import warn_if_chance
    from sparseloom.workload.evaluate import evaluate

    info = task.info
    dense = task.dense_metric
    evaluate_seconds = None
    if dense is None:
        started = time.perf_counter()
        dense = evaluate(task)
        evaluate_seconds = round(time.perf_counter() - started, 2)
    warn_if_chance(task.name, task.metric, dense, task.labels, info.get("classes"))
    return {
        "name": task.name,
        "description": task.description,
        "metric": task.metric,
        "dense_metric": round(dense, 4),
        "torch_metric": info.get("torch_metric"),
        "model_path": str(task.model_path),
        "model_bytes": info.get("model_bytes"),
        "params": info.get("params"),
        "inputs": {name: list(array.shape[1:]) for name, array in task.eval_inputs.items()},
        "outputs": list(task.output_names),
        "eval_size": task.num_eval,
        "held_out_size": task.held_out.count if task.held_out is not None else 0,
        "calibration_size": task.num_calibration,
        "build_seconds": info.get("build_seconds"),
        "evaluate_seconds": evaluate_seconds,
        "cache_hit": info.get("cache_hit"),
        "slo": None if task.slo is None else {
            "accuracy": task.slo.accuracy, "latency_ms": task.slo.latency_ms},
    }


@workloads_group.command("build")
@click.argument("workload")
@click.option("--task", "tasks", multiple=True, help="Only this task (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of a table.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bars.")
@click.option("--rebuild", is_flag=True,
              help="Build the tasks again even when cached (repairs a damaged cache entry).")
def build_command(workload: str, tasks: tuple[str, ...], as_json: bool, no_progress: bool,
                  rebuild: bool = False) -> None:
    """Build WORKLOAD (or take it from the cache) and report each task.

    Per task: the dense model's metric on the eval rows selection sees, model size and
    parameters, eval (selection), held-out and calibration sizes, and the build time (a cache
    hit reports the original build's time).
    """
    from sparseloom.api import load_workload

    started = time.perf_counter()
    loaded = load_workload(workload, tasks=tasks or None, progress=not no_progress,
                           rebuild=rebuild)
    reports = [task_report(task) for task in loaded.tasks]
    report = {
        "workload": loaded.name,
        "source": str(loaded.source) if loaded.source else None,
        "processors": list(loaded.processors),
        "seconds": round(time.perf_counter() - started, 2),
        "tasks": reports,
    }
    if as_json:
        echo_json(report)
        return
    echo_table(
        ["task", "metric", "dense", "model MB", "params", "eval", "held out", "calib", "build s",
         "cached"],
        [
            [r["name"], r["metric"], f"{r['dense_metric']:.4f}",
             f"{r['model_bytes'] / 1e6:.2f}" if r["model_bytes"] else "?",
             f"{r['params']:,}" if r["params"] is not None else "?",
             r["eval_size"], r["held_out_size"], r["calibration_size"],
             r["build_seconds"] if r["build_seconds"] is not None else "-",
             {True: "yes", False: "no", None: "-"}[r["cache_hit"]]]
            for r in reports
        ],
    )
    click.echo(f"workload {loaded.name}: {len(reports)} task(s) ready in {report['seconds']} s")


COMMANDS = (workloads_group,)
