"""``sparseloom plugins``, ``--version``, ``--help`` and bad CLI input, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparseloom import __version__
from tests.plugin_dists import install_example_plugin, make_distribution


def run_cli(*args: str, pythonpath: str | None = None, autoload: bool = False):
    env = dict(os.environ)
    env.pop("SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD", None)
    if not autoload:
        env["SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "sparseloom", *args], capture_output=True, text=True, env=env,
        timeout=120,
    )


def test_plugins_json_lists_builtins_with_required_fields():
    result = run_cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows
    for row in rows:
        assert {"name", "kind", "distribution", "version", "error"} <= set(row)
        assert row["kind"] in {"backend", "compressor", "estimator", "policy", "workload"}
        assert row["error"] is None
        assert (row["distribution"], row["version"]) == ("sparseloom", __version__)


def test_installed_third_party_plugin_appears_and_autoload_switch_hides_it(tmp_path):
    install_example_plugin(tmp_path)
    shown = run_cli("plugins", "--json", pythonpath=str(tmp_path), autoload=True)
    assert shown.returncode == 0, shown.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(shown.stdout)}
    assert rows[("policy", "fastest-dense")]["distribution"] == "sparseloom-example-plugin"
    assert rows[("estimator", "knn")]["version"] == "0.1.0"

    hidden = run_cli("plugins", "--json", pythonpath=str(tmp_path), autoload=False)
    assert ("policy", "fastest-dense") not in {
        (r["kind"], r["name"]) for r in json.loads(hidden.stdout)
    }


def test_broken_plugin_is_listed_with_its_error_and_exit_status_1(tmp_path):
    make_distribution(
        tmp_path, "broken-plugin", {"broken": "broken_mod"},
        {"broken_mod": "import not_installed_dependency_xyz\n"},
    )
    result = run_cli("plugins", "--json", pythonpath=str(tmp_path), autoload=True)
    assert result.returncode == 1
    (broken,) = [r for r in json.loads(result.stdout) if r["error"]]
    assert broken["distribution"] == "broken-plugin"
    assert "No module named 'not_installed_dependency_xyz'" in broken["error"]
    assert "1 plugin(s) failed to load: broken = broken_mod" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_and_help():
    assert run_cli("--version").stdout.strip() == f"sparseloom, version {__version__}"
    help_text = run_cli("--help").stdout
    assert "plugins" in help_text and "SLO" in help_text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("frobnicate",), "No such command 'frobnicate'"),
        (("plugins", "--jsn"), "No such option '--jsn'"),
        (("--bogus",), "No such option '--bogus'"),
    ],
)
def test_unknown_command_or_option_is_a_short_error(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
