"""``sparseloom bench memory``: bytes per session against bytes of weights, per backend, and
the server's total against its budget (:mod:`sparseloom.evaluation.memory_bench`)."""

from __future__ import annotations

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.parsing import parse_budget
from sparseloom.cli.placement_options import processors_option

_MIB = float(1 << 20)


def _mib(value: float) -> str:
    return f"{value / _MIB:.1f}"


def _ratio(value: float, weights: float) -> str:
    return f"{value / weights:.2f}x" if weights else "-"


@click.command("memory")
@click.argument("workload", default="default")
@click.option("--policy", default="sparseloom-loaded", show_default=True,
              help="The policy of the serving measurement.")
@click.option("--budget", "budgets", multiple=True,
              help="A memory budget to serve at (repeat; a fraction such as 0.5 or a size "
                   "such as 1GiB) [default: 1.0 and 0.5].")
@processors_option("A processor spec to measure and serve on (repeat); default: the "
                   "profile's.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def memory_command(workload: str, policy: str, budgets: tuple[str, ...],
                   processors: tuple[str, ...], as_json: bool) -> None:
    """What a loaded model costs against its weights, and the server against its budget.

    Per task and processor: two sessions of the dense model's batch-1 copy (weights mapped)
    and of the model file with its weights inside, each pair in a fresh process; then a
    server started at each --budget: what its loads measured against the weights it holds.
    """
    import attrs

    from sparseloom.cli.run import load_profiled
    from sparseloom.core.processors.cores import cpu_name
    from sparseloom.evaluation.memory_bench import serving_cost, session_costs

    loaded, profile = load_profiled(workload, progress=not as_json, processors=processors)
    sessions = session_costs(loaded, profile, processors)
    serving = [serving_cost(loaded, profile, policy=policy, budget=parse_budget(text),
                            processors=processors) for text in (budgets or ("1.0", "0.5"))]
    if as_json:
        echo_json({"workload": workload, "policy": policy, "machine": cpu_name(),
                   "sessions": [attrs.asdict(row) for row in sessions],
                   "serving": [attrs.asdict(row) for row in serving]})
        return
    click.echo(f"{workload} on {cpu_name()}: MiB (PSS growth over load and one request)")
    echo_table(
        ["task", "processor", "weights", "mapped 1st", "mapped 2nd", "2nd / weights",
         "embedded 1st", "embedded 2nd", "2nd / weights"],
        [[row.task, row.processor, _mib(row.weights_bytes), _mib(row.mapped[0]),
          _mib(row.mapped[1]), _ratio(row.mapped[1], row.weights_bytes),
          _mib(row.embedded[0]), _mib(row.embedded[1]),
          _ratio(row.embedded[1], row.weights_bytes)] for row in sessions])
    click.echo(f"\nserving with {policy}: MiB")
    echo_table(
        ["budget", "budget MiB", "loaded", "weights held", "loaded / weights", "RSS growth",
         "models", "left out", "within", "plan gave up"],
        [[str(row.budget), _mib(row.budget_bytes), _mib(row.loaded_bytes),
          _mib(row.weights_bytes), _ratio(row.loaded_bytes, row.weights_bytes),
          _mib(row.rss_growth_bytes), row.models, row.left_out,
          "yes" if row.loaded_bytes <= row.budget_bytes else "NO",
          ", ".join(row.reshaped) or "-"] for row in serving])
