"""Ctrl-C ends every command with exit status 130 and one line, whatever it was doing: a
benchmark stops at once with its report written and marked incomplete, a run raises with the
summary of what it served, and a Ctrl-C whose exception Python dropped or a library swallowed
is not lost."""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparseloom.runtime import interrupts


@pytest.fixture(autouse=True)
def python_handles_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler for each test, as in a terminal: a process started with
    SIGINT ignored (a background job of a non-interactive shell) keeps it ignored, and then no
    Ctrl-C reaches Python code at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

#: How long a command may take to end after Ctrl-C.
STOP_WITHIN_S = 15.0
#: The most a benchmark may take to start serving (it builds what the cache lacks first).
SLOW_S = 300.0


def _default_sigint() -> None:
    # A shell's background job inherits SIGINT ignored; the command must get it as a user's
    # terminal delivers it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_bench_serve_stops_it_with_an_incomplete_report(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    environment = {**os.environ, "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "1"}
    environment.pop("SPARSELOOM_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparseloom", "bench", "serve", "tiny", "--quick", "--out",
         str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
        preexec_fn=_default_sigint)
    seen: list[str] = []
    # Building the cached workload, zoo and profile first may take minutes; never forever.
    watchdog = threading.Timer(SLOW_S, proc.kill)
    watchdog.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first run's line: it serves the next one now
            seen.append(line)
            if line.startswith("closed r1 "):
                break
        else:
            pytest.fail("bench serve ended before serving: " + "".join(seen))
        proc.send_signal(signal.SIGINT)
        started = time.perf_counter()
        stdout, stderr = proc.communicate(timeout=STOP_WITHIN_S)
        took = time.perf_counter() - started
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, stderr[-2000:])
    assert took < STOP_WITHIN_S / 3, took  # it stopped, not ran on for 789 more runs
    assert "Traceback" not in stderr, stderr
    assert len([line for line in stderr.splitlines() if line.startswith("Interrupted")]) == 1
    assert "incomplete" in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["incomplete"]["scenario"] == "closed"
    assert set(report["incomplete"]["skipped_scenarios"]) == {"steady", "capacity", "grid"}
    assert report["runs"] and report["runs"][0]["contender"] == "sparseloom"
    assert report["runs"][0]["valid"]  # the run that finished is kept, as measured
    markdown = (out / "report.md").read_text()
    assert "INCOMPLETE" in markdown and "this report is incomplete" in markdown
    assert "INCOMPLETE" in stdout


@pytest.fixture
def tiny() -> Any:
    """(workload, profile) of ``tiny``, as the runtime tests build it (cached)."""
    from sparseloom.workload.load import load_workload
    from tests.runtime.conftest import _profiled

    workload = load_workload("tiny", progress=False)
    return workload, _profiled(workload)


def test_ctrl_c_while_serving_raises_with_the_summary_so_far(tiny: Any) -> None:
    from sparseloom.runtime.load import LoadSpec
    from sparseloom.runtime.session import RunConfig, serve
    from sparseloom.runtime.summary import INTERRUPTED, RunInterrupted

    @contextlib.contextmanager
    def ctrl_c_while_serving(server: Any) -> Iterator[None]:  # held while the load is offered
        timer = threading.Timer(1.0, _thread.interrupt_main)
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    workload, profile = tiny
    config = RunConfig(load=LoadSpec("closed", queries=None, duration_s=60.0),
                       live=ctrl_c_while_serving)
    started = time.perf_counter()
    with pytest.raises(RunInterrupted) as interrupted:
        serve(workload, profile, config)
    assert time.perf_counter() - started < 30.0  # not the 60 s the load asked for
    summary = interrupted.value.partial.summary
    assert INTERRUPTED in summary.reasons and not summary.valid
    assert summary.completed > 0 and summary.submitted == summary.completed + summary.failed


def test_a_ctrl_c_dropped_by_a_finaliser_is_delivered_again(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # pytest watches unraisable exceptions with a hook of its own: put ours in its place.
    monkeypatch.setattr(sys, "unraisablehook", interrupts._hook)
    monkeypatch.setattr(interrupts, "_previous_hook", sys.__unraisablehook__)

    class Finalised:
        def __del__(self) -> None:  # Python prints "Exception ignored" and drops this
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Finalised()
        time.sleep(5.0)  # delivered again within ~10 ms


def test_a_swallowed_ctrl_c_still_ends_the_command_with_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sparseloom.cli.plugins
    from sparseloom.cli import main

    def swallowing_registry() -> Any:  # test double: a library that catches Ctrl-C
        try:
            signal.raise_signal(signal.SIGINT)
            time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        from sparseloom.core.registry import get_registry

        return get_registry()

    monkeypatch.setattr(sparseloom.cli.plugins, "get_registry", swallowing_registry)
    assert main(["plugins"]) == 130
    err = capsys.readouterr().err
    assert err.count("Interrupted (Ctrl-C).") == 1 and "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
