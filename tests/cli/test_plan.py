"""``sparseloom plan`` in a subprocess: plans for every policy, JSON keys, plugins, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_dists import make_distribution

BUILTIN = ("sparseloom", "sparseloom-contention", "sparseloom-loaded", "sv-ao-p", "sv-ao-np",
           "sv-lo-p", "sv-lo-np", "av-p", "av-np")

PLUGIN = '''
from sparseloom.core.hookspecs import hookimpl
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy


class EchoPolicy(SparseLoomPolicy):
    """Algorithm 1 under another name: proves a third-party policy is selectable."""


@hookimpl
def sparseloom_register_policies(register):
    register("echo", EchoPolicy, description="test policy")
'''


def sparseloom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("sparseloom")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_every_builtin_policy_plans_tiny_with_stable_json_keys() -> None:
    for policy in BUILTIN:
        result = sparseloom("plan", "tiny", "--policy", policy, "--json",
                            "--memory-budget", "0.55")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["policy"] == policy
        assert set(report) >= {"workload", "processors", "order", "decision_seconds", "tasks",
                               "preload", "overflow", "refused"}
        # Each pick the paired gate refused is named, and none of them is served.
        chosen = "_".join(map(str, report["tasks"]["tiny"]["variant"]))
        assert chosen not in report["refused"].get("tiny", [])
        # Overflow threads go only where tasks share a processor: tiny has one task.
        assert report["overflow"] == []
        task = report["tasks"]["tiny"]
        assert set(task) >= {"variant", "variant_names", "stitched", "processors", "accuracy",
                             "accuracy_measured", "latency_ms", "slo", "feasible", "reason",
                             "merged", "wide", "wide_when_quiet", "lane", "spare"}
        # One task alone waits for nobody's call: no plan puts it on a lane.
        assert task["lane"] is False
        # Only sparseloom-loaded merges (tiny's one task keeps its chain on one processor
        # there, or spans p*); the paper's policies and the baselines serve chains.
        assert task["merged"] == (policy == "sparseloom-loaded"
                                  and len(set(task["processors"])) == 1)
        # Its merged chain alone in a queue, the other processor serving nothing: a spare.
        assert task["spare"] == task["merged"]
        assert task["slo"]["source"] == "grid-middle"
        assert len(task["processors"]) == len(task["variant"])
        preload = report["preload"]
        assert preload["resident_bytes"] <= preload["budget_bytes"] < preload["full_bytes"]
        if policy.startswith("sv-"):
            assert len(set(task["variant"])) == 1  # baselines run originals


def test_text_output_names_the_slo_source_and_decision_time() -> None:
    result = sparseloom("plan", "tiny", "--slo", "tiny=0.9,5")
    assert result.returncode == 0, result.stderr
    assert "cli" in result.stdout and "decision time:" in result.stdout
    assert "preloaded" in result.stdout and "Traceback" not in result.stderr


def test_a_policy_registered_by_a_plugin_is_selectable(tmp_path: Path) -> None:
    make_distribution(tmp_path, "echo-policy", {"echo": "echo_policy"},
                      {"echo_policy": PLUGIN})
    env = {"SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "0",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = sparseloom("plan", "tiny", "--policy", "echo", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["policy"] == "echo"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--policy", "nope"), "registered policies: "),
        (("--slo", "ghost=0.5,3"), "unknown task(s) ghost"),
        (("--slo", "tiny0.5"), "is malformed"),
        (("--slo", "tiny=high,3"), "must be numbers"),
        (("--slo", "tiny=85,3"), "outside [0, 1]"),
        (("--slo", "tiny=0.5,0"), "latency must be > 0"),
        (("--memory-budget", "1000"), "the minimum budget is"),
        (("--memory-budget", "1.5"), "must lie in (0, 1]"),
        (("--memory-budget", "lots"), "neither a fraction"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(args: tuple[str, ...], fragment: str) -> None:
    result = sparseloom("plan", "tiny", *args)
    assert result.returncode == 1, result.stdout
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
