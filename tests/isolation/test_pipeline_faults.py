"""Commands and a Server finish when a backend's native code crashes: the fault injectors of
:mod:`tests.plugins.crashing`, installed as a third party's entry point, kill their process in
``compile`` (``crash-compile:CPU``) and in ``infer`` (``crash-infer:CPU``) on every model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin_dists import REPO
from tests.plugins.crashing import CRASH_MARK_ENV, crashing_distribution

PROCESSORS = ["-p", "crash-compile:CPU", "-p", "crash-infer:CPU", "-p", "ort:CPU"]

# `tiny` with two variants instead of ten: every subgraph model crashes both fault injectors,
# and each crash costs a probe process's restart, so the zoo's size sets this test's time.
FEW_VARIANTS = ('name = "tinyfew"\nvariants = ["dense", "int8"]\n'
                '[[task]]\nname = "tiny"\nbuilder = "tiny"\n')

SERVER_SCRIPT = """
import sys
import numpy as np, sparseloom
from sparseloom import RequestFailed
workload = sparseloom.load_workload(sys.argv[1])
processors = ["crash-compile:CPU", "crash-infer:CPU", "ort:CPU"]
profile = sparseloom.build_profile(workload, processors=processors, progress=False)
with sparseloom.Server(workload, profile, processors=processors,
                       policy="sparseloom-loaded") as server:
    futures = [server.submit_sample("tiny", row) for row in range(60)]
    served = failed = 0
    for future in futures:
        try:
            future.result(timeout=120)
            served += 1
        except RequestFailed:
            failed += 1
print(f"served {served} failed {failed}")
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = crashing_distribution(tmp_path_factory.mktemp("crashing"))
    environment = {k: v for k, v in os.environ.items()
                   if k != "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"}
    environment["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO)])
    environment[CRASH_MARK_ENV] = ""  # crash on every model
    return environment


def _run(args: list[str], env: dict[str, str], timeout: int = 900
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=REPO)


def _named(stderr: str) -> None:
    """Each crashing processor is named, with the model, in a warning line."""
    lines = [line for line in stderr.splitlines() if line.startswith("Warning:")]
    for processor in ("crash-compile:CPU", "crash-infer:CPU"):
        assert any(processor in line and ".onnx" in line and "crashed in a probe" in line
                   for line in lines), (processor, stderr[-3000:])


@pytest.mark.slow
def test_profile_bench_and_a_server_finish_past_native_crashes(env: dict[str, str],
                                                               tmp_path: Path) -> None:
    workload = tmp_path / "tinyfew.toml"
    workload.write_text(FEW_VARIANTS)
    profile = _run([sys.executable, "-m", "sparseloom", "profile", str(workload), *PROCESSORS],
                   env)
    assert profile.returncode == 0, profile.stderr[-3000:]
    assert "SIGSEGV in compile" in profile.stderr
    assert "SIGSEGV in the first inference" in profile.stderr
    _named(profile.stderr)

    bench = _run([sys.executable, "-m", "sparseloom", "bench", "serve", str(workload), "--quick",
                  *PROCESSORS, "--scenario", "closed", "--rounds", "1",
                  "--contender", "sparseloom-loaded", "--contender", "stock-ort",
                  "--out", str(tmp_path / "bench")], env)
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert (tmp_path / "bench" / "report.json").is_file()

    server = _run([sys.executable, "-c", SERVER_SCRIPT, str(workload)], env)
    assert server.returncode == 0, server.stderr[-3000:]
    # Every request accepted is answered: served, or failed with RequestFailed.
    assert "served 60 failed 0" in server.stdout, server.stdout + server.stderr[-3000:]


@pytest.mark.slow
def test_the_pipeline_completes_on_the_models_that_crash_native_code(tmp_path: Path) -> None:
    """A residual Gemm MLP (OpenVINO's f32 batch-1 crash) and a transformer encoder (ONNX
    Runtime's float16 crash) through zoo build, profile and a Server, default processors."""
    from tests.isolation.crash_workloads import write_workload

    toml = write_workload("both", tmp_path / "workload")
    script = f"""
import sparseloom
from sparseloom.profile.measure import ProfilerConfig
from sparseloom.profile.options import ProfileOptions
workload = sparseloom.load_workload({str(toml)!r})
# Four variants instead of ten and short timing: the point is that every step completes.
options = ProfileOptions(samples=6, variants=("dense", "structured-0.5", "int8", "fp16"),
                         config=ProfilerConfig(warmup=1, repeats=3))
profile = sparseloom.build_profile(workload, options=options, progress=False)
with sparseloom.Server(workload, profile, policy="sparseloom-loaded") as server:
    futures = [server.submit_sample(task, row) for task in ("mlp_a", "encoder")
               for row in range(40)]
    print("answered", sum(1 for f in futures if f.result(timeout=120) is not None))
"""
    environment = dict(os.environ, SPARSELOOM_CACHE_DIR=str(tmp_path / "cache"))
    served = _run([sys.executable, "-c", script], environment)
    assert served.returncode == 0, served.stderr[-3000:]
    assert "answered 80" in served.stdout
    print(served.stderr)  # which crashes this CPU met: shown with -s
