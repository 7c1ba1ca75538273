"""A third-party plugin that raises is contained, run as a user would.

The plugins of :mod:`tests.plugins.failing` are installed as a distribution and autoloaded.
Each failure is one ``Error:`` line naming the plugin, its distribution and what it raised;
``SPARSELOOM_DEBUG=1`` adds the traceback; an observer that raises is reported once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_bad_inputs import refused, run_cli
from tests.plugin_dists import REPO
from tests.plugins.failing import DISTRIBUTION, failing_distribution


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that autoloads the failing plugins' distribution."""
    root = failing_distribution(tmp_path_factory.mktemp("failing-dist"))
    path = os.pathsep.join(p for p in (str(root), str(REPO),
                                       os.environ.get("PYTHONPATH", "")) if p)
    return {"SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "0", "PYTHONPATH": path}


def test_a_backend_that_raises_is_one_line_naming_it(plugin_env: dict[str, str]) -> None:
    from sparseloom.api import load_workload

    model = Path(load_workload("tiny", progress=False).tasks[0].info["cache_dir"]) / "model.onnx"
    for point in ("compile", "load", "infer"):  # devices: below
        proc = run_cli(["infer", model, "-p", f"fail-{point}:CPU", "--repeat", "1"],
                       **plugin_env)
        refused(proc, f"backend 'fail-{point}'", DISTRIBUTION, "6.6.6", f"{point}()",
                f"RuntimeError: injected {point} failure", "SPARSELOOM_DEBUG=1")
    refused(run_cli(["infer", model, "-p", "fail-devices:CPU"], **plugin_env),
            "processor 'fail-devices:CPU'", "could not list its devices", DISTRIBUTION,
            "devices()", "injected devices failure")
    debug = run_cli(["infer", model, "-p", "fail-load:CPU"], **plugin_env, SPARSELOOM_DEBUG="1")
    assert debug.returncode == 1 and "Traceback" in debug.stderr, debug.stderr
    assert "in load" in debug.stderr, debug.stderr  # the plugin's own frame
    assert [line.startswith("Error:") for line in debug.stderr.splitlines()].count(True) == 1


def test_a_policy_that_raises_is_one_line_naming_it(plugin_env: dict[str, str]) -> None:
    refused(run_cli(["plan", "tiny", "--policy", "fail-plan"], **plugin_env),
            "policy 'fail-plan'", DISTRIBUTION, "plan()", "injected plan failure")
    refused(run_cli(["plan", "tiny", "--policy", "fail-factory"], **plugin_env),
            "policy 'fail-factory'", DISTRIBUTION, "its factory", "injected factory failure")
    refused(run_cli(["workloads", "build", "fail-workload"], **plugin_env),
            "workload 'fail-workload'", DISTRIBUTION, "its factory", "injected factory failure")
    refused(run_cli(["simulate", "tiny", "--policy", "fail-plan"], **plugin_env),
            "policy 'fail-plan'", DISTRIBUTION, "plan()", "injected plan failure")
    refused(run_cli(["run", "tiny", "--policy", "fail-plan", "--queries", "5"], **plugin_env),
            "policy 'fail-plan'", DISTRIBUTION, "plan()", "injected plan failure")


def test_an_observer_that_raises_is_reported_once(plugin_env: dict[str, str]) -> None:
    # Every one of the 30 requests misses a 1 µs SLO: the observer is called once only.
    proc = run_cli(["run", "tiny", "--queries", "30", "--slo", "tiny=0,0.001"], **plugin_env)
    assert "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "sparseloom_slo_violation" in line]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("Warning: observer") and DISTRIBUTION in warnings[0]
    assert "injected observer failure" in warnings[0] and "not called again" in warnings[0]


def test_a_policy_whose_on_feedback_raises_is_reported_once(plugin_env: dict[str, str]) -> None:
    proc = run_cli(["run", "tiny", "--policy", "fail-feedback", "--queries", "100",
                    "--slo", "tiny=0,0.001"], **plugin_env)
    assert "Traceback" not in proc.stderr, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "on_feedback" in line]
    assert len(notes) == 1, proc.stdout
    assert "policy 'fail-feedback'" in notes[0] and DISTRIBUTION in notes[0]
    assert "not called again" in notes[0]


def test_an_estimator_that_raises_is_one_line_naming_it(plugin_env: dict[str, str]) -> None:
    for point in ("fit", "predict"):
        refused(run_cli(["profile", "tiny", "--accuracy-estimator", f"fail-{point}"],
                        **plugin_env),
                f"accuracy estimator 'fail-{point}'", DISTRIBUTION, f"{point}()",
                f"RuntimeError: injected {point} failure")


def test_a_compressor_that_raises_is_one_line_naming_it(plugin_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    import shutil

    import numpy as np

    from sparseloom.api import load_workload

    entry = Path(load_workload("tiny", progress=False).tasks[0].info["cache_dir"])
    shutil.copy(entry / "model.onnx", tmp_path / "model.onnx")
    with np.load(entry / "eval.npz") as data:
        np.savez(tmp_path / "eval.npz", image=data["image"][:64], labels=data["labels"][:64])
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\nvariants = ["dense", "failcompress"]\n[[task]]\n'
                        'name = "t"\nmodel = "model.onnx"\ndata = "eval.npz"\n')
    proc = run_cli(["zoo", "build", workload], cache=tmp_path / "cache", **plugin_env)
    line = refused(proc, "task 't', position 0", "compressor 'failcompress'", DISTRIBUTION,
                   "compress()", "injected compress failure")
    assert line.count("failcompress") == 2, line  # the variant and the compressor, once each
