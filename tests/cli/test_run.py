"""``sparseloom run``: bad inputs give one clear line and a non-zero exit (in a subprocess);
a short run prints the summary and writes per-request records."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def sparseloom(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "sparseloom", *args], capture_output=True,
                          text=True, env=env, timeout=900)


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--rate", "0", "--load", "poisson"], "--rate must be > 0"),
    (["--rate", "-2", "--load", "poisson"], "--rate must be > 0"),
    (["--queries", "0"], "--queries must be at least 1"),
    (["--load", "poisson"], "--load poisson needs --rate"),
    (["--slo", "tiny=high,3"], "accuracy and latency must be numbers"),
    (["--slo", "ghost=0.5,3"], "unknown task(s) 'ghost'"),
    (["--arrival-order", "tiny,tiny"], "names tiny more than once"),
    (["--arrival-order", "tiny,ghost"], "unknown task(s) 'ghost'"),
    (["--processor", "ov:GPU"], "not profiled"),
], ids=["policy", "rate-zero", "rate-negative", "queries", "poisson-no-rate", "slo-format",
        "slo-task", "order-twice", "order-unknown", "processor-vanished"])
def test_bad_inputs_fail_with_one_clear_line(args: list[str], message: str) -> None:
    done = sparseloom("run", "tiny", *args)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and message in lines[-1], done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_workload_fails_clearly() -> None:
    done = sparseloom("run", "no-such-workload")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "no-such-workload" in done.stderr


def test_run_tiny_prints_the_summary_and_writes_records(tmp_path: Path) -> None:
    done = sparseloom("run", "tiny", "--queries", "30", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "sparseloom run summary" in done.stdout
    assert "INVALID" in done.stdout and "too few requests for a p99" in done.stdout
    assert "submitted 30 = completed 30 + failed 0" in done.stdout
    with (tmp_path / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 30 and {r["status"] for r in rows} == {"completed"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["submitted"] == summary["completed"] == 30


def test_run_json_with_faults(tmp_path: Path) -> None:
    done = sparseloom("run", "tiny", "--queries", "100", "--inject-faults", "0.03", "--json",
                      "--load", "poisson", "--rate", "300")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["submitted"] == summary["completed"] + summary["failed"] == 100
    assert summary["injected_faults"] > 0


def test_ctrl_c_drains_and_prints_the_summary(tmp_path: Path) -> None:
    """SIGINT mid-run: in-flight requests end, nothing is lost, the summary still prints."""
    import signal
    import time

    # Workload, zoo and profile first (minutes on an empty cache), so that the run below is
    # serving when the signal comes.
    subprocess.run([sys.executable, "-m", "sparseloom", "plan", "tiny", "--json"], check=True,
                   capture_output=True, env=dict(os.environ), timeout=900)
    process = subprocess.Popen(
        [sys.executable, "-m", "sparseloom", "run", "tiny", "--duration", "120",
         "--queries", "10000000", "--json", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        # A shell that runs this suite in the background starts it with SIGINT ignored; the
        # child would inherit that, and Python then keeps ignoring Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # Setting tiny up from the cache (workload, profile, preload) takes 2-5 s here; the
        # run streams every ended request to requests.csv: once rows arrive, it is serving.
        records, deadline = tmp_path / "requests.csv", time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline and not (
                records.is_file() and len(records.read_text().splitlines()) > 50):
            time.sleep(0.1)
        assert process.poll() is None, process.communicate()[1][-2000:]
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert "Traceback" not in stderr, stderr[-2000:]
    assert process.returncode == 130, stderr[-2000:]  # the shell's code for SIGINT
    summary = json.loads(stdout)
    assert summary["submitted"] == summary["completed"] + summary["failed"] > 0
    assert summary["valid"] is False
    assert any("interrupt" in reason.lower() for reason in summary["reasons"]), summary["reasons"]
    assert (tmp_path / "requests.csv").is_file()
