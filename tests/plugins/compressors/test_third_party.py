"""A compressor from another distribution, defined here, reaches every command.

``rounding`` declares its own level range (whole bit widths 2..8), has default levels, takes
an option, and is selected by bare name (its default levels), by level, from the workload
file's ``variants`` with ``[compressors.rounding]`` options, and through ``profile``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper

from sparseloom.cli import cli
from sparseloom.core.errors import ConfigError
from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.protocols import LevelRange
from sparseloom.zoo.options import ZooOptions
from sparseloom.zoo.variants import resolve_variants

BUILT: list[dict[str, object]] = []


class RoundingCompressor:
    """Rounds every weight matrix to ``2**level`` evenly spaced values (``level`` bits)."""

    kind = "rounding"
    default_levels = (3.0, 6.0)
    level_range = LevelRange(2, 8, inclusive=True, integer=True)

    def __init__(self, symmetric: bool = True) -> None:
        self.symmetric = symmetric
        BUILT.append({"symmetric": symmetric})

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[object]) -> onnx.ModelProto:
        rounded = onnx.ModelProto()
        rounded.CopyFrom(subgraph)
        for init in rounded.graph.initializer:
            array = numpy_helper.to_array(init)
            if array.dtype != np.float32 or array.ndim < 2:
                continue
            low, high = (-np.abs(array).max(), np.abs(array).max()) if self.symmetric else (
                array.min(), array.max())
            step = (high - low) / (2 ** int(level) - 1) or 1.0
            values = (np.round((array - low) / step) * step + low).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(values, init.name))
        return rounded


def _plugin(name: str = "rounding") -> SimpleNamespace:
    return SimpleNamespace(sparseloom_register_compressors=hookimpl(
        lambda register: register(name, RoundingCompressor, capabilities=("rounding",))))


@pytest.fixture
def rounding(register_plugin) -> None:
    register_plugin(_plugin(), "rounding-plugin")
    BUILT.clear()


@pytest.mark.parametrize("name", ["round+ing", "rounding-8", "rounding-0.5", "dense", "a b"])
def test_a_name_that_cannot_be_selected_is_refused_at_registration(sparseloom_registry,
                                                                   name: str) -> None:
    assert sparseloom_registry.register_plugin(_plugin(name), "bad", distribution="bad-dist") \
        == "bad"
    [failure] = sparseloom_registry.failures
    assert f"compressor name {name!r}" in failure.error and "bad-dist" in failure.error
    assert "could never be selected" in failure.error
    assert name not in {r.name for r in sparseloom_registry.compressors()}


def test_a_bare_name_expands_to_the_default_levels(rounding) -> None:
    names = [s.name for s in resolve_variants(["dense", "rounding", "int8"])]
    assert names == ["dense", "rounding-3", "rounding-6", "int8"]
    chained = [s.name for s in resolve_variants(["dense", "unstructured+rounding-4"])]
    assert chained[1:] == [f"unstructured-{x:g}+rounding-4" for x in (0.3, 0.5, 0.7, 0.9)]
    builtin = [s.name for s in resolve_variants(["dense", "structured"])]
    assert builtin == ["dense", "structured-0.25", "structured-0.5"]
    with pytest.raises(ConfigError, match=r"variants listed twice: \['rounding-3'\]"):
        resolve_variants(["dense", "rounding", "rounding-3"])


@pytest.mark.parametrize(("variant", "message"), [
    ("rounding-9", r"level 9 of compressor 'rounding' is out of range; it takes whole numbers "
                   r"2 <= level <= 8 \(default levels: 3, 6\)"),
    ("rounding-2.5", r"level 2.5 of compressor 'rounding' is out of range"),
    ("unstructured-1.5", r"it takes 0 < level < 1"),
    ("int8-0.5", r"compressor 'int8' has no levels"),
])
def test_levels_are_checked_against_the_declared_range(rounding, variant: str,
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_variants(["dense", variant])
    assert [s.name for s in resolve_variants(["dense", "rounding-2", "rounding-8"])][1:] == [
        "rounding-2", "rounding-8"]


def test_options_reach_the_factory_and_the_zoo_hash(rounding) -> None:
    from tests.zoo.zoo_support import tiny_task

    task = tiny_task()
    plain = ZooOptions(subgraphs=2, variants=["dense", "rounding-4"]).config(task)
    tuned = ZooOptions(subgraphs=2, variants=["dense", "rounding-4"],
                       compressor_options={"rounding": {"symmetric": False}}).config(task)
    assert {"symmetric": False} in BUILT
    assert tuned["compressors"]["rounding"]["options"] == {"symmetric": False}
    assert "options" not in plain["compressors"]["rounding"]
    with pytest.raises(ConfigError, match=r"compressor 'rounding' \(distribution test\) takes "
                                          r"no option 'bits'; its options: symmetric"):
        resolve_variants(["dense", "rounding-4"], {"rounding": {"bits": 3}})


def _workload_file(tmp_path: Path, variants: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(f'variants = {variants}\n[compressors.rounding]\nsymmetric = false\n\n'
                    '[[task]]\nname = "tiny"\nbuilder = "tiny"\n')
    return path


def test_workload_variants_select_the_zoo_in_every_zoo_command(rounding, tmp_path: Path
                                                             ) -> None:
    path = str(_workload_file(tmp_path, '["dense", "rounding"]'))
    runner = CliRunner()
    built = runner.invoke(cli, ["zoo", "build", path, "-S", "2", "--json"])
    assert built.exit_code == 0, built.output
    [summary] = json.loads(built.stdout)
    assert [v["name"] for v in summary["variants"]] == ["dense", "rounding-3", "rounding-6"]
    assert {"symmetric": False} in BUILT  # the [compressors.rounding] table was passed
    shown = json.loads(runner.invoke(cli, ["zoo", "show", path, "-S", "2", "--json"]).stdout)
    assert shown[0]["built"] and shown[0]["directory"] == summary["directory"]
    same = runner.invoke(cli, ["zoo", "eval", path, "--task", "tiny", "--stitch", "0,2",
                               "-S", "2", "--json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["variants"] == ["dense", "rounding-6"]
    # Another variant list must not build a different zoo behind the user's back.
    other = runner.invoke(cli, ["zoo", "eval", path, "--task", "tiny", "--stitch", "0,1",
                                "-S", "2", "--variants", "dense,rounding-5"])
    assert other.exit_code == 1
    assert "no zoo of task 'tiny' with S=2 is built yet for variants dense,rounding-5" \
        in other.output
    assert "--variants dense,rounding-3,rounding-6" in other.output
    unbuilt = runner.invoke(cli, ["zoo", "show", path, "-S", "2", "--variants",
                                  "dense,rounding-5"])
    assert "tiny: not built" in unbuilt.output and "dense,rounding-3,rounding-6" in unbuilt.output


def test_profile_builds_the_workload_variants_and_takes_the_option(rounding, tmp_path: Path
                                                                  ) -> None:
    path = str(_workload_file(tmp_path, '["dense", "rounding"]'))
    common = [path, "-S", "2", "--repeats", "3", "--warmup", "0", "--samples", "6", "--json",
              "--accuracy-estimator", "xgboost"]
    result = CliRunner().invoke(cli, ["profile", *common, "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tasks"]["tiny"]["variants"] == 3
    from sparseloom.profile.table import ProfileTable

    table = ProfileTable.load(tmp_path / "a" / "profile")
    assert table.task("tiny").variant_names == ("dense", "rounding-3", "rounding-6")
    assert {"symmetric": False} in BUILT
    override = CliRunner().invoke(cli, ["profile", *common, "--variants",
                                        "dense,rounding-2,rounding-8", "--out",
                                        str(tmp_path / "b")])
    assert override.exit_code == 0, override.output
    table = ProfileTable.load(tmp_path / "b" / "profile")
    assert table.task("tiny").variant_names == ("dense", "rounding-2", "rounding-8")
