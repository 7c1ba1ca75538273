"""Bad input, round 3, run as a user would: contract bugs a third party hits,
numbers and modes, exit codes. The helpers are those of :mod:`tests.cli.test_bad_inputs`: a
refusal exits non-zero with exactly one ``Error:`` line and no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_bad_inputs import refused, run_cli, warned


def _scalar_input_model(path: Path) -> Path:
    """y = x * scale, with ``scale`` a rank-0 input (as a speech model's sample rate)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_infer_judges_rows_against_the_declared_rank(tmp_path: Path) -> None:
    model = _scalar_input_model(tmp_path / "scaled.onnx")
    good = tmp_path / "good.npz"
    np.savez(good, x=np.ones((3, 4), np.float32), scale=np.float32(2.0))
    proc = run_cli(["infer", model, "--input", good, "--output", tmp_path / "y.npz",
                    "--repeat", "1"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    with np.load(tmp_path / "y.npz") as outputs:
        np.testing.assert_array_equal(outputs["y"], np.full((3, 4), 2.0, np.float32))
    scalar_x = tmp_path / "scalar-x.npz"
    np.savez(scalar_x, x=np.float32(1.0), scale=np.float32(2.0))
    refused(run_cli(["infer", model, "--input", scalar_x]), "'x'", "no rows")
    not_npz = tmp_path / "inputs.npz"
    not_npz.write_text("x,scale\n1,2\n")
    line = refused(run_cli(["infer", model, "--input", not_npz]), "not an .npz archive",
                   "numpy.savez")
    assert "pickle" not in line


# -- 4. numbers and modes ----------------------------------------------------------------------


def test_numbers_and_options_of_another_mode_are_refused() -> None:
    cases = [
        (["run", "tiny", "--load", "poisson", "--rate", "nan"], ["--rate", "finite", "nan"]),
        (["run", "tiny", "--duration", "inf"], ["--duration", "finite"]),
        (["run", "tiny", "--inject-faults", "nan"], ["--inject-faults", "finite"]),
        (["run", "tiny", "--slo", "tiny=0.5,inf"], ["--slo", "latency", "finite"]),
        (["plan", "tiny", "--slo", "tiny=0.5,inf"], ["--slo", "latency", "finite"]),
        (["run", "tiny", "--slo", "tiny=0.5,2", "--slo", "tiny=0.6,3"],
         ["'tiny' twice ('tiny=0.5,2' and 'tiny=0.6,3')"]),
        (["plan", "tiny", "--slo", "tiny=0.5,2", "--slo", "tiny=0.5,2"], ["'tiny' twice"]),
        (["run", "tiny", "--memory-budget", "1e30"], ["(0, 1]", "byte count"]),
        (["run", "tiny", "--memory-budget", "nan"], ["--memory-budget", "'nan'"]),
        (["run", "tiny", "--rate", "3"], ["--rate", "add --load poisson"]),
        (["run", "tiny", "--join-after", "3"], ["--join-after", "--arrival-order"]),
        (["run", "tiny", "-p", "ort:CPU", "-p", "ort:CPU"], ["ort:CPU", "more than once"]),
        (["plan", "tiny", "-p", "ort:CPU", "-p", "ort:CPU"], ["ort:CPU", "more than once"]),
        (["profile", "tiny", "-S", "1000"], ["-S 1000", "10^", "use -S"]),
        (["evaluate", "tiny", "--exclude", "nosuch"], ["--exclude", "nosuch", "known:"]),
        (["evaluate", "tiny", "--contender", "av-p", "--contender", "av-p"],
         ["--contender", "av-p", "more than once"]),
        (["evaluate", "tiny", "--contender", "av-p", "--exclude", "av-p"],
         ["no contender"]),
        (["evaluate", "tiny", "--budget", "nan"], ["--budget", "finite", "nan"]),
        (["run", "tiny", "--arrival-order", ","], ["--arrival-order", "empty item"]),
        (["run", "tiny", "--queries", "99999999999999999999"], ["--queries", "--duration"]),
        (["profile", "tiny", "--seed", "-1"], ["--seed", "-1"]),
        (["profile", "tiny", "--refresh", "rescale", "--drift-threshold", "inf"],
         ["drift threshold", "finite", "inf"]),
    ]
    for args, words in cases:
        refused(run_cli(args), *words)


def test_more_threads_than_cores_is_warned(tmp_path: Path) -> None:
    import os

    threads = len(os.sched_getaffinity(0)) + 1
    model = _scalar_input_model(tmp_path / "scaled.onnx")
    proc = run_cli(["infer", model, "-p", f"ort:CPU?threads={threads}",
                    "--repeat", "1"])
    warned(proc, "ort:CPU", f"{threads} threads", "time-share")


# -- 7. exit codes and silence -----------------------------------------------------------------


def test_a_run_whose_every_request_failed_exits_1_after_its_summary() -> None:
    proc = run_cli(["run", "tiny", "--queries", "10", "--inject-faults", "1"])
    refused(proc, "every one of the 10 request(s) failed", "InjectedFault")
    assert "requests" in proc.stdout  # the summary came first


def test_a_long_load_says_how_long_it_runs() -> None:
    proc = run_cli(["run", "tiny", "--queries", "5", "--duration", "3600"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "Note: this load runs at most 1:00:00" in proc.stderr, proc.stderr
    quiet = run_cli(["run", "tiny", "--queries", "5"])
    assert quiet.returncode == 0 and "Note: this load" not in quiet.stderr, quiet.stderr


# -- 3. device files ---------------------------------------------------------------------------

GOOD_PROCESSOR = ('[[processors]]\nname = "GPU"\ntransfer_ms = 0.25\nmemory_bytes = 4000\n'
                  '[processors.scale]\ndense = 0.5\nint8 = 0.4\n')


def _device(folder: Path, name: str, processor: str, head: str = "") -> Path:
    path = folder / f"{name}.toml"
    path.write_text(f'{head}name = "{name}"\nreference = "ov:CPU"\n{GOOD_PROCESSOR}{processor}')
    return path


def test_device_files_are_validated_on_read(tmp_path: Path) -> None:
    npu = '[[processors]]\nname = "NPU"\n'
    cases = {
        "negative-transfer": (npu + "transfer_ms = -1\n", ["'NPU'", "transfer_ms", "-1"]),
        "negative-scale": (npu + "[processors.scale]\nint8 = -0.5\n", ["'NPU'", "scale.int8"]),
        "zero-scale": (npu + "[processors.scale]\ndense = 0\n", ["'NPU'", "scale.dense", "0"]),
        "nan-scale": (npu + "[processors.scale]\ndense = nan\n", ["'NPU'", "scale.dense",
                                                                  "nan"]),
        "huge-scale": (npu + "[processors.scale]\ndense = 1e9\n", ["'NPU'", "scale.dense"]),
        "negative-memory": (npu + "memory_bytes = -5\n", ["'NPU'", "memory_bytes", "-5"]),
        "twice": ('[[processors]]\nname = "GPU"\n', ["'GPU'", "listed twice"]),
        "unknown-key": (npu + "latency_ms = 3\n", ["'NPU'", "latency_ms", "allowed"]),
        "unknown-kind": (npu + "[processors.scale]\nint4 = 0.3\n", ["'NPU'", "'int4'",
                                                                     "int8"]),
    }
    for name, (processor, words) in cases.items():
        path = _device(tmp_path, name, processor)
        refused(run_cli(["simulate", "tiny", "--device-file", path, "--policy", "av-p"]),
                str(path), *words)
    top = _device(tmp_path, "top", "", head="soc = 1\n")
    refused(run_cli(["sweep", "--workload", "tiny", "--device-file", top]), str(top),
            "unknown key(s) soc")


# -- 5. workload files -------------------------------------------------------------------------


def test_workload_files_are_refused_at_read_with_the_rule(tmp_path: Path) -> None:
    import shutil

    from sparseloom.api import load_workload

    entry = Path(load_workload("tiny", progress=False).tasks[0].info["cache_dir"])
    shutil.copy(entry / "model.onnx", tmp_path / "model.onnx")
    with np.load(entry / "eval.npz") as data:
        np.savez(tmp_path / "good.npz", image=data["image"][:64], labels=data["labels"][:64])
        np.savez(tmp_path / "three.npz", image=data["image"][:3], labels=data["labels"][:3])
        np.savez(tmp_path / "calibration.npz", image=data["image"][:40])

    def workload(name: str, task: str = "t", head: str = "", data: str = "good") -> Path:
        path = tmp_path / f"{name}.toml"
        named = "" if "name =" in head else 'name = "w"\n'
        path.write_text(f'{head}{named}[[task]]\nname = "{task}"\nmodel = "model.onnx"\n'
                        f'data = "{data}.npz"\ncalibration = "calibration.npz"\n')
        return path

    cases = [
        (workload("comma", task="a,b"), ["'a,b'", "','", "--slo"]),
        (workload("equals", task="a=b"), ["'a=b'", "'='"]),
        (workload("escape", task="red\\u001b[31m"), ["'red\\x1b[31m'", "control character"]),
        (workload("long", task="x" * 300), ["300 chars", "longer than 64"]),
        (workload("backend", head='processors = ["foo:CPU"]\n'),
         ["'foo:CPU'", "backend 'foo'", "not installed", "ort"]),
        (workload("escape-name", head='name = "../x"\n'), ["workload name '../x'", "'/'"]),
    ]
    for path, words in cases:
        proc = run_cli(["workloads", "build", path, "--no-progress"])
        line = refused(proc, str(path), *words)
        assert "\x1b" not in proc.stderr, line  # never echoed raw to the terminal
    refused(run_cli(["workloads", "build", workload("three", data="three"), "--no-progress"]),
            "three.npz", "3 rows", "at least 10", "steps of 1/N")
    for profile, words in (("samples = 0", ["[profile]", "samples", "1 or more"]),
                           ('accuracy_estimator = "additive"',
                            ["accuracy_estimator 'additive'", "registered: xgboost"])):
        path = tmp_path / "profile.toml"
        path.write_text(workload("plain").read_text() + f"[profile]\n{profile}\n")
        refused(run_cli(["workloads", "build", path, "--no-progress"]), str(path), *words)


# -- 8. caches ---------------------------------------------------------------------------------


def test_a_cached_task_naming_an_unknown_metric_is_rebuilt(tmp_path: Path) -> None:
    import shutil

    from sparseloom.api import load_workload
    from sparseloom.workload.build import entry_problem

    source = Path(load_workload("tiny", progress=False).tasks[0].info["cache_dir"])
    entry = tmp_path / "cache" / "workloads" / source.name
    shutil.copytree(source, entry)
    meta = json.loads((entry / "meta.json").read_text())
    meta["metric"] = "nosuch"
    (entry / "meta.json").write_text(json.dumps(meta))
    assert "metric 'nosuch'" in str(entry_problem(entry))
    proc = run_cli(["workloads", "build", "tiny", "--no-progress", "--json"],
                   cache=tmp_path / "cache")
    warned(proc, str(entry), "metric 'nosuch'", "rebuilding")
    assert json.loads(proc.stdout)["tasks"][0]["cache_hit"] is False
    assert entry_problem(entry) is None


def test_an_evaluate_run_file_with_the_wrong_keys_is_run_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sparseloom.evaluation.harness import POLICY_RUN_KEYS, RunCache

    cache = RunCache(tmp_path)
    good = {"throughput_rps": 1.0, "memory_bytes": 2.0, "violation_rate": 0.0,
            "pipeline_share": 0.5, "valid": True,
            "tasks": [{"task": "t", "accuracy": 0.9, "p90_ms": 1.0}]}
    cache.put("good", good)
    assert cache.get("good", POLICY_RUN_KEYS) == good
    assert capsys.readouterr().err == ""
    (tmp_path / "foreign.json").write_text('{"rps": 3}')
    (tmp_path / "rows.json").write_text(json.dumps(good | {"tasks": [{"name": "t"}]}))
    (tmp_path / "cut.json").write_text('{"throughput')
    for key in ("foreign", "rows"):
        assert cache.get(key, POLICY_RUN_KEYS) is None
        err = capsys.readouterr().err
        assert err.startswith("Warning: run file") and f"{key}.json" in err, err
    assert cache.get("cut") is None  # cut short mid-write: run again, as before
    assert cache.get("absent") is None


# -- 9. messages name the real cause -----------------------------------------------------------


def test_messages_name_the_real_cause_and_a_fix_that_works(tmp_path: Path) -> None:
    line = refused(run_cli(["run", "tiny", "-p", "foo:CPU", "--queries", "5"]), "'foo:CPU'",
                   "not an available processor here", "sparseloom devices", "ov:CPU")
    assert "profile again" not in line  # `profile -p foo:CPU` would fail too
    model = _scalar_input_model(tmp_path / "scaled.onnx")
    (tmp_path / "data.npz").write_text("x,labels\n1,0\n")
    (tmp_path / "w.toml").write_text('name = "w"\n[[task]]\nname = "t"\n'
                                     'model = "scaled.onnx"\ndata = "data.npz"\n')
    line = refused(run_cli(["workloads", "build", tmp_path / "w.toml"]), "data.npz",
                   "not an .npz archive", "numpy.savez")
    assert "pickle" not in line
    assert model.is_file()
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "w.toml").read_bytes())
    refused(run_cli(["workloads", "build", tmp_path / "bom.toml"]), "byte-order mark",
            "without BOM")
    (tmp_path / "folder").mkdir()
    (tmp_path / "dir.toml").write_text('name = "w"\n[[task]]\nname = "t"\n'
                                       'model = "folder"\ndata = "data.npz"\n')
    refused(run_cli(["workloads", "build", tmp_path / "dir.toml"]), "model file 'folder'",
            "is a folder, not a file")


def test_a_drift_threshold_read_as_percent_is_warned() -> None:
    warned(run_cli(["profile", "tiny", "--refresh", "rescale", "--drift-threshold", "5"]),
           "--drift-threshold 5", "500%", "0.05")


def test_ctrl_c_in_any_command_exits_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sparseloom.cli.plugins
    from sparseloom.cli import main

    def interrupted_registry() -> None:  # test double: Ctrl-C while the command works
        raise KeyboardInterrupt

    monkeypatch.setattr(sparseloom.cli.plugins, "get_registry", interrupted_registry)
    assert main(["plugins"]) == 130
    err = capsys.readouterr().err
    assert "Interrupted (Ctrl-C)." in err and "Traceback" not in err and "Aborted" not in err
