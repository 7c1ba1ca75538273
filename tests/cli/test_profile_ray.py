"""``sparseloom profile --executor ray``: run as a user would (a subprocess that starts its own
local Ray instance), and its bad inputs, each one clear line without a traceback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.cli.test_bad_inputs import refused, run_cli

pytest.importorskip("ray")


def _closed_port_address() -> str:
    with socket.socket() as probe:  # a port just released: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def test_profile_tiny_through_ray(tmp_path: Path) -> None:
    proc = run_cli(["profile", "tiny", "--executor", "ray", "--no-cache", "--json",
                    "--repeats", "3", "--warmup", "1", "--samples", "12", "--seed", "3",
                    "--out", tmp_path])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Token authentication" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["tasks"]["tiny"]["samples"] == 12
    meta = json.loads((tmp_path / "profile" / "profile.json").read_text())["meta"]
    assert meta["executor"] == "ray" and meta["failures"] == []


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--executor", "nope"], {}, ["'nope' is not one of 'local', 'ray'"]),
    (["--executor", "ray", "--ray-address", "{closed}"], {},
     ["cannot reach the Ray cluster at {closed} (from --ray-address)", "ray start --head"]),
    (["--executor", "ray"], {"SPARSELOOM_RAY_ADDRESS": "{closed}"},
     ["cannot reach the Ray cluster at {closed} (from SPARSELOOM_RAY_ADDRESS)"]),
    (["--executor", "ray", "--ray-resource", "ov:NPU"], {}, ["is not PROCESSOR=RESOURCE"]),
    (["--ray-address", "{closed}"], {}, ["--ray-address applies to the ray executor only"]),
    (["--executor", "ray", "--ray-address", "{closed}"], {"COMMAND": "plan"},
     ["cannot reach the Ray cluster at {closed} (from --ray-address)"]),
], ids=["unknown-executor", "unreachable-address", "unreachable-env", "bad-resource",
        "address-without-ray", "plan-unreachable-address"])
def test_bad_executor_input_is_one_clear_line(args: list[str], env: dict[str, str],
                                              words: list[str]) -> None:
    closed = _closed_port_address()
    env = dict(env)
    command = env.pop("COMMAND", "profile")  # `plan` takes the same options
    proc = run_cli([command, "tiny", *(a.format(closed=closed) for a in args)],
                   **{k: v.format(closed=closed) for k, v in env.items()})
    refused(proc, *(w.format(closed=closed) for w in words))


def test_workload_file_chooses_the_executor_and_the_command_line_wins(tmp_path: Path) -> None:
    from sparseloom.cli.profile import profile_options
    from sparseloom.workload.load import resolve_workload

    path = tmp_path / "w.toml"
    path.write_text('[profile]\nexecutor = "ray"\nray_resources = { "ov:NPU" = "soc-npu" }\n'
                    '[[task]]\nname = "t"\nbuilder = "tiny"\n')
    definition = resolve_workload(str(path))
    options = profile_options(definition)
    assert (options.executor, options.ray_resources) == ("ray", {"ov:NPU": "soc-npu"})
    assert profile_options(definition, executor="local").executor == "local"
    assert profile_options(definition, ray_address="head:6379").ray_address == "head:6379"
