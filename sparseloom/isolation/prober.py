"""The probe processes: long-lived children that compile, load and run models on request.

Starting a Python process that imports ONNX Runtime and OpenVINO costs about 2 s, more than
probing a dozen subgraphs, so a few children (:data:`PROBERS`, one per core this process may
use, at most :data:`MAX_PROBE_PROCESSES`) serve every probe of this process: batches of
:class:`~sparseloom.isolation.probe.ProbeItem` go to its stdin (length-prefixed pickles), and
its stdout streams a JSON line before each step of each item and one with each outcome. When
the child dies (a native crash) the line before says which item and step killed it; the next
batch starts a new child. A child idle for :data:`IDLE_EXIT_S` exits by itself, and so does one
whose parent has gone (its stdin closes).
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any

#: Seconds an idle probe process waits for work before it exits.
IDLE_EXIT_S = 60.0
#: Length prefix of a batch on the child's stdin.
HEADER = struct.Struct("!Q")


def env_number(name: str, default: float, *, whole: bool = False) -> float:
    """The positive number in environment variable ``name`` (``default`` when unset).

    :raises ConfigError: it is set to anything else (naming the variable and what it needs).
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = 0
    if not value > 0 or value == float("inf"):
        from sparseloom.core.errors import ConfigError

        kind = "whole number" if whole else "number"
        raise ConfigError(f"{name}={text!r} is not a positive {kind}; unset it or give one")
    return value


class ChildDied(Exception):
    """The probe process ended while it worked: ``returncode`` says how."""

    def __init__(self, returncode: int, stderr_tail: str) -> None:
        super().__init__(f"probe process ended with {signal_name(returncode)}")
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class ChildHung(Exception):
    """The probe process made no progress within the timeout (it was killed)."""


def signal_name(returncode: int) -> str:
    """``SIGSEGV`` for -11, ``exit code 3`` for 3."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class ProbeProcess:
    """The child, started on first use; :meth:`run` streams one batch's records."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._buffer = b""
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["SPARSELOOM_ISOLATION"] = "off"  # the child is the sandbox: it loads directly
        env["SPARSELOOM_PROBE_IDLE_EXIT_S"] = str(IDLE_EXIT_S)
        if self._log is not None:
            self._log.close()
        # Kept open for the child's life: its stderr, read back when it dies.
        self._log = tempfile.TemporaryFile(prefix="sparseloom-probe-")  # noqa: SIM115
        self._buffer = b""
        self._child = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "sparseloom.isolation.child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env)
        return self._child

    @property
    def pid(self) -> int | None:
        """The running child's process id (``None`` when none runs)."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def _stderr_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return " ".join(lines[-3:])

    def run(self, items: Sequence[Any], timeout_s: float) -> Iterator[dict[str, Any]]:
        """Send ``items`` to the child and yield its records until the batch is done.

        :raises ChildDied: the child ended mid-batch (the records before say where).
        :raises ChildHung: no record for ``timeout_s`` (the child was killed).
        """
        # The child follows the caller's sparseloom settings as they are now (the cache
        # folder above all), not as they were when it started.
        settings = {k: v for k, v in os.environ.items()
                    if k.startswith("SPARSELOOM_") and k != "SPARSELOOM_ISOLATION"}
        payload = pickle.dumps((settings, list(items)))
        child = self._child
        for attempt in (0, 1):
            if child is None or child.poll() is not None:
                child = self._start()
            assert child.stdin is not None
            try:
                child.stdin.write(HEADER.pack(len(payload)) + payload)
                child.stdin.flush()
                break
            except (BrokenPipeError, OSError):  # it exited while idle: start another
                child.wait()
                child = None
                if attempt:
                    raise
        assert child is not None
        while True:
            line = self._read_line(child, timeout_s)
            record = json.loads(line)
            if record.get("event") == "batch done":
                return
            yield record

    def _read_line(self, child: subprocess.Popen[bytes], timeout_s: float) -> bytes:
        assert child.stdout is not None
        fd = child.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                child.kill()
                child.wait()
                self._child = None
                raise ChildHung()
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # end of stream: the child is gone
                returncode = child.wait()
                self._child = None
                raise ChildDied(returncode, self._stderr_tail())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """Close the child's stdin (it exits) and wait briefly for it."""
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            try:
                if child.stdin is not None:
                    child.stdin.close()
                child.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                child.kill()


#: Probe processes run side by side at most (``SPARSELOOM_PROBE_PROCESSES`` overrides it).
MAX_PROBE_PROCESSES = 4
PROBE_PROCESSES_ENV = "SPARSELOOM_PROBE_PROCESSES"


class ProbePool:
    """The process-wide probe processes: :meth:`share` lends them out, one batch each."""

    def __init__(self) -> None:
        self._processes: list[ProbeProcess] = []
        self.lock = threading.Lock()

    def size(self) -> int:
        """How many children probe side by side: the cores this process may use (at most
        :data:`MAX_PROBE_PROCESSES`), or ``SPARSELOOM_PROBE_PROCESSES``."""
        if os.environ.get(PROBE_PROCESSES_ENV, "").strip():
            return int(env_number(PROBE_PROCESSES_ENV, 1, whole=True))
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        return max(1, min(cores, MAX_PROBE_PROCESSES))

    def share(self, count: int) -> list[ProbeProcess]:
        """``count`` probe processes (started on first use); call with :attr:`lock` held."""
        while len(self._processes) < count:
            self._processes.append(ProbeProcess())
        return self._processes[:count]

    def pids(self) -> list[int]:
        """The process ids of the running children."""
        return [process.pid for process in self._processes if process.pid is not None]

    def close(self) -> None:
        """Close every child."""
        for process in self._processes:
            process.close()


#: The process-wide probe processes.
PROBERS = ProbePool()
atexit.register(PROBERS.close)
