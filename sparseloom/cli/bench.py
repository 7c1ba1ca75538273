"""``sparseloom bench``: micro-benchmarks. ``bench backends`` measures the backends' own costs.

Other subcommands join the :data:`bench` group from their own modules.
"""

from __future__ import annotations

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.parsing import CALLS, ROUNDS, BoundedInt, CheckedGroup


@click.group("bench", cls=CheckedGroup)
def bench() -> None:
    """Micro-benchmarks of sparseloom's building blocks."""


@bench.command("backends")
@click.option("--processors", "processor_specs", default="ov:CPU,ort:CPU", show_default=True,
              help="Two or more processors, comma-separated.")
@click.option("--requests", type=CALLS.at_least(5), default=200, show_default=True,
              help="Requests per measurement.")
@click.option("--channels", type=BoundedInt(1, 4096, "wider is only slower"), default=32,
              show_default=True,
              help="Width of the conv net (sets the per-request work).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def bench_backends(processor_specs: str, requests: int, channels: int, as_json: bool) -> None:
    """Per-call overhead of infer_async versus the bare runtime call, and the speed-up of
    running the processors in parallel versus one after the other, in one run."""
    from sparseloom.cli.parsing import comma_items
    from sparseloom.core.errors import ConfigError
    from sparseloom.core.processors import check_distinct
    from sparseloom.plugins.backends._bench import _BATCH_ROUNDS, benchmark_backends

    specs = comma_items(processor_specs, "--processors", "ov:CPU,ort:CPU")
    check_distinct(specs, "--processors")
    if len(specs) < 2:
        raise ConfigError(f"--processors {processor_specs!r} names one processor; the benchmark "
                          "compares running processors in parallel, so it needs two or more, "
                          "e.g. ov:CPU,ort:CPU (see `sparseloom devices`)")
    report = benchmark_backends(specs, requests=requests, channels=channels)
    if as_json:
        echo_json(report)
        return
    click.echo(f"model: {report['model']}; {requests} requests per measurement")
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1f}%"

    echo_table(
        ["processor", "cores", "bare ms", "infer_async ms", "overhead", "infer ms", "overhead",
         f"{requests} in flight ms/req", "vs bare back to back"],
        [[r["processor"], ",".join(map(str, r["cores"])) or "any", ms(r["bare_ms"]),
          ms(r["async_ms"]), pct(r["overhead_pct"]), ms(r["infer_ms"]),
          pct(r["infer_overhead_pct"]), ms(r["throughput"]["async_ms_per_request"]),
          f"{pct(r['throughput']['overhead_pct'])} "
          f"({ms(r['throughput']['bare_ms_per_request'])})"]
         for r in report["overhead"]],
    )
    if any(r["bare_ms"] is None for r in report["overhead"]):
        click.echo("bare: '-' where the backend is not built in (the backend contract has no "
                   "bare runtime call to compare with)")
    click.echo("latencies: medians, one request at a time; in flight: median ms per request "
               f"over {_BATCH_ROUNDS} interleaved rounds")
    parallel = report["parallel"]
    click.echo(
        f"parallel: {' + '.join(parallel['processors'])}: serial {parallel['serial_s']:.3f} s, "
        f"parallel {parallel['parallel_s']:.3f} s, speed-up x{parallel['speedup']:.2f} "
        f"(ideal x{parallel['ideal_speedup']:.2f})"
    )


@bench.command("runtime")
@click.argument("workload", default="tiny")
@click.option("--processor", "-p", default=None,
              help="The processor to serve on (default: the profile's first).")
@click.option("--requests", type=CALLS.at_least(10), default=200, show_default=True,
              help="Requests per round.")
@click.option("--rounds", type=ROUNDS, default=5, show_default=True,
              help="Interleaved rounds (runtime, bare) per task.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def bench_runtime(workload: str, processor: str | None, requests: int, rounds: int,
                  as_json: bool) -> None:
    """One task on one processor through the runtime against a bare loop over the same
    runtime sessions on the same pinned core, side by side in one run (goal: <= 5%)."""
    from sparseloom.cli.run import load_profiled
    from sparseloom.runtime.bench import benchmark_runtime

    loaded, profile = load_profiled(workload, progress=not as_json)
    report = benchmark_runtime(loaded, profile, processor=processor, requests=requests,
                               rounds=rounds)
    if as_json:
        echo_json(report)
        return
    click.echo(f"workload {report['workload']} on {report['processor']}: closed loop, batch 1, "
               f"dense variant, medians of {rounds} interleaved rounds")
    echo_table(["task", "S", "requests", "bare loop ms/req", "runtime ms/req", "overhead",
                "goal"],
               [[r["task"], r["positions"], r["requests"], f"{r['bare_ms']:.4f}",
                 f"{r['runtime_ms']:.4f}", f"{r['overhead_pct']:+.1f}%",
                 "met" if r["overhead_pct"] <= r["goal_pct"] else f"> {r['goal_pct']:.0f}%"]
                for r in report["tasks"]])



@bench.command("policies")
@click.option("--policy", "policies", multiple=True,
              help="Policy to time (repeat); default sparseloom.")
@click.option("--repeats", type=ROUNDS, default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_policies(policies: tuple[str, ...], repeats: int, as_json: bool) -> None:
    """Decision time of placement policies on synthetic profile tables (docs/plan.md)."""
    from sparseloom.plan.bench import bench_policies as run

    rows = run(list(policies) or None, repeats=repeats)
    if as_json:
        echo_json(rows)
        return
    echo_table(["policy", "T", "V", "S", "P", "decision", "goal", "met"], [
        [r["policy"], r["tasks"], r["variants"], r["positions"], r["processors"],
         f"{r['decision_seconds'] * 1e3:.2f} ms", f"< {r['goal_seconds'] * 1e3:.0f} ms",
         "yes" if r["met"] else "NO"] for r in rows])


COMMANDS = (bench,)


def _add_serve() -> None:
    from sparseloom.cli.bench_compressors import compressors_command
    from sparseloom.cli.bench_memory import memory_command
    from sparseloom.cli.bench_serve import serve_command

    bench.add_command(serve_command)
    bench.add_command(memory_command)
    bench.add_command(compressors_command)


_add_serve()
