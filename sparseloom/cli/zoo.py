"""``sparseloom zoo``: build, show and evaluate subgraph zoos; plot accuracy vs latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.core.errors import ConfigError


def _workload(name: str, tasks: tuple[str, ...] = ()) -> Any:
    from sparseloom.core.workload import load_workload

    return load_workload(name, tasks=list(tasks) or None, progress=True)


def _processors(workload: Any) -> list[str]:
    if workload.processors:
        return list(workload.processors)
    from sparseloom.core.processors import default_processors

    return [p.name for p in default_processors()]


def _subgraphs(workload: Any, subgraphs: int | None) -> int:
    if subgraphs is not None:
        if subgraphs < 1:
            raise ConfigError(f"--subgraphs must be a positive integer, got {subgraphs}")
        return subgraphs
    return max(1, len(_processors(workload)))


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise ConfigError(
            f"{option} takes comma-separated variant ids such as 0,3,5; got {text!r}"
        ) from None


def _variants(text: str | None) -> list[str] | None:
    return [v.strip() for v in text.split(",")] if text else None


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@click.group("zoo")
def zoo_group() -> None:
    """Subgraph zoos: each task's dense model cut into S pieces, each in V compressed variants.

    Stitched variants combine one variant per position (V**S of them) without retraining.
    """


_subgraphs_option = click.option(
    "--subgraphs", "-S", type=int, default=None,
    help="Number of subgraph positions S (default: the number of processors).",
)
_variants_option = click.option(
    "--variants", default=None,
    help="Comma-separated variant names, dense first (default: the ten of docs/zoo.md).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@zoo_group.command("build")
@click.argument("workload")
@_subgraphs_option
@click.option("--task", "tasks", multiple=True, help="Only this task (repeatable).")
@_variants_option
@click.option("--cost", type=click.Choice(["flops", "latency"]), default="flops",
              show_default=True, help="What the partitioner balances.")
@click.option("--mode", type=click.Choice(["balanced", "adms"]), default="balanced",
              show_default=True, help="adms also weighs each processor's op support.")
@click.option("--rebuild", is_flag=True, help="Build even if a cached zoo exists.")
@_json_option
def build_command(
    workload: str, subgraphs: int | None, tasks: tuple[str, ...], variants: str | None,
    cost: str, mode: str, rebuild: bool, as_json: bool,
) -> None:
    """Build (or find in the cache) the zoo of every task of WORKLOAD (a name or TOML path)."""
    from sparseloom.core.zoo import build_zoo

    loaded = _workload(workload, tasks)
    count = _subgraphs(loaded, subgraphs)
    summaries = []
    for task in loaded.tasks:
        zoo = build_zoo(task, count, variants=_variants(variants),
                        processors=_processors(loaded), cost=cost, mode=mode, rebuild=rebuild)
        summaries.append(zoo.summary())
    if as_json:
        echo_json(summaries)
        return
    echo_table(
        ["task", "S", "variants", "cuts", "build s", "cached", "directory"],
        [[s["task"], s["subgraphs"], len(s["variants"]), s["cuts"], s["build_seconds"],
          "yes" if s["cached"] else "no", s["directory"]] for s in summaries],
    )


@zoo_group.command("show")
@click.argument("workload")
@_subgraphs_option
@_variants_option
@_json_option
def show_command(
    workload: str, subgraphs: int | None, variants: str | None, as_json: bool
) -> None:
    """Show each task's zoo: its directory and variants (compressor, level, metric, size)."""
    from sparseloom.core.zoo import ZooNotBuiltError, load_zoo

    loaded = _workload(workload)
    count = _subgraphs(loaded, subgraphs)
    results: list[dict[str, Any]] = []
    for task in loaded.tasks:
        try:
            zoo = load_zoo(task, count, variants=_variants(variants),
                           processors=_processors(loaded))
        except ZooNotBuiltError as error:
            results.append({"task": task.name, "built": False, "error": str(error)})
            continue
        results.append({"built": True, **zoo.summary()})
    if as_json:
        echo_json(results)
        return
    for result in results:
        if not result["built"]:
            click.echo(f"{result['task']}: not built ({result['error']})")
            continue
        click.echo(f"{result['task']}: S={result['subgraphs']}, cuts {result['cuts']}, "
                   f"{result['directory']}")
        echo_table(
            ["id", "name", "compressor", "level", result["metric"], "size KiB"],
            [[v["id"], v["name"], v["compressor"], f"{v['level']:g}", _fmt(v["metric"]),
              f"{v['size_bytes'] / 1024:.1f}"] for v in result["variants"]],
        )
        click.echo("")


@zoo_group.command("eval")
@click.argument("workload")
@click.option("--task", "task_name", required=True, help="The task to evaluate.")
@click.option("--stitch", required=True,
              help="One variant id per position, comma-separated, e.g. 0,3,5.")
@_subgraphs_option
@_variants_option
@click.option("--processor", default="ort:CPU", show_default=True,
              help="Where the subgraphs run.")
@_json_option
def eval_command(
    workload: str, task_name: str, stitch: str, subgraphs: int | None, variants: str | None,
    processor: str, as_json: bool,
) -> None:
    """Measure the metric of one stitched variant on the task's eval set."""
    from sparseloom.core.evaluate import evaluate_stitched
    from sparseloom.core.zoo import build_zoo

    choices = _int_list(stitch, "--stitch")
    loaded = _workload(workload, (task_name,))
    task = loaded.task(task_name)
    zoo = build_zoo(task, _subgraphs(loaded, subgraphs), variants=_variants(variants),
                    processors=_processors(loaded))
    stitched = zoo.stitched(choices)
    report = evaluate_stitched(zoo, task, [stitched], processor=processor)
    value = report.metric(stitched)
    names = [zoo.variants[c].name for c in stitched.choices]
    if as_json:
        echo_json({"task": task.name, "stitch": list(stitched.choices), "variants": names,
                   "metric": zoo.metric_name, "value": value, "processor": processor,
                   "zoo": str(zoo.directory)})
        return
    click.echo(f"{stitched} ({' | '.join(names)}): {zoo.metric_name} = {value:.4f}")


@zoo_group.command("pareto")
@click.argument("workload")
@click.option("--task", "task_name", required=True, help="The task to analyse.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for pareto-<task>.png and pareto-<task>.csv.")
@_subgraphs_option
@_variants_option
@click.option("--order", default=None,
              help="Processor per position, comma-separated (default: the workload's "
                   "processors, repeated to S).")
@click.option("--sample", default=200, show_default=True, help="Stitched variants to measure.")
@click.option("--runs", default=7, show_default=True, help="Timed runs per subgraph (median).")
@click.option("--seed", default=0, show_default=True, help="Sampling seed.")
@_json_option
def pareto_command(
    workload: str, task_name: str, out_dir: str, subgraphs: int | None, variants: str | None,
    order: str | None, sample: int, runs: int, seed: int, as_json: bool,
) -> None:
    """Accuracy vs summed per-subgraph latency of originals and stitched variants (PNG + CSV)."""
    from sparseloom.core.pareto import pareto_analysis
    from sparseloom.core.zoo import build_zoo

    loaded = _workload(workload, (task_name,))
    task = loaded.task(task_name)
    count = _subgraphs(loaded, subgraphs)
    processors = _processors(loaded)
    if order:
        placement = [p.strip() for p in order.split(",")]
    else:
        placement = [processors[j % len(processors)] for j in range(count)]
    zoo = build_zoo(task, count, variants=_variants(variants), processors=processors)
    result = pareto_analysis(zoo, task, placement, sample=sample, seed=seed, runs=runs,
                             progress=True)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"pareto-{task.name}.csv"
    png_path = folder / f"pareto-{task.name}.png"
    write_pareto_csv(result, zoo, csv_path)
    plot_pareto(result, zoo, png_path)
    summary = {**result.summary(), "csv": str(csv_path), "png": str(png_path)}
    if as_json:
        echo_json(summary)
        return
    sampled = summary["stitched_sampled"]
    click.echo(f"{task.name}: {summary['originals']} originals, {sampled} of "
               f"{summary['stitched_total']} stitched variants measured on "
               f"{' -> '.join(placement)}")
    click.echo(f"  above the best original {zoo.metric_name}: {summary['above_best_accuracy']} "
               f"({summary['above_best_accuracy_fraction']:.1%})")
    click.echo(f"  faster than the fastest original: {summary['below_fastest_latency']} "
               f"({summary['below_fastest_latency_fraction']:.1%})")
    click.echo(f"  not dominated by any original: {summary['beyond_front']} "
               f"({summary['beyond_front_fraction']:.1%}); on the joint front: "
               f"{summary['front_stitched']} of {summary['front_size']}")
    click.echo(f"  wrote {png_path} and {csv_path}")


def write_pareto_csv(result: Any, zoo: Any, path: Path) -> None:
    """One row per variant: kind, choices, names, metric, summed latency, on the front."""
    import csv

    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kind", "choices", "variants", zoo.metric_name, "latency_ms", "on_front"])
        for point in result.points:
            writer.writerow([
                "original" if point.original else "stitched",
                ",".join(map(str, point.choices)),
                "|".join(zoo.variants[c].name for c in point.choices),
                f"{point.metric:.6f}", f"{point.latency_ms:.4f}", int(point.on_front),
            ])


def plot_pareto(result: Any, zoo: Any, path: Path) -> None:
    """Scatter stitched (grey) and original (coloured, labelled) variants; draw both fronts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sparseloom.core.pareto import pareto_front

    originals = [p for p in result.points if p.original]
    stitched = [p for p in result.points if not p.original]
    figure, axes = plt.subplots(figsize=(7, 5))
    axes.scatter([p.latency_ms for p in stitched], [p.metric for p in stitched], s=10,
                 color="0.6", alpha=0.6, label=f"stitched ({len(stitched)} sampled)")
    axes.scatter([p.latency_ms for p in originals], [p.metric for p in originals], s=40,
                 color="tab:blue", zorder=3, label="original variants")
    for point in originals:
        axes.annotate(zoo.variants[point.choices[0]].name, (point.latency_ms, point.metric),
                      fontsize=7, xytext=(3, 3), textcoords="offset points")
    for points, style, label in ((originals, "tab:blue", "originals' front"),
                                 (list(result.points), "tab:red", "joint front")):
        front = pareto_front([p.latency_ms for p in points], [p.metric for p in points])
        axes.step([points[i].latency_ms for i in front], [points[i].metric for i in front],
                  where="post", color=style, linewidth=1.2, label=label)
    summary = result.summary()
    axes.set_title(
        f"{result.task}: S={zoo.positions}, {' -> '.join(result.order)}\n"
        f"stitched above best original: {summary['above_best_accuracy_fraction']:.1%}, "
        f"faster than fastest: {summary['below_fastest_latency_fraction']:.1%}, "
        f"undominated: {summary['beyond_front_fraction']:.1%}", fontsize=9,
    )
    axes.set_xlabel("summed per-subgraph latency, batch 1 (ms)")
    axes.set_ylabel(zoo.metric_name)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


COMMANDS = (zoo_group,)
