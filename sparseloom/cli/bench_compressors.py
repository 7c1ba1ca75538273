"""``sparseloom bench compressors WORKLOAD``: what each compressor buys, per position.

See :mod:`sparseloom.evaluation.compressor_bench` for what is measured and docs/compressors.md
for how to read the table; :func:`render_markdown` here turns its JSON report into Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.parsing import CALLS, ROUNDS
from sparseloom.cli.placement_options import processors_option


@click.command("compressors")
@click.argument("workload")
@click.option("--rounds", type=ROUNDS, default=None,
              help="Interleaved rounds per position and processor [default 5; --quick 2].")
@click.option("--requests", type=CALLS.at_least(5), default=None,
              help="Batch-1 calls per variant and round; a slot's latency is their median "
                   "[default 200; --quick 30].")
@click.option("--task", "tasks", multiple=True,
              help="A task to measure (repeat); default every task of the workload.")
@click.option("--quick", is_flag=True,
              help="2 rounds of 30 calls: a look in seconds; the report says it is not a "
                   "headline.")
@processors_option("A processor spec to profile and time on (repeat), as `sparseloom "
                   "profile -p`; default the workload's, else the default set.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.json and report.md here.")
def compressors_command(workload: str, rounds: int | None, requests: int | None,
                        tasks: tuple[str, ...], quick: bool, processors: tuple[str, ...],
                        out: Path | None) -> None:
    """What each compressor buys: speed-up over dense and accuracy drop, per position.

    Per task, position and zoo variant: its hot batch-1 latency against the dense
    subgraph's on every processor (interleaved rounds, median and min–max of the per-round
    speed-ups) and its accuracy drop on held-out rows with dense everywhere else; the
    whole-model variant as a row of its own; which compressors reach the front (faster than
    dense in every round, beyond the noise, at <= 1 point drop) and which never do.

    The workload, its profile (built and cached when missing, as `sparseloom profile
    WORKLOAD` builds it) and its zoos are loaded as `bench serve` loads them. Progress goes to
    stderr, the Markdown table to stdout.
    """
    import json

    from sparseloom.api import build_profile, load_workload
    from sparseloom.cli.output import ensure_output_dir
    from sparseloom.cli.profile import profile_options
    from sparseloom.evaluation.compressor_bench import (
        QUICK_REQUESTS,
        QUICK_ROUNDS,
        bench_compressors,
        select_tasks,
    )
    from sparseloom.zoo.load import profiled_zoos

    folder = ensure_output_dir(out) if out is not None else None
    rounds = rounds or (QUICK_ROUNDS if quick else 5)
    requests = requests or (QUICK_REQUESTS if quick else 200)

    def progress(line: str) -> None:
        click.echo(line, err=True)

    loaded = load_workload(workload, progress=True)
    chosen = [task.name for task in select_tasks(loaded, tasks)]  # before the profile is built
    # As `load_profiled` (run, bench serve) builds it: the same options, the same cached profile.
    profile = build_profile(loaded, processors=list(processors) or None,
                            options=profile_options(loaded), progress=True)
    zoos = profiled_zoos(profile, chosen)
    report = bench_compressors(loaded, profile, zoos, tasks=chosen, rounds=rounds,
                               requests=requests, quick=quick, progress=progress)
    markdown = render_markdown(report)
    if folder is not None:
        (folder / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (folder / "report.md").write_text(markdown)
        progress(f"report: {folder / 'report.md'} (JSON: report.json)")
    click.echo(markdown, nl=False)


def _number(value: float, digits: int) -> str:
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report of :func:`~sparseloom.evaluation.compressor_bench.bench_compressors` as
    Markdown: the conditions, one table per task, its front lines and its fastest stitched
    variants within a point."""
    from sparseloom.evaluation.stitched_front import render_stitched

    machine = report["machine"]
    load = report["load_before_first_round"]
    lines = [f"# What each compressor buys: {report['workload']}", "",
             f"Machine: {machine['cpu']}, cores {machine['cores']}; ONNX Runtime "
             f"{machine['onnxruntime']}, OpenVINO {machine['openvino']}. Load average before "
             f"the first round: {'n/a' if load is None else f'{load:.2f}'}"
             + ("" if report["quiet"] else " (**not a quiet machine: not a headline**)") + ".",
             "",
             f"Hot batch-1 latency: median of {report['requests']} calls per slot, "
             f"{report['rounds']} interleaved rounds; speed-up = dense ms ÷ variant ms per "
             "round (median, min–max). The dense row times dense against itself: its spread "
             "is this machine's noise. Accuracy on the held-out rows (ort:CPU); drop in "
             "points, positive = worse than dense. Position `all`: the variant at every "
             "position, latencies summed. `skipped`: a step the compressor found nothing to "
             "compress for (the identity there; such a row is never on the front)."]
    if report["quick"]:
        lines += ["", "**--quick: too few rounds and calls for a headline figure; not a "
                      "headline.**"]
    for task in report["tasks"]:
        lines += ["", f"## {task['task']} ({task['metric']}, {task['judging_rows']} held-out "
                  "rows)", "",
                  "| position | variant | processor | dense ms | variant ms | speed-up | "
                  "min–max | rounds | acc dense | acc variant | drop pt |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in task["rows"]:
            where = "all" if row["position"] is None else str(row["position"])
            speed = (f"failed: {row['error']}" if row["error"] else
                     f"×{row['speedup_median']:.2f}")
            variant = row["variant"] + (f" (skipped: {', '.join(row['skipped'])})"
                                        if row["skipped"] else "")
            lines.append(
                f"| {where} | {variant} | {row['processor']} | "
                f"{_number(row['dense_ms'], 4)} | {_number(row['variant_ms'], 4)} | {speed} | "
                f"{_number(row['speedup_min'], 2)}–{_number(row['speedup_max'], 2)} | "
                f"{row['rounds']} | {row['accuracy_dense']:.4f} | "
                f"{row['accuracy_variant']:.4f} | {row['drop_points']:+.2f} |")
        lines += ["", *front_lines(task), *render_stitched(task)]
    return "\n".join(lines) + "\n"


def front_lines(task: Mapping[str, Any]) -> list[str]:
    """A task's final lines: the compressors that reach the front, and each that never does."""
    from sparseloom.evaluation.compressor_bench import FRONT_DROP_POINTS

    reached = "; ".join(
        f"{name} ({b['variant']}, {b['where']} on {b['processor']}: ×{b['speedup_median']:.3f}, "
        f"drop {b['drop_points']:+.2f} pt)" for name, b in task["on_front"].items()) or "none"
    lines = [f"**{task['task']}: on the front** (faster than dense in every round, beyond the "
             f"dense row's spread, at ≤ {FRONT_DROP_POINTS:g} point drop): {reached}."]
    lines += [f"- {name}: never on the front on this workload." for name in task["never"]]
    return lines
