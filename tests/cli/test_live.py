"""``sparseloom run --duration``'s live view: plain lines when stdout is not a terminal, and the
terminal table, drawn from a serving ``Server``'s stats."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from sparseloom.core.types import SLO


def test_plain_lines_while_serving_when_stdout_is_not_a_terminal() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sparseloom", "run", "tiny", "--load", "poisson", "--rate",
         "100", "--duration", "6"], capture_output=True, text=True, env=dict(os.environ),
        timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert lines, done.stdout
    # e.g. "[5 s] tiny 98.2/s p90 1.21 ms 100% || ov:CPU 3% q0 | ort:CPU 1% q0"
    assert re.match(r"\[\d+ s\] tiny \d+\.\d/s p90 \S+ ms \S+ \|\| (ov|ort):CPU \d+% q\d+",
                    lines[0]), lines[0]
    assert "sparseloom run summary" in done.stdout


def test_the_terminal_table_shows_every_task_and_processor() -> None:
    from rich.console import Console

    from sparseloom.cli.live import _renderable
    from sparseloom.runtime.server import Server
    from sparseloom.workload.load import load_workload
    from tests.runtime.conftest import _profiled  # the runtime tests' cached tiny profile

    workload = load_workload("tiny", progress=False)
    profile = _profiled(workload)
    row = {k: v[:1] for k, v in workload.task("tiny").eval_inputs.items()}
    with Server(workload, profile, slos={"tiny": SLO(0.0, 7.5)}) as server:
        for _ in range(20):
            server.infer("tiny", row, timeout=60)
        console = Console(record=True, width=200)
        console.print(_renderable(server.stats(), 30.0))
    text = console.export_text()
    assert "of 30 s, 20 served, 0 failed" in text
    # Attainment is a share of 20 timed requests (one late request on a busy machine reads
    # 95%): the table shows it, the test does not time the runtime.
    assert re.search(r"tiny .* 7\.5 .* \d+% .* tiny\[\d+,\d+\] @ ", text), text
    assert all(name in text for name in profile.processors)
