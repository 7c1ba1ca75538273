"""``sparseloom demo`` runs every step end to end (on ``tiny``; ``make demo`` uses ``default``)."""

from __future__ import annotations

from click.testing import CliRunner

from sparseloom.cli import cli
from sparseloom.zoo.variants import DEFAULT_VARIANTS


def test_demo_runs_every_step_on_tiny(tmp_path):
    result = CliRunner().invoke(
        cli, ["demo", "--workload", "tiny", "--sample", "30", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    for step in ("[1/7] Processors", "[2/7] Workload 'tiny'", "[3/7] Subgraph zoos",
                 "[4/7] Stitched variants", "[5/7] Profiler", "[6/7] Serving",
                 "[7/7] sparseloom against the stock runtimes"):
        assert step in result.output
    # It says which processors it profiles and serves on, and why.
    from sparseloom.cli.demo import openvino_cpu_precision

    line = next(x for x in result.output.splitlines() if x.startswith("processors: "))
    assert ("ov:CPU in bf16" in line) == (openvino_cpu_precision() == "bf16")
    assert (tmp_path / "pareto-tiny.png").stat().st_size > 0
    rows = (tmp_path / "pareto-tiny.csv").read_text().splitlines()
    assert rows[0].startswith("kind,choices") and len(rows) == 1 + len(DEFAULT_VARIANTS) + 30
    assert "top-10 recall" in result.output
    # Every eval row served once: the accuracy measured is the variant's, not a sample's.
    from sparseloom.workload.load import load_workload

    served = load_workload("tiny", progress=False).task("tiny").num_eval
    assert f"{served} requests per task (the largest eval set" in result.output
    assert f"submitted {served} = completed {served} + failed 0" in result.output
    # The closing lines: one per scenario and sparseloom policy against the best stock runtime
    # of this very run, and the report they come from.
    closing = [line for line in result.output.splitlines()
               if "sparseloom-loaded" in line and "best stock runtime" in line]
    for scenario in ("closed", "capacity", "grid"):
        assert any(line.startswith(f"{scenario}: ") for line in closing), closing
    report = tmp_path / "bench" / "report.json"
    assert report.is_file()


def test_demo_processors_are_those_given_else_the_default_set():
    from sparseloom.cli import demo

    given = ("ort:CPU",)
    assert demo.demo_processors("tiny", given) == (given, "as given with --processor")
    # Not given: the default set every other command uses (no spec of its own), and why.
    chosen, why = demo.demo_processors("tiny", ())
    assert chosen == () and "default set" in why
    assert ("bf16" in why) == (demo.openvino_cpu_precision() == "bf16")
    assert demo.openvino_cpu_precision() in ("bf16", "f32", "f16", "")
