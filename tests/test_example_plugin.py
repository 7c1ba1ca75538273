"""The example plugin, pip-installed from a wheel, in every role through the CLI.

The wheel is built offline from ``examples/sparseloom-example-plugin`` and installed with pip
into a temporary target folder, which is put on ``PYTHONPATH`` of ``sparseloom`` subprocesses
with plugin autoloading on. Then: its backend ``ortx`` runs ``infer`` and a ``zoo eval``; its
compressor ``rounding`` builds variants that a profile and a plan contain; its estimator
``knn`` drives that profile; its policy ``fastest-dense`` makes the plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from sparseloom.profile.table import ProfileTable
from tests.plugin_dists import install_example_plugin
from tests.plugins.backends.models import linear_model, linear_weights

DIST = "sparseloom-example-plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example_plugin(tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "example.toml"
    path.write_text('variants = ["dense", "rounding"]\n\n[compressors.rounding]\n'
                    'symmetric = false\n\n[profile]\naccuracy_estimator = "knn"\n'
                    'samples = 6\n\n[[task]]\nname = "tiny"\nbuilder = "tiny"\n')
    return path


def sparseloom(site: Path, *args: str, code: str | None = None) -> str:
    """Run ``sparseloom ARGS`` (or ``python -c CODE``) with the plugin installed; stdout."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "sparseloom",
                                                          *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_kind_is_listed_from_the_wheel(site: Path) -> None:
    rows = json.loads(sparseloom(site, "plugins", "--json"))
    mine = {(r["kind"], r["name"]) for r in rows if r.get("distribution") == DIST}
    assert mine == {("backend", "ortx"), ("compressor", "rounding"), ("estimator", "knn"),
                    ("policy", "fastest-dense")}


def test_backend_runs_infer(site: Path, tmp_path: Path) -> None:
    model, inputs = tmp_path / "linear.onnx", tmp_path / "x.npz"
    onnx.save(linear_model(features=6, outputs=3), model)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    np.savez(inputs, x=x)
    report = json.loads(sparseloom(site, "infer", str(model), "-p", "ortx:CPU", "--input",
                                   str(inputs), "--output", str(tmp_path / "y.npz"),
                                   "--repeat", "2", "--json"))
    assert report["processor"] == "ortx:CPU"
    assert report["executed_by"] == ["CPUExecutionProvider"]
    weight, bias = linear_weights(6, 3, 0)
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], x @ weight + bias, rtol=1e-5,
                               atol=1e-5)


def test_backend_is_opt_in_and_evaluates_a_zoo_of_the_compressor(site: Path,
                                                                 workload: Path) -> None:
    devices = {d["name"]: d for d in json.loads(sparseloom(site, "devices", "--json"))}
    assert devices["ortx:CPU"]["available"] and devices["ortx:CPU"]["threads"] == 1
    [built] = json.loads(sparseloom(site, "zoo", "build", str(workload), "--json"))
    assert built["subgraphs"] == 2  # the default S: ov:CPU and ort:CPU only, ortx is opt-in
    assert [v["name"] for v in built["variants"]] == ["dense", "rounding-3", "rounding-6"]
    values = {processor: json.loads(sparseloom(
        site, "zoo", "eval", str(workload), "--task", "tiny", "--stitch", "0,1",
        "--processor", processor, "--json"))["value"] for processor in ("ortx:CPU", "ort:CPU")}
    assert values["ortx:CPU"] == pytest.approx(values["ort:CPU"], abs=0.01)
    assert 0.3 < values["ortx:CPU"] <= 1.0


@pytest.fixture(scope="module")
def profile_dir(site: Path, workload: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile")
    sparseloom(site, "profile", str(workload), "-p", "ortx:CPU", "-p", "ort:CPU",
               "--accuracy-estimator", "knn", "--samples", "6", "--repeats", "3",
               "--warmup", "1", "--out", str(out), "--json")
    return out / "profile"


def test_estimator_and_compressor_drive_a_sane_profile(profile_dir: Path) -> None:
    table = ProfileTable.load(profile_dir)
    assert table.processors == ("ortx:CPU", "ort:CPU")
    assert table.meta["estimators"]["accuracy"] == "knn"
    task = table.task("tiny")
    assert task.variant_names == ("dense", "rounding-3", "rounding-6")
    assert set(task.variant_kinds) == {"dense", "rounding"}
    measured = task.accuracy_measured[~np.isnan(task.accuracy_measured)]
    # k-NN averages measured metrics: every estimate lies within what was measured.
    assert measured.size == 6
    assert np.all(task.accuracy_estimated >= measured.min() - 1e-6)
    assert np.all(task.accuracy_estimated <= measured.max() + 1e-6)
    assert np.all(task.latency_ms > 0)


def test_policy_plans_on_the_profile(site: Path, profile_dir: Path) -> None:
    code = f"""
import json
from sparseloom.core.registry import get_registry
from sparseloom.plan import make_plan
from sparseloom.profile.table import ProfileTable
table = ProfileTable.load({str(profile_dir)!r})
assert get_registry().get_policy("fastest-dense").distribution == {DIST!r}
plan = make_plan(table, policy="fastest-dense").plan
best = min(((a, b) for a in table.processors for b in table.processors),
           key=lambda order: table.latency("tiny", (0, 0), order))
print(json.dumps({{"order": plan.order, "best": best, "choices": plan.variants["tiny"].choices,
                  "policy": plan.policy, "names": table.task("tiny").variant_names}}))
"""
    result = json.loads(sparseloom(site, code=code))
    assert result["policy"] == "fastest-dense" and result["choices"] == [0, 0]
    assert result["order"] == result["best"] and len(result["order"]) == 2
    assert "rounding-6" in result["names"]


def test_policy_is_chosen_by_the_plan_command(site: Path, workload: Path) -> None:
    report = json.loads(sparseloom(site, "plan", str(workload), "--policy", "fastest-dense",
                                   "-p", "ortx:CPU", "-p", "ort:CPU", "--json"))
    assert report["policy"] == "fastest-dense" and report["processors"] == ["ortx:CPU",
                                                                            "ort:CPU"]
    assert report["tasks"]["tiny"]["variant"] == [0, 0]  # the dense chain, as its doc says
    # The third-party compressor's subgraphs are in the plan's preloaded (hot) set.
    resident = {entry["variant_name"] for entry in report["preload"]["resident"]}
    assert {"rounding-3", "rounding-6"} & resident
