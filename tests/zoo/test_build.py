"""Building, caching, loading and validating subgraph zoos (on the tiny task)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import ConfigError, ZooError
from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.registry import get_registry
from sparseloom.zoo.build import build_zoo
from sparseloom.zoo.extract import declared_signature
from sparseloom.zoo.load import load_zoo
from sparseloom.zoo.manifest import check_alignment
from sparseloom.zoo.options import ZooOptions, default_subgraphs
from sparseloom.zoo.tensors import ort_session, run_session
from sparseloom.zoo.types import VariantSpec, ZooNotBuiltError
from sparseloom.zoo.variants import DEFAULT_VARIANTS
from tests.zoo.zoo_support import tiny_task, tiny_zoo


@pytest.mark.parametrize("subgraphs", [2, 3])
def test_default_zoo_has_ten_aligned_variants(subgraphs: int) -> None:
    zoo = tiny_zoo(subgraphs)
    assert zoo.positions == subgraphs
    variants = zoo.variants
    assert len(variants) >= 10
    assert [v.id for v in variants] == list(range(len(variants)))
    assert variants[0].name == "dense" and variants[0].kind == "dense"
    assert [v.name for v in variants] == list(DEFAULT_VARIANTS)
    assert {v.kind for v in variants} >= {"dense", "unstructured", "structured", "int8", "fp16"}
    for variant in variants:
        assert variant.metric is not None and 0.0 <= variant.metric <= 1.0
        assert variant.size_bytes > 0
    for position in range(zoo.positions):
        dense = declared_signature(onnx.load(str(zoo.subgraph_path(position, 0))))
        boundary = zoo.boundary(position)
        assert [t["name"] for t in dense["inputs"]] == list(boundary.input_names)
        assert [t["name"] for t in dense["outputs"]] == list(boundary.output_names)
        for variant in variants:
            piece = onnx.load(str(zoo.subgraph_path(position, variant.id)))
            check_alignment("tiny", position, variant.id, variant.name, dense,
                            declared_signature(piece))


def test_manifest_lists_every_file_with_hash_and_boundaries() -> None:
    zoo = tiny_zoo(3)
    manifest = json.loads((zoo.directory / "manifest.json").read_text())
    assert manifest["task"] == "tiny" and manifest["hash"] == zoo.hash
    assert zoo.directory.name == zoo.hash and zoo.directory.parent.name == "zoo"
    assert manifest["build_config"]["subgraphs"] == 3
    assert manifest["build_config"]["variants"] == list(DEFAULT_VARIANTS)
    assert manifest["metric"]["name"] == "accuracy"
    entries = manifest["subgraphs"]
    assert len(entries) == 3 * len(manifest["variants"])
    for entry in entries:
        path = Path(entry["path"])
        assert not path.is_absolute()
        file = zoo.directory / path
        assert file.stat().st_size == entry["size_bytes"]
        position = manifest["positions"][entry["position"]]
        assert entry["inputs"] == [t["name"] for t in position["inputs"]]
        assert entry["outputs"] == [t["name"] for t in position["outputs"]]
    for position in manifest["positions"]:
        for tensor in position["inputs"] + position["outputs"]:
            assert set(tensor) == {"name", "dtype", "shape", "source"}
    assert manifest["positions"][0]["inputs"][0]["name"] == "image"
    assert manifest["positions"][-1]["outputs"][0]["name"] == "logits"


def test_original_metrics_match_the_dense_model() -> None:
    from sparseloom.workload.evaluate import evaluate

    zoo = tiny_zoo(2)
    assert zoo.variants[0].metric == evaluate(tiny_task())
    assert zoo.manifest["metric"]["dense"] == zoo.variants[0].metric


def test_zoo_is_cached_by_config() -> None:
    first = tiny_zoo(2)
    again = build_zoo(tiny_task(), ZooOptions(subgraphs=2), progress=False)
    assert again.cached and again.directory == first.directory and again.hash == first.hash
    assert tiny_zoo(3).hash != first.hash
    assert load_zoo(tiny_task(), ZooOptions(subgraphs=2)).directory == first.directory
    assert load_zoo(first.directory).hash == first.hash


def test_a_crashed_builds_staging_folder_is_removed_by_the_next_build() -> None:
    import subprocess
    import sys

    first = tiny_zoo(2)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    abandoned = first.directory.with_name(f"{first.hash}.building-{gone.stdout.strip()}")
    ours = first.directory.with_name(f"other.building-{os.getppid()}")
    for folder in (abandoned, ours):
        (folder / "p0").mkdir(parents=True)
    try:
        build_zoo(tiny_task(), ZooOptions(subgraphs=2), progress=False)
        assert not abandoned.exists()  # its process is gone
        assert ours.exists()  # a running process's build is left alone
    finally:
        for folder in (abandoned, ours):
            shutil.rmtree(folder, ignore_errors=True)


def test_unbuilt_zoo_is_reported() -> None:
    with pytest.raises(ZooNotBuiltError, match="no zoo of task 'tiny' with S=2 is built yet"):
        load_zoo(tiny_task(), ZooOptions(subgraphs=2,
            variants=["dense", "fp16", "unstructured-0.3"]))


@pytest.fixture
def zoo_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "zoo"
    shutil.copytree(tiny_zoo(2).directory, copy)
    return copy


def test_corrupted_file_is_refused(zoo_copy: Path) -> None:
    target = zoo_copy / "p1" / "v3-unstructured-0.7.onnx"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(ZooError, match=r"p1/v3-unstructured-0.7.onnx .*is corrupted: SHA-256"):
        load_zoo(zoo_copy)
    assert load_zoo(zoo_copy, verify=False).positions == 2


def test_missing_file_and_manifest_are_refused(zoo_copy: Path) -> None:
    (zoo_copy / "p0" / "v1-unstructured-0.3.onnx").unlink()
    with pytest.raises(ZooError, match="is missing"):
        load_zoo(zoo_copy)
    (zoo_copy / "manifest.json").write_text("{not json")
    with pytest.raises(ZooError, match="cannot read zoo manifest"):
        load_zoo(zoo_copy)
    (zoo_copy / "manifest.json").unlink()
    with pytest.raises(ZooError, match=r"manifest\.json is missing"):
        load_zoo(zoo_copy)


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        (["dense", "unstructured-1.5"], r"level 1.5 of compressor 'unstructured' is out of range"),
        (["dense", "structured-0"], r"out of range"),
        (["dense", "int8-0.5"], r"compressor 'int8' has no levels"),
        (["fp16", "dense"], r"first variant \(id 0\) must be 'dense'"),
        (["dense", "fp16", "fp16"], r"names 'fp16' more than once"),
    ],
)
def test_bad_variant_lists_are_config_errors(variants: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_zoo(tiny_task(), ZooOptions(subgraphs=2, variants=variants), progress=False)


def test_bad_subgraph_counts() -> None:
    with pytest.raises(ZooError, match=r"at most \d+ subgraphs"):
        build_zoo(tiny_task(), ZooOptions(subgraphs=40, variants=["dense", "fp16"]), progress=False)
    with pytest.raises(ConfigError, match="subgraphs must be >= 1"):  # at construction
        build_zoo(tiny_task(), ZooOptions(subgraphs=0), progress=False)
    assert default_subgraphs(["ov:CPU", "ort:CPU", "ov:CPU"]) == 3


def test_variant_spec_names_round_trip() -> None:
    for name in DEFAULT_VARIANTS:
        assert VariantSpec.parse(name).name == name
    spec = VariantSpec.parse("unstructured-0.5+int8")
    assert spec.steps == (("unstructured", 0.5), ("int8", 0.0))
    assert spec.compressor == "unstructured+int8" and spec.level == 0.5


# -- plugins that misbehave or watch -----------------------------------------------------------


class _RenamingCompressor:
    """Breaks alignment: renames the subgraph's first output."""

    kind = "int8"
    default_levels: tuple[float, ...] = ()

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(subgraph)
        old = model.graph.output[0].name
        for node in model.graph.node:
            for index, name in enumerate(node.output):
                if name == old:
                    node.output[index] = old + "_renamed"
        model.graph.output[0].name = old + "_renamed"
        return model


class _SpyCompressor:
    """Returns the subgraph unchanged and records what it was given."""

    kind = "int8"
    default_levels: tuple[float, ...] = ()
    calls: ClassVar[list[tuple[tuple[str, ...], list[dict[str, np.ndarray]]]]] = []

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        names = tuple(i.name for i in subgraph.graph.input)
        _SpyCompressor.calls.append((names, [dict(batch) for batch in calibration]))
        return subgraph


class _NothingToPrune:
    """A pruner that finds nothing prunable anywhere."""

    kind = "structured"
    default_levels = (0.5,)

    def prunable(self, subgraph: onnx.ModelProto) -> bool:
        return False

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        raise AssertionError("compress must not be called when prunable() is False")


class _TestPlugin:
    @hookimpl
    def sparseloom_register_compressors(self, register: Any) -> None:
        register("renaming", _RenamingCompressor)
        register("spy", _SpyCompressor)
        register("nothing-to-prune", _NothingToPrune)


@pytest.fixture
def test_compressors() -> Iterator[None]:
    registry = get_registry()
    name = registry.register_plugin(_TestPlugin(), "zoo-test-misbehaving", distribution="test",
                                    version="0")
    try:
        yield
    finally:
        registry.unregister_plugin(name)


def test_misaligned_variant_is_refused(test_compressors: None) -> None:
    with pytest.raises(
        ZooError,
        match=r"misaligned zoo: task 'tiny', position 0, variant 1 \(renaming\): boundary "
              r"outputs are \['.*_renamed'\], expected \['.*'\]",
    ):
        build_zoo(tiny_task(), ZooOptions(subgraphs=2, variants=["dense", "renaming"]),
            progress=False, rebuild=True)


def test_calibration_comes_from_the_dense_prefix(test_compressors: None) -> None:
    _SpyCompressor.calls.clear()
    task = tiny_task()
    zoo = build_zoo(task, ZooOptions(subgraphs=2, variants=["dense", "spy"]),
        progress=False, rebuild=True)
    assert len(_SpyCompressor.calls) == 2
    (names0, batches0), (names1, batches1) = _SpyCompressor.calls
    assert names0 == ("image",) and names1 == zoo.boundary(1).input_names
    rows = sum(len(b["image"]) for b in batches0)
    assert rows == len(task.calibration_inputs["image"])
    dense_first = ort_session(str(zoo.subgraph_path(0, 0)))
    for raw, seen in zip(batches0, batches1, strict=True):
        expected = run_session(dense_first, raw)
        assert set(seen) == set(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(seen[name], value, atol=1e-6)


def test_unprunable_positions_skip_the_step_and_say_so(test_compressors: None) -> None:
    options = ZooOptions(subgraphs=2, variants=["dense", "nothing-to-prune-0.5"])
    zoo = build_zoo(tiny_task(), options, progress=False, rebuild=True)
    for position in range(2):
        entry = zoo.subgraph(position, 1)
        assert entry.skipped == ("nothing-to-prune",)
        assert entry.sha256 == zoo.subgraph(position, 0).sha256
        assert zoo.subgraph(position, 0).skipped == ()
    assert zoo.variants[1].metric == zoo.variants[0].metric
