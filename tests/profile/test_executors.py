"""Choosing a profile executor, the Ray address, the zoo-file check of a worker (no Ray instance
is started here; ``test_ray_executor.py`` runs one)."""

from __future__ import annotations

import socket
import sys
from typing import Any

import pytest

from sparseloom.core.errors import ConfigError, ProfileError
from sparseloom.profile.executor_work import require_zoo_files
from sparseloom.profile.executors import (
    RAY_ADDRESS_ENV,
    InProcessExecutor,
    ProfileExecutor,
    check_reachable,
    get_executor,
    resolve_ray_address,
)


def test_local_is_the_in_process_executor() -> None:
    executor = get_executor("local")
    assert isinstance(executor, InProcessExecutor) and isinstance(executor, ProfileExecutor)
    assert executor.name == "local"


def test_unknown_executor_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown profile executor 'nope'.*local, ray"):
        get_executor("nope")


def test_ray_without_ray_installed_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'sparseloom\[ray\]'"):
        get_executor("ray")


def test_in_process_evaluate_forwards_every_keyword() -> None:
    seen: list[tuple[Any, ...]] = []

    def evaluator(zoo: Any, task: Any, choices: Any, **options: Any) -> str:
        seen.append((zoo, task, choices, options))
        return "report"

    executor = InProcessExecutor(evaluator=evaluator)
    assert executor.evaluate("zoo", "task", [(0, 1)], processor="ort:CPU", rows=[1, 2],
                             cache=False) == "report"
    assert seen == [("zoo", "task", [(0, 1)],
                     {"processor": "ort:CPU", "rows": [1, 2], "cache": False})]


def test_ray_address_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_ray_address(None) == (None, "a new local Ray instance")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    assert resolve_ray_address(None) == ("10.0.0.9:6379", "RAY_ADDRESS")
    monkeypatch.setenv(RAY_ADDRESS_ENV, "10.0.0.5:6379")
    assert resolve_ray_address(None) == ("10.0.0.5:6379", RAY_ADDRESS_ENV)
    assert resolve_ray_address(" head:6379 ") == ("head:6379", "--ray-address")


def _closed_port() -> int:
    with socket.socket() as probe:  # a port just released: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_cluster_is_one_clear_error_in_seconds() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ProfileError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:\d+ "
                                           r"\(from --ray-address\).*ray start --head"):
        check_reachable(address, "--ray-address", timeout_s=2)
    with pytest.raises(ConfigError, match=r"not host:port"):
        check_reachable("just-a-host", "--ray-address")
    check_reachable("auto", "--ray-address")  # left to Ray


def test_missing_zoo_file_names_the_path_and_the_fix(tmp_path: Any) -> None:
    present = tmp_path / "a.onnx"
    present.write_bytes(b"")
    require_zoo_files([present], "a Ray accuracy task")
    with pytest.raises(ProfileError) as caught:
        require_zoo_files([present, tmp_path / "b.onnx", tmp_path / "c.onnx"], "a Ray task")
    message = str(caught.value)
    assert f"cannot find zoo file {tmp_path / 'b.onnx'} (and 1 more)" in message
    assert "shared filesystem" in message and "--executor local" in message
