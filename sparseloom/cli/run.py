"""``sparseloom run WORKLOAD``: serve a workload's tasks at once and print the run summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sparseloom.cli.output import echo_json
from sparseloom.cli.parsing import (
    MAX_DURATION_S,
    MAX_SERVED_QUERIES,
    SEED,
    SERVED_QUERIES,
    WINDOW,
    BoundedFloat,
    comma_items,
    finite_options,
)
from sparseloom.cli.placement_options import placement_options, read_placement

if TYPE_CHECKING:
    from sparseloom.runtime.load import LoadKind


def _arrival_order(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(comma_items(value, "--arrival-order", "vision,speech", unique=True))


@click.command("run")
@click.argument("workload")
@placement_options("Processor to serve on (repeat); default: the profile's. A spec with "
                   "options (ov:CPU?INFERENCE_PRECISION_HINT=bf16) is profiled and served as "
                   "given, as `sparseloom profile -p` takes it.")
@click.option("--queries", type=int, default=None,
              help="Requests per task [default: 100, or unlimited with --duration].")
@click.option("--load", "load_kind", type=click.Choice(["closed", "poisson"]),
              default="closed", show_default=True)
@click.option("--rate", type=BoundedFloat(None, 10**6, why="requests per second per task"),
              default=None,
              help="Poisson arrivals per second per task (with --load poisson).")
@click.option("--arrival-order", default=None, metavar="TASK,TASK,...",
              help="Tasks join one after another in this order (the plan is remade at each).")
@click.option("--join-after", type=SERVED_QUERIES, default=None,
              help="Requests the last joined task completes before the next joins.")
@click.option("--duration", type=BoundedFloat(None, MAX_DURATION_S, why="at most 30 days"),
              default=None,
              help="Stop issuing after SECONDS; shows a live view while it serves.")
@click.option("--inject-faults", type=click.FloatRange(0.0, 1.0), default=0.0,
              help="Fail this fraction of model calls on purpose (tests, demos).")
@click.option("--window", type=WINDOW, default=20, show_default=True,
              help="Requests in each task's SLO monitor window.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write requests.csv (every request's record, streamed as it ends) and "
                   "summary.json here.")
def run_command(workload: str, policy: str, slo_specs: tuple[str, ...], memory_budget: str,
                processors: tuple[str, ...], paired_gate: bool, queries: int | None,
                load_kind: LoadKind, rate: float | None, arrival_order: str | None,
                join_after: int | None, duration: float | None, inject_faults: float,
                window: int, seed: int, as_json: bool, out: Path | None) -> None:
    """Serve WORKLOAD's tasks concurrently on the processors and print the run summary.

    Plans with --policy from the workload's profile (built and cached on first use), preloads
    within --memory-budget, offers the load, and reports per task the variant served, its
    measured accuracy, latency percentiles, throughput and SLO verdict (docs/runtime.md).
    """
    from sparseloom.cli.output import ensure_output_dir
    from sparseloom.core.errors import ConfigError
    from sparseloom.runtime.executor import RuntimeOptions
    from sparseloom.runtime.load import LoadSpec

    finite_options(rate=rate, duration=duration, inject_faults=inject_faults)
    if queries is not None and queries < 1:
        raise ConfigError(f"--queries must be at least 1, got {queries}")
    if queries is not None and queries > MAX_QUERIES:
        raise ConfigError(f"--queries {queries} is more than {MAX_QUERIES:,} requests per task, "
                          "days of serving; to serve for a set time use --duration SECONDS")
    if rate is not None and load_kind != "poisson":
        raise ConfigError("--rate sets the arrival rate of --load poisson; add --load poisson, "
                          "or drop --rate (a closed loop issues the next request on completion)")
    if join_after is not None and not arrival_order:
        raise ConfigError("--join-after counts completions before the next task of "
                          "--arrival-order joins; add --arrival-order TASK,TASK,... or drop it")
    if rate is not None and rate <= 0:
        raise ConfigError(f"--rate must be > 0 requests per second per task, got {rate:g}")
    if load_kind == "poisson" and rate is None:
        raise ConfigError("--load poisson needs --rate (requests per second per task)")
    if duration is not None and duration <= 0:
        raise ConfigError(f"--duration must be > 0 seconds, got {duration:g}")
    parsed_slos, budget = read_placement(policy, slo_specs, memory_budget)
    order = _arrival_order(arrival_order)
    if out is not None:
        ensure_output_dir(out)
    spec = LoadSpec(load_kind, queries if queries is not None else (None if duration else 100),
                    rate, duration, order, join_after, seed)
    _announce_long_load(spec)
    live = None
    if duration is not None and not as_json:
        import functools

        from sparseloom.cli.live import live_view

        live = functools.partial(live_view, terminal=sys.stdout.isatty(), duration_s=duration)
    result = _serve(workload, policy, parsed_slos, budget, processors, spec,
                    RuntimeOptions(window=window, fault_rate=inject_faults, fault_seed=seed),
                    progress=not as_json and sys.stderr.isatty(), live=live,
                    records_path=out / "requests.csv" if out is not None else None,
                    paired_gate=paired_gate)
    from sparseloom.runtime.report import as_json as summary_json
    from sparseloom.runtime.report import render

    data = summary_json(result.summary)
    if out is not None:  # requests.csv was written as the requests ended
        import json

        (out / "summary.json").write_text(json.dumps(data, indent=2, default=str))
    if as_json:
        echo_json(data)
    else:
        click.echo(render(result.summary))
        if out is not None:
            click.echo(f"per-request records: {out / 'requests.csv'}")
    _exit_status(result)


#: The most requests per task (:data:`~sparseloom.cli.parsing.MAX_SERVED_QUERIES`).
MAX_QUERIES = MAX_SERVED_QUERIES
#: A load expected to run longer than this is announced, with its length and end time.
ANNOUNCE_AFTER_S = 10.0


def _announce_long_load(spec: Any) -> None:
    """Say on stderr how long a long load will run (a slow Poisson rate is silent otherwise)."""
    import datetime

    expected_s, bound = spec.duration_s, "at most"
    if spec.kind == "poisson" and spec.queries and spec.rate:
        arrivals_s = spec.queries / spec.rate
        if expected_s is None or arrivals_s < expected_s:
            expected_s, bound = arrivals_s, "about"
    if expected_s is None or expected_s <= ANNOUNCE_AFTER_S:
        return
    ends = datetime.datetime.now() + datetime.timedelta(seconds=expected_s)
    length = str(datetime.timedelta(seconds=round(expected_s)))
    click.echo(f"Note: this load runs {bound} {length} (h:mm:ss), until about "
               f"{ends:%Y-%m-%d %H:%M}; a progress bar shows on a terminal, and Ctrl-C stops "
               "it and prints the summary so far", err=True)


def _exit_status(result: Any) -> None:
    """Exit 130 after Ctrl-C and 1 when every request failed (the summary is printed first)."""
    from sparseloom.core.errors import RuntimeServeError
    from sparseloom.runtime.summary import INTERRUPTED

    summary = result.summary
    if INTERRUPTED in summary.reasons:
        click.echo("Interrupted: the summary above covers the requests served until Ctrl-C",
                   err=True)
        click.get_current_context().exit(130)
    if summary.submitted and summary.completed == 0:
        first = next((r.reason for r in result.records if r.reason), "no reason recorded")
        raise RuntimeServeError(
            f"every one of the {summary.submitted} request(s) failed, first: {first}; the "
            "summary above names the processors down and the plan (check `sparseloom devices`, "
            "or drop --inject-faults)")


def load_profiled(workload: str, *, progress: bool, processors: tuple[str, ...] = ()
                  ) -> tuple[Any, Any]:
    """The workload and its profile (built with the workload's ``[profile]`` options and
    cached, exactly as `sparseloom profile WORKLOAD [-p SPEC ...]` builds it)."""
    from sparseloom.api import build_profile, load_workload
    from sparseloom.cli.profile import profile_options

    loaded = load_workload(workload, progress=progress)
    return loaded, build_profile(loaded, processors=list(processors) or None,
                                 options=profile_options(loaded), progress=progress)


def _serve(workload: str, policy: str, slos: dict[str, Any], budget: float | int,
           processors: tuple[str, ...], spec: Any, runtime_options: Any, *, progress: bool,
           live: Any = None, records_path: Path | None = None, paired_gate: bool = True
           ) -> Any:
    from sparseloom.core.errors import ConfigError
    from sparseloom.runtime.session import RunConfig, serve
    from sparseloom.runtime.summary import RunInterrupted

    # Names select among the default profile's processors; a spec with options is profiled as
    # given, so that the plan and the runtime use what was measured (never a bf16 processor
    # served from an f32 profile).
    specs = processors if any("?" in p for p in processors) else ()
    loaded, profile = load_profiled(workload, progress=progress, processors=specs)
    unknown = sorted(set(slos) - set(loaded.task_names))
    if unknown:
        raise ConfigError(f"--slo names unknown task(s) {', '.join(map(repr, unknown))}; "
                          f"{loaded.name!r} has tasks: {', '.join(loaded.task_names)}")
    config = RunConfig(policy=policy, slos=slos, memory_budget=budget,
                       processors=processors, load=spec, options=runtime_options,
                       progress=progress, live=live, records_path=records_path,
                       paired_gate=paired_gate)
    try:
        return serve(loaded, profile, config)
    except RunInterrupted as interrupted:  # the summary so far is printed, then exit 130
        return interrupted.partial


COMMANDS = (run_command,)
