"""``sparseloom zoo``: build, show and evaluate subgraph zoos; plot accuracy vs latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import click

from sparseloom.cli.output import echo_json, echo_table, ensure_output_dir
from sparseloom.cli.parsing import (
    ROUNDS,
    SAMPLES,
    SEED,
    SUBGRAPHS,
    CheckedGroup,
    comma_ints,
    comma_items,
)
from sparseloom.core.errors import ConfigError


def _workload(name: str, tasks: tuple[str, ...] = ()) -> Any:
    from sparseloom.api import load_workload

    return load_workload(name, tasks=list(tasks) or None, progress=True)


def _processors(workload: Any) -> list[str]:
    from sparseloom.zoo.options import workload_processors

    return workload_processors(workload)


def _options(workload: Any, subgraphs: int | None, variants: str | None, **settings: Any) -> Any:
    """The :class:`~sparseloom.zoo.options.ZooOptions` that the zoo commands' options select:
    ``--variants``, else the workload file's ``variants``, else the default list."""
    from sparseloom.zoo.options import zoo_options_for

    if subgraphs is not None and subgraphs < 1:
        raise ConfigError(f"--subgraphs must be a positive integer, got {subgraphs}")
    return zoo_options_for(workload, subgraphs, _variants(variants), **settings)


def _subgraphs(workload: Any, subgraphs: int | None) -> int:
    return int(_options(workload, subgraphs, None).count())


def _variants(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return comma_items(text, "--variants", "dense,int8,unstructured-0.5", unique=True)


def _check_stitch(choices: list[int], options: Any, task: str) -> None:
    """Refuse a --stitch that does not fit the zoo, before the zoo is built."""
    count = options.count()
    variants = len(options.resolved_variants())
    if len(choices) != count:
        raise ConfigError(
            f"--stitch {','.join(map(str, choices))} has {len(choices)} choice(s) but the zoo "
            f"has {count} positions (task {task!r}, S={count}); give one variant id per "
            "position")
    for position, choice in enumerate(choices):
        if choice >= variants:
            raise ConfigError(
                f"--stitch: position {position} has unknown variant id {choice}; ids are "
                f"0..{variants - 1} (see `sparseloom zoo show`)")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@click.group("zoo", cls=CheckedGroup)
def zoo_group() -> None:
    """Subgraph zoos: each task's dense model cut into S pieces, each in V compressed variants.

    Stitched variants combine one variant per position (V**S of them) without retraining.
    """


_subgraphs_option = click.option(
    "--subgraphs", "-S", type=SUBGRAPHS, default=None,
    help="Number of subgraph positions S (default: the number of processors).",
)
_variants_option = click.option(
    "--variants", default=None,
    help="Comma-separated variant names, dense first; a bare compressor name stands for its "
         "default levels (default: the workload file's 'variants', else the default "
         "list of docs/zoo.md).",
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
    from sparseloom.api import build_zoos

    loaded = _workload(workload, tasks)
    zoos = build_zoos(loaded, _options(loaded, subgraphs, variants, cost=cost, mode=mode),
                      rebuild=rebuild)
    summaries = [zoo.summary() for zoo in zoos.values()]
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
    from sparseloom.core.errors import ZooNotBuiltError
    from sparseloom.zoo.load import load_zoo

    loaded = _workload(workload)
    results: list[dict[str, Any]] = []
    for task in loaded.tasks:
        try:
            zoo = load_zoo(task, _options(loaded, subgraphs, variants))
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
    """Measure the metric of one stitched variant on the task's eval set.

    The zoo must already be built (`sparseloom zoo build`) with the same S and variants;
    when it is not, the error lists the zoos that are built and how to select them.
    """
    from sparseloom.zoo.evaluate import evaluate_stitched
    from sparseloom.zoo.load import load_zoo

    choices = comma_ints(stitch, "--stitch", "0,3,5", "variant ids")
    loaded = _workload(workload, (task_name,))
    task = loaded.task(task_name)
    options = _options(loaded, subgraphs, variants)
    _check_stitch(choices, options, task.name)
    # Variant ids mean nothing in another zoo: evaluate only a zoo built with these options.
    zoo = load_zoo(task, options)
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
@click.option("--sample", type=SAMPLES.at_least(0), default=200, show_default=True,
              help="Stitched variants to measure (0: the originals only).")
@click.option("--runs", type=ROUNDS, default=7, show_default=True,
              help="Timed runs per subgraph (median).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Sampling seed.")
@_json_option
def pareto_command(
    workload: str, task_name: str, out_dir: str, subgraphs: int | None, variants: str | None,
    order: str | None, sample: int, runs: int, seed: int, as_json: bool,
) -> None:
    """Accuracy vs summed per-subgraph latency of originals and stitched variants (PNG + CSV)."""
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.pareto import ParetoOptions, fastest_within, pareto_analysis

    folder = ensure_output_dir(out_dir, "--out")  # before minutes of measuring, not after
    loaded = _workload(workload, (task_name,))
    task = loaded.task(task_name)
    count = _subgraphs(loaded, subgraphs)
    processors = _processors(loaded)
    if order:
        placement = comma_items(order, "--order", "ov:CPU,ort:CPU")
        if len(placement) != count:
            raise ConfigError(f"--order names {len(placement)} processor(s) but S={count}; "
                              "give one processor per position")
    else:
        placement = [processors[j % len(processors)] for j in range(count)]
    zoo = build_zoo(task, _options(loaded, subgraphs, variants))
    options = ParetoOptions(sample=sample, seed=seed, runs=runs)
    result = pareto_analysis(zoo, task, placement, options, progress=True)
    best = fastest_within(zoo, task, result, processor=options.evaluation_processor)
    csv_path = folder / f"pareto-{task.name}.csv"
    png_path = folder / f"pareto-{task.name}.png"
    write_pareto_csv(result, zoo, csv_path)
    plot_pareto(result, zoo, png_path)
    summary = {**result.summary(), "csv": str(csv_path), "png": str(png_path),
               "fastest_within_1_point": (
                   {**attrs.asdict(best), "speedup": best.speedup} if best else None)}
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
    click.echo(f"  {fastest_within_line(best, zoo)}")
    click.echo(f"  wrote {png_path} and {csv_path}")


def fastest_within_line(best: Any, zoo: Any) -> str:
    """The Pareto step's line on the fastest variant within 1 point of dense on held-out rows
    (:func:`~sparseloom.zoo.pareto.fastest_within`)."""
    from sparseloom.zoo.pareto import JUDGED_FASTEST

    if best is None:
        return (f"fastest within 1 point of dense on held-out rows: none (no rows held out, or "
                f"none of the {JUDGED_FASTEST} fastest within it on selection is within it "
                f"there)")
    names = " | ".join(zoo.variants[c].name for c in best.choices)
    return (f"fastest within 1 point of dense on {best.judging_rows} held-out rows: "
            f"{','.join(map(str, best.choices))} ({names}), x{best.speedup:.2f} "
            f"({best.latency_ms:.3f} against {best.dense_latency_ms:.3f} ms summed), "
            f"{best.drop_points:+.2f} pt")


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
    from sparseloom.evaluation.plotting import pyplot, save_figure
    from sparseloom.zoo.pareto import pareto_front

    originals = [p for p in result.points if p.original]
    stitched = [p for p in result.points if not p.original]
    figure, axes = pyplot().subplots(figsize=(9, 5))
    axes.scatter([p.latency_ms for p in stitched], [p.metric for p in stitched], s=10,
                 color="0.6", alpha=0.6, label=f"stitched ({len(stitched)} sampled)")
    axes.scatter([p.latency_ms for p in originals], [p.metric for p in originals], s=40,
                 color="tab:blue", zorder=3, label="original variants")
    # Full variant names overlap where originals cluster (int8 next to unstructured-0.5+int8):
    # each point carries its short id, and one key beside the axes spells the ids out.
    axes.autoscale_view()
    placed: list[tuple[float, float]] = []  # label positions in points, to stack close ones
    for point in sorted(originals, key=lambda p: (p.latency_ms, p.metric)):
        x, y = axes.transData.transform((point.latency_ms, point.metric)) * 72 / figure.dpi
        # Try right, left, below, then further up: the first spot clear of earlier labels.
        spots = [(3.0, 3.0), (-9.0, 3.0), (3.0, -10.0), (-9.0, -10.0), (3.0, 11.0), (-9.0, 11.0)]
        dx, dy = next(((dx, dy) for dx, dy in spots
                       if all(abs(x + dx - px) > 8 or abs(y + dy - py) > 8 for px, py in placed)),
                      spots[-1])
        placed.append((x + dx, y + dy))
        axes.annotate(str(point.choices[0]), (point.latency_ms, point.metric), fontsize=7,
                      xytext=(dx, dy), textcoords="offset points", color="tab:blue")
    key = "\n".join(f"{zoo.variants[p.choices[0]].id}: {zoo.variants[p.choices[0]].name}"
                    for p in sorted(originals, key=lambda p: p.choices[0]))
    axes.text(1.02, 1.0, "original variants\n" + key, transform=axes.transAxes, fontsize=7,
              va="top", ha="left", family="monospace")
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
    save_figure(figure, path, dpi=120)


COMMANDS = (zoo_group,)
