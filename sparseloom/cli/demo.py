"""``sparseloom demo``: the main job on a workload, end to end, through the public commands."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.output import echo_table, ensure_output_dir
from sparseloom.cli.parsing import SAMPLES, SUBGRAPHS
from sparseloom.cli.placement_options import processors_option
from sparseloom.core.processors import openvino_cpu_precision


def peak_rss_bytes() -> int:
    """The largest resident set this process, or any child it waited for (a probe process, a
    workload build), has had so far (``getrusage``; 0 where it is absent)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return scale * max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                       resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


class _Steps:
    """The demo's numbered banners, with the time each step took and the peak memory reached
    by its end (printed at the end: where the demo's peak comes from)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.perf_counter()
        self.times: list[tuple[str, float]] = []
        self.peaks: list[int] = []
        self._current: tuple[str, float] | None = None

    def begin(self, text: str, short: str) -> None:
        from sparseloom.plugins.backends._memory import release_free_memory, rss_bytes

        self._finish()
        release_free_memory()  # what the last step freed goes back to the OS, not to its heap
        elapsed = time.perf_counter() - self.started
        click.secho(f"\n[{len(self.times) + 1}/{self.total}] {text}  "
                    f"(at {elapsed // 60:.0f}:{elapsed % 60:02.0f}, "
                    f"{rss_bytes() / 2**30:.2f} GiB resident)", bold=True)
        self._current = (short, time.perf_counter())

    def _finish(self) -> None:
        if self._current is not None:
            self.times.append((self._current[0], time.perf_counter() - self._current[1]))
            self.peaks.append(peak_rss_bytes())
            self._current = None

    def summary(self) -> str:
        self._finish()
        parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.times)
        line = f"demo finished in {time.perf_counter() - self.started:.0f} s ({parts})"
        if self.peaks and self.peaks[-1]:
            grew = ", ".join(f"{name} {peak / 2**30:.2f}" for (name, _), peak, before
                             in zip(self.times, self.peaks, [0, *self.peaks], strict=False)
                             if peak > before)
            line += (f"\npeak memory {self.peaks[-1] / 2**30:.2f} GiB (resident set; the peak "
                     f"so far, GiB, after each step that raised it: {grew})")
        return line


@click.command("demo")
@click.option("--workload", default="default", show_default=True,
              help="A bundled workload name or a workload TOML file.")
@click.option("--subgraphs", "-S", type=SUBGRAPHS, default=None,
              help="Subgraph positions S (default: the number of processors).")
@click.option("--variants", default=None,
              help="The zoos' variants, comma-separated, dense first (default: the workload "
                   "file's 'variants', else the default list of docs/zoo.md).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("out/demo"), show_default=True,
              help="Folder for the Pareto figures, CSVs and the validation report.")
@click.option("--sample", type=SAMPLES.at_least(0), default=200, show_default=True,
              help="Stitched variants measured per task for the Pareto figures.")
@processors_option("A processor spec to profile and serve on (repeat), as `sparseloom "
                   "profile -p`; default the workload's, else the default set, with OpenVINO "
                   "in the precision it picks for this CPU (bf16 where the CPU computes bf16).")
@click.pass_context
def demo_command(
    ctx: click.Context, workload: str, subgraphs: int | None, out_dir: Path, sample: int,
    variants: str | None = None, processors: tuple[str, ...] = (),
) -> None:
    """Build a workload's tasks and zoos, plot their Pareto fronts and validate the profiler.

    Every step is cached: a second run only re-measures what changed. The same steps are
    available one by one as `sparseloom workloads build`, `zoo build`, `zoo pareto` and
    `profile --validate`.
    """
    from sparseloom.api import load_workload
    from sparseloom.cli.devices import devices_command
    from sparseloom.cli.zoo import (
        _options,
        _processors,
        _subgraphs,
        plot_pareto,
        write_pareto_csv,
    )
    from sparseloom.cli.zoo import build_command as zoo_build_command
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.pareto import ParetoOptions, fastest_within, pareto_analysis

    ensure_output_dir(out_dir, "--out")  # before minutes of building and measuring, not after
    steps = _Steps(7)
    steps.begin("Processors", "processors")
    ctx.invoke(devices_command)
    steps.begin(f"Workload {workload!r}: real data, trained models (built on the first run, "
                "then taken from the cache)", "workload")
    _in_child("workloads", "build", workload)
    processors, why = demo_processors(workload, processors)
    click.echo(f"processors: {', '.join(processors)} ({why})" if processors else
               f"processors: {why}")
    steps.begin("Subgraph zoos: partition the dense model, compress each piece", "zoos")
    ctx.invoke(zoo_build_command, workload=workload, subgraphs=subgraphs, variants=variants)
    steps.begin("Stitched variants vs the originals (paper Fig. 4)", "pareto")
    loaded = load_workload(workload, progress=True)
    placed_on = _processors(loaded)
    count = _subgraphs(loaded, subgraphs)
    placement = [placed_on[j % len(placed_on)] for j in range(count)]
    rows = []
    for task in loaded.tasks:
        zoo = build_zoo(task, _options(loaded, count, variants))
        options = ParetoOptions(sample=sample)
        result = pareto_analysis(zoo, task, placement, options, progress=True)
        best = fastest_within(zoo, task, result, processor=options.evaluation_processor)
        write_pareto_csv(result, zoo, out_dir / f"pareto-{task.name}.csv")
        plot_pareto(result, zoo, out_dir / f"pareto-{task.name}.png")
        stitched = [p for p in result.points if not p.original]
        summary = result.summary()
        rows.append([
            task.name,
            f"{result.points[0].metric:.4f}",
            f"{max(p.metric for p in stitched):.4f}" if stitched else "-",
            f"{min(p.latency_ms for p in stitched):.3f}" if stitched else "-",
            f"{summary['beyond_front']}/{summary['stitched_sampled']}",
            f"{summary['above_best_accuracy']}",
            f"{summary['below_fastest_latency']}",
            f"x{best.speedup:.2f} ({','.join(map(str, best.choices))}, "
            f"{best.drop_points:+.2f} pt)" if best else "none",
        ])
    echo_table(
        ["task", "dense metric", "best stitched", "fastest stitched ms",
         "beyond originals' front", "above best original", "faster than fastest",
         "fastest within 1 pt, held out"],
        rows,
    )
    click.echo(f"figures and CSVs in {out_dir}/ (latency: summed per-subgraph medians on "
               f"{' -> '.join(placement)}; the last column: the fastest variant within 1 point "
               f"of dense on the rows selection never saw, its speed-up over dense)")
    steps.begin("Profiler: estimators validated against measured ground truth", "profile")
    # The demo skips the estimator ablation and repeated training draws of the full report
    # (`sparseloom profile WORKLOAD --validate`), which multiply its run time.
    click.echo(f"shortened validation: one training draw, no estimator ablation; the full "
               f"report is `sparseloom profile {workload} --validate`")
    _in_child("profile", workload, *(a for p in processors for a in ("-p", p)),
              *(("-S", str(subgraphs)) if subgraphs is not None else ()),
              *(("--variants", variants) if variants is not None else ()),
              "--validate", "--no-ablation", "--redraws", "1", "--out", str(out_dir / "profile"))
    from sparseloom.cli.bench_serve import serve_command
    from sparseloom.cli.run import run_command

    slos, queries = _demo_serving(workload, processors)
    steps.begin(f"Serving every task at once with `{DEMO_POLICY}` (the runtime), each task at "
                f"its dense metric − 1 point and {DEMO_K:g} × its isolated dense latency, "
                f"{queries} requests per task (the largest eval set, so the accuracy measured "
                f"is the served variant's, not a sample's), within a memory budget of "
                f"{DEMO_MEMORY_BUDGET} of full preloading", "run")
    ctx.invoke(run_command, workload=workload, policy=DEMO_POLICY, queries=queries,
               processors=processors, memory_budget=DEMO_MEMORY_BUDGET,
               slo_specs=tuple(f"{t}={s.accuracy!r},{s.latency_ms!r}" for t, s in slos.items()))
    steps.begin("sparseloom against the stock runtimes, side by side (`sparseloom bench serve "
                f"{workload} --quick --keep-loaded {DEMO_KEEP_LOADED}` without the steady "
                "state; the full benchmark is without --quick)", "bench")
    ctx.invoke(serve_command, workload=workload, quick=True, contenders=DEMO_CONTENDERS,
               scenarios=DEMO_SCENARIOS,
               processors=processors, out=out_dir / "bench", memory_budget=DEMO_MEMORY_BUDGET,
               keep_loaded=DEMO_KEEP_LOADED)
    click.echo("\n" + steps.summary())


def _in_child(*args: str) -> None:
    """``sparseloom ARGS`` in a child process, for a step whose memory this process would keep:
    building the workload imports PyTorch and reads the datasets (0.5 GiB kept when run in the
    demo's process), profiling loads every subgraph on every processor (0.37 GiB kept; AMD
    EPYC, 2026-12-03). Its output is echoed line by line as it comes; its progress bars and
    errors go to this process's standard error.

    :raises click.exceptions.Exit: the step failed (its own message is printed), with its
        status; 130 after Ctrl-C.
    """
    import os
    import subprocess

    with subprocess.Popen([sys.executable, "-m", "sparseloom", *args], stdout=subprocess.PIPE,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, text=True) as child:
        for line in child.stdout or ():  # (never None: stdout=PIPE)
            click.echo(line, nl=False)
    status = child.returncode
    if status != 0:
        raise click.exceptions.Exit(130 if status in (130, -2) else status)


#: What the demo serves with, at which latency multiplier, and whom it compares it with.
DEMO_POLICY = "sparseloom-loaded"
DEMO_K = 10.0
#: ``stock-tuned`` (measured once per benchmark: the grid and capacity take their latency SLOs
#: from its measurements anyway) in place of ``stock-ort-matched``; not ``picks-tuned``, which
#: measures every configuration again for each grid cell's picks: with both in place of
#: ``stock-ort-matched`` and ``picks-ort`` the demo peaked at 2.88 GiB (3.09 GB, over its 3 GB
#: bound) and the benchmark step took 260 s (2-vCPU AMD EPYC, 2026-12-03).
DEMO_CONTENDERS = ("sparseloom", "sparseloom-loaded", "stock-ort", "stock-ov",
                   "stock-tuned", "stock-ov-matched", "picks-ort")
#: The benchmark's scenarios in the demo: all but the steady state (two more runs per
#: contender), to keep the demo's time.
DEMO_SCENARIOS = ("closed", "capacity", "grid")
#: The memory budget the serving steps serve within, a fraction of full preloading: an edge
#: board's. At full preloading the benchmark step held 3.2 GiB with its seven contenders'
#: models loaded together on ``default``, at 0.5 2.4 GiB (AMD EPYC, 2026-12-03).
DEMO_MEMORY_BUDGET = "0.5"
#: What the benchmark step keeps loaded between its runs (``bench serve --keep-loaded``). Kept
#: whole, every contender's models and every grid cell's picks stay loaded until the step ends:
#: alone, the step peaked at 2.48 GiB, inside the demo at 2.96 GiB (3.18 GB, over its 3 GB
#: bound); within 400 MiB it peaked at 1.59 GiB alone and took 453 s instead of 392 s (157
#: models unloaded, 122 loaded again between runs, outside every run's figures; 2-vCPU AMD
#: EPYC Zen 4, commit ef54354, 2026-12-06). A model loaded again starts colder than one kept
#: warm, so single ``--quick`` runs read a little lower; the full benchmark keeps every model.
DEMO_KEEP_LOADED = "400MiB"


def demo_processors(workload: str, given: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """The processors the demo profiles and serves on, and why: those ``given``; else the
    workload's own; else the default set every command uses
    (:func:`~sparseloom.core.processors.default_processors`), told by the precision its
    OpenVINO CPU processor computes in."""
    from sparseloom.api import load_workload
    from sparseloom.core.processors import DEFAULT_PRECISION_HINT, default_processors

    if given:
        return given, "as given with --processor"
    if load_workload(workload, progress=False).processors:
        return (), f"the processors the workload {workload!r} names"
    defaults = default_processors()
    specs = ", ".join(p.name + (f" in {p.options['INFERENCE_PRECISION_HINT']}"
                                if "INFERENCE_PRECISION_HINT" in p.options else "")
                      for p in defaults)
    if any(p.options.get("INFERENCE_PRECISION_HINT") == DEFAULT_PRECISION_HINT for p in defaults):
        return (), (f"the default set, {specs}: OpenVINO in bf16, the precision OpenVINO picks "
                    "for this CPU (accuracy measured as served; `--processor ov:CPU --processor "
                    "ort:CPU` for f32)")
    precision = openvino_cpu_precision()
    return (), (f"the default set, {specs} (OpenVINO computes {precision or 'nothing'} on this "
                "CPU by default, as sparseloom's default OpenVINO processor does)")


def _demo_serving(workload: str, processors: tuple[str, ...] = ()
                  ) -> tuple[dict[str, Any], int]:
    """The serving step's SLOs and requests per task.

    SLOs: equal accuracy (dense − 1 point) and :data:`DEMO_K` × the isolated dense latency on
    the fastest processor, which some contender can meet with every task served at once.
    Requests: the largest eval set (at most the runtime's scoring window), so each task serves
    its whole eval set at least once and its measured accuracy is not that of a 100-row sample
    (2–4 points of standard error, against picks within a point of their SLO).
    """
    from sparseloom.cli.run import load_profiled
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.evaluation.serve_figures import dense_slos, isolated_dense_ms
    from sparseloom.runtime.stats import SCORE_WINDOW
    from sparseloom.zoo.load import profiled_zoos

    loaded, profile = load_profiled(workload, progress=False, processors=processors)
    zoos = profiled_zoos(profile)
    context = profile_context(loaded, profile, zoos)
    iso = isolated_dense_ms(context)
    queries = min(SCORE_WINDOW, max(task.num_eval for task in loaded.tasks))
    return dense_slos(context, {t: DEMO_K * ms for t, ms in iso.items()}), queries


COMMANDS = (demo_command,)
