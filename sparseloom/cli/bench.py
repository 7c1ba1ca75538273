"""``sparseloom bench``: micro-benchmarks. ``bench backends`` measures the backends' own costs.

Other subcommands join the :data:`bench` group from their own modules.
"""

from __future__ import annotations

import click

from sparseloom.cli.output import echo_json, echo_table


@click.group("bench")
def bench() -> None:
    """Micro-benchmarks of sparseloom's building blocks."""


@bench.command("backends")
@click.option("--processors", "processor_specs", default="ov:CPU,ort:CPU", show_default=True,
              help="Two or more processors, comma-separated.")
@click.option("--requests", type=click.IntRange(min=5), default=200, show_default=True,
              help="Requests per measurement.")
@click.option("--channels", type=click.IntRange(min=1), default=32, show_default=True,
              help="Width of the conv net (sets the per-request work).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def bench_backends(processor_specs: str, requests: int, channels: int, as_json: bool) -> None:
    """Per-call overhead of infer_async versus the bare runtime call, and the speed-up of
    running the processors in parallel versus one after the other, in one run."""
    from sparseloom.plugins.backends._bench import _BATCH_ROUNDS, benchmark_backends

    specs = [s.strip() for s in processor_specs.split(",") if s.strip()]
    report = benchmark_backends(specs, requests=requests, channels=channels)
    if as_json:
        echo_json(report)
        return
    click.echo(f"model: {report['model']}; {requests} requests per measurement")
    echo_table(
        ["processor", "cores", "bare ms", "infer_async ms", "overhead", "infer ms", "overhead",
         f"{requests} in flight ms/req", "vs bare back to back"],
        [[r["processor"], ",".join(map(str, r["cores"])) or "any", f"{r['bare_ms']:.3f}",
          f"{r['async_ms']:.3f}", f"{r['overhead_pct']:+.1f}%", f"{r['infer_ms']:.3f}",
          f"{r['infer_overhead_pct']:+.1f}%",
          f"{r['throughput']['async_ms_per_request']:.3f}",
          f"{r['throughput']['overhead_pct']:+.1f}% ({r['throughput']['bare_ms_per_request']:.3f})"]
         for r in report["overhead"]],
    )
    click.echo("latencies: medians, one request at a time; in flight: median ms per request "
               f"over {_BATCH_ROUNDS} interleaved rounds")
    parallel = report["parallel"]
    click.echo(
        f"parallel: {' + '.join(parallel['processors'])}: serial {parallel['serial_s']:.3f} s, "
        f"parallel {parallel['parallel_s']:.3f} s, speed-up x{parallel['speedup']:.2f} "
        f"(ideal x{parallel['ideal_speedup']:.2f})"
    )


COMMANDS = (bench,)
