"""Profiles time honestly: two profiles of one workload take turns (a file lock, the second
says it waits), and timing while other processes keep cores busy is warned about and recorded
in the profile's metadata."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparseloom.profile.builder import ProfileOptions, build_profile
from sparseloom.profile.measure import ProfilerConfig
from sparseloom.profile.timing_guard import FOREIGN_CORES_LIMIT, TimingWatch, profile_lock

FAST = ProfilerConfig(warmup=1, repeats=3)
HOLD_S = 1.0


def _hold_in_child(folder: Path) -> subprocess.Popen[str]:
    """Another process that holds the profile lock of workload ``w`` for :data:`HOLD_S`."""
    code = ("import sys, time\n"
            "from sparseloom.profile.timing_guard import profile_lock\n"
            f"with profile_lock({str(folder)!r}, 'w'):\n"
            "    print('held', flush=True)\n"
            f"    time.sleep({HOLD_S})\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_profile_waits_for_the_first_process(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    child = _hold_in_child(tmp_path)
    started = time.perf_counter()
    try:
        with profile_lock(tmp_path, "w"):
            waited = time.perf_counter() - started  # until the first let go
    finally:
        child.wait(10)
    assert waited > HOLD_S / 2, waited
    lines = capsys.readouterr().err.splitlines()
    assert lines == [line for line in lines if line.startswith("waiting")] and len(lines) == 1
    assert f"waiting for another profile of w (pid {child.pid})" in lines[0]


def test_threads_take_turns_and_one_thread_may_nest(tmp_path: Path) -> None:
    inside: list[str] = []
    overlap = threading.Event()

    def profile(name: str) -> None:
        # (the second: a nested build on the same thread)
        with profile_lock(tmp_path, "w"), profile_lock(tmp_path, "w"):
            if inside:
                overlap.set()
            inside.append(name)
            time.sleep(0.3)
            inside.remove(name)

    threads = [threading.Thread(target=profile, args=(f"t{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads), "a thread waited for itself"
    assert not overlap.is_set()


def _busy_loop(seconds: float) -> subprocess.Popen[bytes]:
    """Another process keeping one core busy for ``seconds``."""
    return subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + "
                             f"{seconds}\nwhile time.time() < end: pass"])


def test_timing_under_foreign_load_is_warned_and_recorded(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    loop = _busy_loop(1.5)
    try:
        time.sleep(0.2)  # it runs
        watch = TimingWatch("w")
        time.sleep(1.0)  # the profiler's timing would run here
        record = watch.finish("t")
    finally:
        loop.kill()
        loop.wait()
    assert record["busy"] is True and record["foreign_cores"] > FOREIGN_CORES_LIMIT, record
    warning = capsys.readouterr().err.strip()
    assert warning.startswith("Warning:") and len(warning.splitlines()) == 1
    assert "task 't'" in warning and f"{record['foreign_cores']:.2f} cores" in warning
    assert "inflated" in warning and "sparseloom profile w --no-cache" in warning


def test_build_profile_takes_the_lock_and_records_the_load(
        tiny: Any, tiny_zoos: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    held = threading.Event()
    release = threading.Event()

    def first_profile() -> None:  # another profile of tiny, holding the lock
        with profile_lock(tmp_path / "tiny", "tiny"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=first_profile)
    holder.start()
    assert held.wait(10)
    threading.Timer(HOLD_S, release.set).start()
    started = time.perf_counter()
    table = build_profile(tiny, zoos=tiny_zoos, options=ProfileOptions(config=FAST, samples=8),
                          progress=False, cache_root=tmp_path, use_cache=False)
    holder.join(10)
    assert time.perf_counter() - started > HOLD_S / 2
    assert "waiting for another profile of tiny" in capsys.readouterr().err
    record = table.meta["timing_load"]["tiny"]
    assert record["executor"] == "local" and record["seconds"] > 0
    assert record["foreign_cores"] is None or record["foreign_cores"] >= 0
    assert record["busy"] == (record["foreign_cores"] > FOREIGN_CORES_LIMIT)


def test_the_busy_machine_warning_names_the_workload_not_its_cache_folder(
        tiny: Any, tiny_zoos: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import attrs

    from sparseloom.profile import timing_guard

    # A name the cache stores under another folder name ('caf_-<hash>').
    renamed = attrs.evolve(tiny, name="café")
    monkeypatch.setattr(timing_guard, "FOREIGN_CORES_LIMIT", -1.0)  # every timing is "busy"
    table = build_profile(renamed, zoos=tiny_zoos, options=ProfileOptions(config=FAST, samples=8),
                          progress=False, cache_root=tmp_path, use_cache=False)
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("Warning:")]
    assert len(warnings) == 1 and "task 'tiny'" in warnings[0], warnings
    assert warnings[0].endswith("(sparseloom profile café --no-cache)"), warnings[0]
    assert table.meta["timing_load"]["tiny"]["busy"] is True
