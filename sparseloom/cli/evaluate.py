"""``sparseloom evaluate WORKLOAD`` (the §5 comparison) and ``sparseloom simulate WORKLOAD``."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.parsing import ORDERS, ROUNDS, SERVED_QUERIES, SIMULATED_QUERIES


def _progress(enabled: bool) -> Any:
    if not enabled:
        return None
    started = time.perf_counter()

    def show(done: int, total: int, label: str) -> None:
        width = 24
        filled = int(width * done / max(total, 1))
        click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                   f"{time.perf_counter() - started:.0f}s {label[:60]:<60}", err=True, nl=False)

    return show


@click.command("evaluate")
@click.argument("workload")
@click.option("--quick", is_flag=True,
              help="3 SLO configurations, 1 arrival order, 1 repeat, 20 queries (the tests' "
                   "setting); the rest of the grid simulated.")
@click.option("--contender", "contenders", multiple=True,
              help="Contender to run (repeat); default every registered policy + vanilla-ov, "
                   "vanilla-ort.")
@click.option("--exclude", multiple=True, help="Contender to leave out (repeat).")
@click.option("--orders", type=ORDERS, default=None,
              help="Arrival orders to sample (default all T!).")
@click.option("--queries", type=SERVED_QUERIES, default=None,
              help="Requests per task per run [default 100; 20 with --quick].")
@click.option("--repeats", type=ROUNDS, default=None,
              help="Runs per cell [default 3; 1 with --quick].")
@click.option("--slo-config", "slo_configs", multiple=True, type=click.IntRange(0, 24),
              help="SLO configuration (0-24) to run for real (repeat); the rest simulated "
                   "[default all 25; 0, 12, 24 with --quick].")
@click.option("--budget", "budgets", multiple=True, type=click.FloatRange(0, 1, min_open=True),
              help="Memory budget of the Fig. 14 sweep, a fraction of full preloading "
                   "(repeat) [default 0.05 0.15 0.35 0.55 0.75 1.0].")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("evaluation"), show_default=True,
              help="Output folder (runs are cached here; a rerun continues).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evaluate_command(workload: str, quick: bool, contenders: tuple[str, ...],
                     exclude: tuple[str, ...], orders: int | None, queries: int | None,
                     repeats: int | None, slo_configs: tuple[int, ...],
                     budgets: tuple[float, ...], out: Path, as_json: bool) -> None:
    """Compare sparseloom with the baselines, ADMS and vanilla OpenVINO / ONNX Runtime.

    Every contender is run by the real runtime over SLO configurations × arrival orders;
    writes Fig. 10/11/13/14/3 as PNG with their numbers as JSON/CSV under --out.
    """
    import attrs

    from sparseloom.cli.output import ensure_output_dir
    from sparseloom.cli.run import load_profiled
    from sparseloom.evaluation.harness import QUICK, EvalConfig
    from sparseloom.evaluation.harness import contenders as chosen_contenders
    from sparseloom.evaluation.report import evaluate_workload

    bad = [b for b in budgets if not math.isfinite(b)]
    if bad:
        raise click.UsageError(f"--budget must be a finite fraction in (0, 1], got {bad[0]}")
    ensure_output_dir(out)
    base = QUICK if quick else EvalConfig()
    changes: dict[str, Any] = {"contenders": contenders, "exclude": exclude}
    for name, value in (("orders", orders), ("queries", queries), ("repeats", repeats),
                        ("slo_configs", tuple(slo_configs) or None),
                        ("budgets", tuple(budgets) or None)):
        if value is not None:
            changes[name] = value
    config = attrs.evolve(base, **changes)
    chosen_contenders(config)  # unknown, repeated or no contenders: refused before any work
    interactive = sys.stderr.isatty() and not as_json
    loaded, profile = load_profiled(workload, progress=interactive)
    tables = evaluate_workload(loaded, profile, out, config,
                               progress=_progress(not as_json))
    if not as_json:
        click.echo("", err=True)
    if as_json:
        echo_json(tables)
        return
    rows = [[r["contender"], f"{100 * r['violation_rate']:.1f}",
             f"{100 * r['violation_rate_measured']:.1f}", f"{r['throughput_rps']:.1f}",
             f"{r['pipeline_share']:.2f}", r["cells_measured"], r["cells_simulated"]]
            for r in tables["contenders"]]
    echo_table(["contender", "violation %", "measured only %", "throughput rps",
                "pipeline share", "measured", "simulated"], rows)
    check = tables["validation"]
    throughput = 100 * check["mean_abs_throughput_error"]
    points = check["mean_abs_violation_error_points"]
    click.echo(f"simulator vs measured: throughput error {throughput:.1f}% (mean |rel|), "
               f"violation error {points:.1f} points")
    click.echo(f"tables and figures: {out}")


@click.command("simulate")
@click.argument("workload")
@click.option("--device-file", default="core-ultra-soc", show_default=True,
              help="A device TOML path, or the name of a bundled one.")
@click.option("--policy", "policies", multiple=True,
              help="Policy to simulate (repeat); default every registered policy.")
@click.option("--queries", type=SIMULATED_QUERIES, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def simulate_command(workload: str, device_file: str, policies: tuple[str, ...], queries: int,
                     as_json: bool) -> None:
    """Simulate WORKLOAD's measured profile on a SoC described by a device file.

    Every task takes the middle of its SLO grid; tasks join in file order.
    """
    from sparseloom.cli.run import load_profiled
    from sparseloom.core.registry import get_registry
    from sparseloom.evaluation.devices import apply_device, load_device_file
    from sparseloom.evaluation.harness import slo_configurations
    from sparseloom.evaluation.simulator import SimConfig, simulate

    device = load_device_file(device_file)
    _, measured = load_profiled(workload, progress=sys.stderr.isatty() and not as_json)
    profile = apply_device(measured, device)
    slos = slo_configurations(profile)[12]
    names = list(policies) or sorted(r.name for r in get_registry().policies())
    order = tuple(profile.tasks) if len(profile.tasks) > 1 else ()
    results = {name: simulate(profile, SimConfig(policy=name, slos=slos, queries=queries,
                                                 arrival_order=order)).to_dict()
               for name in names}
    if as_json:
        echo_json({"device": device.name, "processors": list(profile.processors),
                   "results": results})
        return
    echo_table(["policy", "violation %", "throughput rps", "pipeline share", "decision ms"],
               [[n, f"{100 * r['violation_rate']:.1f}", f"{r['throughput_rps']:.1f}",
                 f"{r['pipeline_share']:.2f}", f"{1e3 * r['decision_seconds']:.2f}"]
                for n, r in results.items()])


@click.command("sweep")
@click.option("--workload", default="default", show_default=True,
              help="Measured workload to scale onto --device-file as an extra case ('' "
                   "for synthetic cases only).")
@click.option("--device-file", default="core-ultra-soc", show_default=True,
              help="A device TOML path, or the name of a bundled one.")
@click.option("--policy", "policies", multiple=True,
              help="Policy to simulate (repeat); default every registered policy.")
@click.option("--queries", type=SIMULATED_QUERIES, default=50, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write sweep.json and sweep.csv here.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def sweep_command(workload: str, device_file: str, policies: tuple[str, ...], queries: int,
                  out: Path | None, as_json: bool) -> None:
    """Simulate every policy at scales the paper does not run (T=16, V=20, S=4, P=4).

    Synthetic profiles, one factor scaled up from T=4 S=3 V=10 P=3 at a time, plus WORKLOAD's
    measured profile on the device file; violation, throughput and optimizer time per policy.
    """
    from sparseloom.cli.output import ensure_output_dir
    from sparseloom.cli.run import load_profiled
    from sparseloom.evaluation.devices import load_device_file
    from sparseloom.evaluation.results import write_tables
    from sparseloom.evaluation.sweeps import scale_sweep, sweep_cases

    if out is not None:
        ensure_output_dir(out)
    device = load_device_file(device_file)
    measured = None
    if workload:
        _, measured = load_profiled(workload, progress=sys.stderr.isatty() and not as_json)
    show = None if as_json else (lambda label: click.echo(f"\r{label[:70]:<70}", err=True,
                                                         nl=False))
    rows = scale_sweep(sweep_cases(measured, device), policies, queries=queries,
                       progress=show)
    if out is not None:
        write_tables(out, {"sweep": rows})
    if as_json:
        echo_json(rows)
        return
    click.echo("", err=True)
    echo_table(["case", "policy", "violation %", "throughput rps", "decision ms"],
               [[r["case"], r["policy"], f"{100 * r['violation_rate']:.1f}",
                 f"{r['throughput_rps']:.1f}", f"{r['decision_ms']:.2f}"] for r in rows])


COMMANDS = (evaluate_command, simulate_command, sweep_command)
