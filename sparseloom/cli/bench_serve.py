"""``sparseloom bench serve WORKLOAD``: every contender against the stock runtimes, side by side.

See :mod:`sparseloom.evaluation.bench_serve` for what is measured and docs/evaluation.md for how
to read the report.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.parsing import LATENCY_MULTIPLIER, ROUNDS
from sparseloom.cli.placement_options import memory_budget_option, processors_option

SCENARIO_CHOICES = ("closed", "steady", "capacity", "grid")


@click.command("serve")
@click.argument("workload")
@click.option("--scenario", "scenarios", multiple=True, type=click.Choice(SCENARIO_CHOICES),
              help="Scenario to run (repeat); default all four.")
@click.option("--contender", "contenders", multiple=True,
              help="Contender to run (repeat); default every registered policy and every stock "
                   "runtime.")
@click.option("--rounds", type=ROUNDS, default=None,
              help="Interleaved rounds of the closed scenario [default 5; --quick 2].")
@click.option("--capacity-rounds", type=ROUNDS, default=None,
              help="Bisections per contender and k in the capacity scenario [default 3; "
                   "--quick 1].")
@click.option("--grid-rounds", type=ROUNDS, default=None,
              help="Interleaved rounds of the grid scenario [default 1].")
@click.option("--k", "ks", multiple=True, type=LATENCY_MULTIPLIER,
              help="Latency SLO multiplier k of the capacity and grid scenarios (repeat): the "
                   "latency SLO is k × the isolated dense latency [default 2, 5, 10; --quick "
                   "5]. Baselines join the capacity search at k = 5 only.")
@processors_option("A processor spec to profile and serve on (repeat), as `sparseloom "
                   "profile -p`; default the workload's, else the default set. The matched "
                   "stock runtimes follow its cores and precision.")
@click.option("--quick", is_flag=True,
              help="Fewer rounds, closed runs of 100 requests per task with no minimum "
                   "duration, 100-request capacity probes, 3 bisection steps, k = 5 only: "
                   "minutes instead of half an hour; every run still VALID, the report says "
                   "its closed runs are too short for a headline.")
@memory_budget_option("Memory budget each policy contender's server serves within (as "
                      "`sparseloom run`)")
@click.option("--keep-loaded", "keep_loaded", default=None, metavar="SIZE",
              help="Bound what the benchmark keeps loaded between runs (`800MiB`, `1.5GiB`, "
                   "bytes): idle models beyond it are unloaded and loaded again when a later "
                   "run needs them (outside every run's figures) [default: keep every model "
                   "until the end].")
@click.option("--closed-queries", "closed_queries", type=click.IntRange(min=1), default=None,
              help="Requests per task in each run of the closed scenario, at least [default "
                   "2000; --quick 100].")
@click.option("--closed-min-seconds", "closed_min_s", type=click.FloatRange(min=0,
                                                                            min_open=True),
              default=None, help="A closed run goes on until this many seconds have passed "
                                 "if its requests ended sooner [default 2; --quick none].")
@click.option("--steady-seconds", "steady_s", type=click.FloatRange(min=0, min_open=True),
              default=None, help="How long each run of the steady scenario keeps every task "
                                 "asking [default 10; --quick 1].")
@click.option("--tuning-queries", "tuning_queries", type=click.IntRange(min=1), default=None,
              help="Requests of each run that measures one configuration of one task for "
                   "stock-tuned and picks-tuned [default 100; --quick 100].")
@click.option("--tuning-rounds", "tuning_rounds", type=click.IntRange(min=1), default=None,
              help="Interleaved rounds of those runs; a configuration's latency is the median "
                   "of its rounds [default 3; --quick 1].")
@click.option("--choose-above", "choose_above", type=click.FloatRange(min=0), default=None,
              metavar="POINTS", help="Policies choose their variants as if every accuracy SLO "
                                     "were POINTS higher, at most the dense model's accuracy; "
                                     "accuracy is judged at the SLO itself, on the held-out "
                                     "rows [default 0].")
@click.option("--paired-gate/--no-paired-gate", "paired_gate", default=None,
              help="Keep a policy's pick only where the low end of the 95% paired interval of "
                   "its accuracy minus dense's on the selection rows is within the margin, "
                   "else plan again without it [default on].")
@click.option("--tighten/--no-tighten", "tighten", default=None,
              help="Where a policy's pick falls outside its margin on the held-out rows, "
                   "choose that task's variant again under a tighter selection margin (half "
                   "the margin, then none, then dense variants only) until every pick keeps "
                   "it; each step is listed in the report [default on].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.json, report.md and the figures here.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report.")
def serve_command(workload: str, scenarios: tuple[str, ...], contenders: tuple[str, ...],
                  rounds: int | None, capacity_rounds: int | None, grid_rounds: int | None,
                  ks: tuple[float, ...], processors: tuple[str, ...], quick: bool,
                  out: Path | None, as_json: bool, keep_loaded: str | None = None,
                  memory_budget: str = "1.0", tuning_queries: int | None = None,
                  tuning_rounds: int | None = None, closed_queries: int | None = None,
                  closed_min_s: float | None = None, steady_s: float | None = None,
                  choose_above: float | None = None, paired_gate: bool | None = None,
                  tighten: bool | None = None) -> None:
    """Serve WORKLOAD with every contender in interleaved rounds and compare them.

    Contenders: the registered placement policies and the stock runtimes (ONNX Runtime and
    OpenVINO out of the box, matched to sparseloom's cores, threads and precision, and tuned
    by measurement on this machine; sparseloom's picks served by stock ONNX Runtime and by the
    tuned configuration). Per contender the median and min–max of
    each figure over VALID runs; ratios per round: sparseloom ÷ the best stock runtime and ÷
    the best baseline. Benchmark on a quiet machine: the load average before every run is
    recorded and a busy machine is flagged.
    """
    import attrs

    from sparseloom.cli.output import ensure_output_dir
    from sparseloom.cli.parsing import parse_size
    from sparseloom.cli.placement_options import read_budget
    from sparseloom.cli.run import load_profiled
    from sparseloom.core.types import repeated
    from sparseloom.evaluation.bench_serve import BenchInterrupted, bench_serve, nothing_measured
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.serve_figures import QUICK, BenchOptions
    from sparseloom.runtime import interrupts

    folder = ensure_output_dir(out) if out is not None else None
    select_contenders(contenders)  # refuse a bad name before anything is built
    options = QUICK if quick else BenchOptions()
    changes: dict[str, Any] = {"scenarios": scenarios} if scenarios else {}
    given = {"rounds": rounds, "capacity_rounds": capacity_rounds, "grid_rounds": grid_rounds,
             "tuning_queries": tuning_queries, "tuning_rounds": tuning_rounds,
             "closed_queries": closed_queries,
             "closed_min_s": closed_min_s, "steady_s": steady_s, "choose_above": choose_above,
             "paired_gate": paired_gate, "tighten": tighten}
    changes |= {name: value for name, value in given.items() if value is not None}
    changes["memory_budget"] = read_budget(memory_budget)
    if keep_loaded is not None:
        changes["keep_bytes"] = parse_size(keep_loaded, "--keep-loaded")
    if ks:
        if repeated(ks):
            raise click.UsageError(f"--k repeats a value: {', '.join(f'{k:g}' for k in ks)}")
        changes["ks"] = ks
    options = attrs.evolve(options, **changes)
    def progress(line: str) -> None:
        click.echo(line, err=True)

    try:
        loaded, profile = load_profiled(workload, progress=not as_json, processors=processors)
        from sparseloom.zoo.load import profiled_zoos

        zoos = profiled_zoos(profile)
        report = bench_serve(loaded, profile, zoos, contenders=contenders, options=options,
                             progress=None if as_json else progress)
    except (KeyboardInterrupt, Exception) as interrupt:
        # Ctrl-C, wherever it came (also as another error it caused on its way): what was
        # measured is written and shown, marked incomplete (BenchInterrupted carries it;
        # before the first run nothing was), then the shell's status for Ctrl-C.
        if not isinstance(interrupt, KeyboardInterrupt) and not interrupts.pressed():
            raise
        report = (interrupt.report if isinstance(interrupt, BenchInterrupted)
                  else nothing_measured(workload, options))
        _emit(report, folder, as_json)
        click.echo(f"Interrupted (Ctrl-C): the report is incomplete "
                   f"({report['incomplete']['reason']})", err=True)
        raise click.exceptions.Exit(130) from None
    _emit(report, folder, as_json)


def _emit(report: dict[str, Any], folder: Path | None, as_json: bool) -> None:
    """Write the report to ``folder`` (when given) and print it (Markdown, or JSON)."""
    import json

    from sparseloom.cli.output import echo_json
    from sparseloom.evaluation.serve_report import headline_lines, render_markdown, write_figures

    markdown = render_markdown(report)
    if folder is not None:
        (folder / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (folder / "report.md").write_text(markdown)
        if report["scenarios"]:
            write_figures(report, folder)
    if as_json:
        echo_json(report)
        return
    click.echo(markdown)
    for line in headline_lines(report):
        click.echo(line)
    if folder is not None:
        click.echo(f"report: {folder / 'report.md'} (JSON: report.json, figures: serve_*.png)",
                   file=sys.stderr)
