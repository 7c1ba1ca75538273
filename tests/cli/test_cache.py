"""``sparseloom cache list`` and ``cache prune`` on a small cache laid out as a real one.

The fake cache copies the real layout (the zoo manifest is a real one, ``tiny``'s, from a
built cache) with small files of known sizes; expected sizes are summed here with ``os.walk``,
not with the code under test. The last test builds the real ``tiny`` workload into an empty
cache, prunes the compiled models and loads it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sparseloom.cli import cli
from sparseloom.workload.build import builder_cache_key
from sparseloom.workload.load import resolve_workload

MANIFEST = Path(__file__).resolve().parent / "data" / "zoo_manifest_tiny.json"
DAY_S = 86400
#: The zoo hashes of the fake cache: tiny's and vision's (bundled), and the zoo of another
#: workload's task that is also named ``tiny`` but was built with other options.
TINY_ZOO, VISION_ZOO, OTHER_ZOO = "af702e194d945e0f", "6b2b1963f319abe0", "1111222233334444"
OTHER_BUILD = "tiny-0123456789abcdef"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["cache", *args], catch_exceptions=False)


def one_error(result: Result, *words: str) -> str:
    """The one ``Error:`` line of a refused command (status 1); it names every one of ``words``."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def put(path: Path, size: int | None = None, text: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text)
    else:
        path.write_bytes(b"x" * (size or 0))


def tree(root: Path) -> dict[str, int]:
    """Every file under ``root`` and its size (relative paths), the in-use lock file aside."""
    return {str(Path(folder, name).relative_to(root)): os.path.getsize(Path(folder, name))
            for folder, _, names in os.walk(root) for name in names
            if Path(folder, name) != root / ".in-use"}


def du(*paths: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes of the files under ``paths``, a hard-linked file once (as ``du -b`` counts them,
    without the folders' own sizes); ``seen`` carries the links met over several calls."""
    seen = set() if seen is None else seen
    total = 0
    for path in paths:
        for folder, _, names in os.walk(path):
            for name in names:
                info = os.lstat(Path(folder, name))
                if (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_size
    return total


def age(path: Path, days: float) -> None:
    """Set the modification time of ``path`` and everything in it ``days`` back."""
    moment = time.time() - days * DAY_S
    for folder, names, files in os.walk(path, topdown=False):
        for name in [*names, *files]:
            os.utime(Path(folder, name), (moment, moment))
    os.utime(path, (moment, moment))


def _zoo(root: Path, zoo_hash: str, task: str, build: str, digest: str, sizes: tuple[int, int]
         ) -> None:
    manifest = json.loads(MANIFEST.read_text())
    manifest.update(task=task, hash=zoo_hash,
                    dense_model={"path": f"/elsewhere/cache/workloads/{build}/model.onnx",
                                 "sha256": digest})
    folder = root / "zoo" / zoo_hash
    put(folder / "manifest.json", text=json.dumps(manifest, indent=1))
    put(folder / "p0" / "v0-dense.onnx", sizes[0])
    put(folder / "p1" / "v0-dense.onnx", sizes[1])
    put(folder / "metrics" / "b41e6e5407201e67.json", 52)
    put(folder / "metrics" / "b41e6e5407201e67.json.lock", 0)


def _build(root: Path, folder: str, builder: str, digest: str, model_bytes: int) -> None:
    entry = root / "workloads" / folder
    put(entry / "model.onnx", model_bytes)
    put(entry / "eval.npz", 1200)
    put(entry / "calibration.npz", 400)
    put(entry / "meta.json", text=json.dumps({"metric": "accuracy", "builder": builder,
                                              "sha256": {"model.onnx": digest}}))
    put(root / "workloads" / f"{folder}.lock", 0)


def _profile(root: Path, workload: str, key: str, zoos: dict[str, str], unit: str) -> None:
    folder = root / "profiles" / workload / key
    put(folder / "key.json", text=json.dumps({"sparseloom": "0.1.0", "zoos": zoos}))
    put(folder / f"{unit}.npz", 640)
    put(folder / "table-561937b31440f558" / "table.json", 70)
    put(root / "profiles" / workload / ".lock", 0)


@pytest.fixture(scope="module")
def folders() -> dict[str, str]:
    """The workloads/ folders of the bundled tasks tiny and vision, as the builders name them."""
    return {task.name: builder_cache_key(task.builder, task.options)[1]
            for name in ("tiny", "default") for task in resolve_workload(name).tasks
            if task.builder is not None and task.name in ("tiny", "vision")}


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folders: dict[str, str]) -> Path:
    """A cache of every stage: tiny and vision of the bundled workloads, and another workload
    ``other`` whose task is also named ``tiny``, with content-keyed files beside them."""
    root = tmp_path / "cache"
    _build(root, folders["tiny"], "tiny", "a" * 64, 3000)
    _build(root, folders["vision"], "vision", "c" * 64, 5000)
    _build(root, OTHER_BUILD, "tiny", "b" * 64, 2500)
    _zoo(root, TINY_ZOO, "tiny", folders["tiny"], "a" * 64, (700, 800))
    _zoo(root, VISION_ZOO, "vision", folders["vision"], "c" * 64, (1700, 1800))
    _zoo(root, OTHER_ZOO, "tiny", OTHER_BUILD, "b" * 64, (600, 650))
    put(root / "zoo" / "5555666677778888.building-99999999" / "p0" / "v0-dense.onnx", 100)
    for zoo_hash, name, size in ((TINY_ZOO, "tiny-0_0", 900), (VISION_ZOO, "vision-0_3", 1100),
                                 (OTHER_ZOO, "tiny-1_1", 300)):
        put(root / "whole" / zoo_hash / f"{name}.onnx", size)
        put(root / "whole" / zoo_hash / ".lock", 0)
    _profile(root, "tiny", "7332b9a33b788c1e", {"tiny": TINY_ZOO}, "latency-tiny")
    _profile(root, "default", "bf297fa3da1face8", {"vision": VISION_ZOO}, "latency-vision")
    _profile(root, "other", "84dbb7748d38a3c9", {"tiny": OTHER_ZOO}, "latency-tiny")
    put(root / "batch1" / "03c6b1bb76ad24c2-batch.onnx", 2000)  # a copy of the weights
    put(root / "batch1" / "2dace689b620bf45-batch.ref.onnx", 90)  # a graph referencing ...
    put(root / "batch1" / "tensors" / f"{'e' * 32}.bin", 700)  # ... its shared tensors
    put(root / "batch1" / ".lock", 0)
    for key, size in (("00ee0bf4b168daa9", 1500), ("016cc906d42714b4", 1600)):
        put(root / "ort" / f"{key}.onnx", size)  # an optimized model, its digest, providers
        put(root / "ort" / f"{key}.onnx.sha256", 64)
        put(root / "ort" / f"{key}.onnx.providers.json", 30)
    put(root / "ort" / "87ead41f85f3d38d.providers.json", 24)  # a providers record alone
    put(root / "ort" / "trt" / "9f00aa11bb22cc33" / "engine.trt", 400)
    put(root / "ov" / "13170470171862526513.blob", 2200)
    put(root / "ov" / "0050d6f524698ef1.devices.json", 10)
    put(root / "probes" / "001f307823b8a87d349bd359.json", 120)
    put(root / "probes" / "models" / "4d3450042fe266a00be466a5.onnx", 330)
    monkeypatch.setenv("SPARSELOOM_CACHE_DIR", str(root))
    return root


# -- list ---------------------------------------------------------------------------------------


def test_list_sizes_match_the_files_on_disk(cache: Path, folders: dict[str, str]) -> None:
    before = tree(cache)
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    stages = {row["name"]: row for row in report["stages"]}
    seen: set[tuple[int, int]] = set()
    for name in ("workloads", "zoo", "whole", "profiles", "batch1", "ort", "ov", "probes"):
        assert stages[name]["size_bytes"] == du(cache / name, seen=seen), name
        assert stages[name]["files"] == len(tree(cache / name)), name
    assert stages["batch1"]["size_bytes"] == 2000 + 90 + 700
    assert not stages["models"]["exists"] and stages["models"]["size_bytes"] == 0
    assert report["size_bytes"] == du(cache) and report["files"] == len(before)
    # One entry per ORT artefact (with its digest and providers), providers record, TensorRT
    # folder; per blob; per batch-1 copy and per shared tensor ...
    assert [stages[name]["entries"] for name in ("batch1", "ort", "ov", "probes")] \
        == [3, 4, 2, 2]
    assert stages["zoo"]["entries"] == 3  # the build in progress is no entry
    owners = {(row["stage"], row["name"]): row for row in report["owners"]}
    tiny_build = cache / "workloads" / folders["tiny"]
    assert owners["workloads", "tiny"]["size_bytes"] == du(tiny_build) + du(
        cache / "workloads" / f"{OTHER_BUILD}")  # two builds of a task named tiny
    assert owners["workloads", "tiny"]["entries"] == 2
    assert owners["zoo", "vision"]["size_bytes"] == du(cache / "zoo" / VISION_ZOO)
    assert owners["whole", "vision"]["size_bytes"] == 1100
    assert owners["profiles", "default"]["size_bytes"] == du(cache / "profiles" / "default")
    assert tree(cache) == before and not (cache / ".in-use").exists()  # it created nothing


def test_list_table_names_the_folder_each_stage_and_each_task(cache: Path) -> None:
    result = invoke("list")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert str(cache) in text and "$SPARSELOOM_CACHE_DIR" in text
    total = next(line for line in text.splitlines() if line.startswith("total"))
    size = du(cache)
    assert f"{size / 1024:.1f} KiB" in total and f"{len(tree(cache)):,}" in total
    for stage in ("workloads", "zoo", "whole", "profiles", "batch1", "ort", "ov", "probes"):
        assert any(line.startswith(stage + " ") for line in text.splitlines()), stage
    assert any(line.split()[:2] == ["profiles", "default"] for line in text.splitlines())


def test_list_on_an_absent_or_empty_cache_says_so_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = tmp_path / "absent"
    monkeypatch.setenv("SPARSELOOM_CACHE_DIR", str(absent))
    result = invoke("list")
    assert result.exit_code == 0 and "does not exist" in result.stdout and not absent.exists()
    assert json.loads(invoke("list", "--json").stdout)["exists"] is False
    assert invoke("prune", "--all").exit_code == 0 and not absent.exists()
    absent.mkdir()
    result = invoke("list")
    assert result.exit_code == 0 and "is empty" in result.stdout
    assert list(absent.iterdir()) == []


# -- prune: what goes ---------------------------------------------------------------------------


def test_prune_workload_removes_its_entries_and_nothing_else(
        cache: Path, folders: dict[str, str]) -> None:
    before = tree(cache)
    result = invoke("prune", "--workload", "tiny")
    assert result.exit_code == 0, result.output
    gone = {path for path in before if path.startswith((
        f"workloads/{folders['tiny']}", f"zoo/{TINY_ZOO}/", f"whole/{TINY_ZOO}/",
        "profiles/tiny/"))}
    assert len(gone) == 5 + 5 + 2 + 4  # build + lock, zoo, whole, profile + lock
    assert tree(cache) == {path: size for path, size in before.items() if path not in gone}
    assert not (cache / "profiles" / "tiny").exists()  # the folder left with its lock only
    freed = sum(before[path] for path in gone)
    assert f"freed {freed / 1024:.1f} KiB" in result.stdout
    assert f"zoo/{TINY_ZOO}" in result.stdout and "tasks tiny" in result.stdout
    assert not [name for name in os.listdir(cache / "zoo") if ".pruning-" in name]


def test_prune_unregistered_workload_follows_its_profiles(cache: Path) -> None:
    before = tree(cache)
    result = invoke("prune", "--workload", "other")
    assert result.exit_code == 0, result.output
    gone = {path for path in before if path.startswith((
        f"workloads/{OTHER_BUILD}", f"zoo/{OTHER_ZOO}/", f"whole/{OTHER_ZOO}/",
        "profiles/other/"))}
    assert tree(cache) == {path: size for path, size in before.items() if path not in gone}
    assert "not registered" in result.stdout
    one_error(invoke("prune", "--workload", "no-such-workload"), "no-such-workload",
              "registered", "tiny")


def test_prune_workload_file_matches_zoos_by_its_model(cache: Path, tmp_path: Path) -> None:
    """A workload .toml whose task is a model file: its zoos are cut from that file (by path
    or SHA-256; the zoo of another task named alike stays)."""
    import hashlib

    model = tmp_path / "mine" / "camera.onnx"
    put(model, text="not really a model, but a file with a digest")
    put(model.with_name("data.npz"), 10)
    workload = model.with_name("mine.toml")
    workload.write_text('name = "mine"\n[[task]]\nname = "camera"\nmodel = "camera.onnx"\n'
                        'data = "data.npz"\n')
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    _zoo(cache, "aaaabbbbccccdddd", "camera", "moved-away", digest, (10, 20))  # by digest
    manifest = cache / "zoo" / "aaaabbbbccccdddd" / "manifest.json"
    _zoo(cache, "eeeeffff00001111", "camera", "other", "d" * 64, (30, 40))  # another camera
    before = tree(cache)
    result = invoke("prune", "--workload", str(workload))
    assert result.exit_code == 0, result.output
    assert set(before) - set(tree(cache)) == {
        path for path in before if path.startswith("zoo/aaaabbbbccccdddd/")}
    assert not manifest.exists() and (cache / "zoo" / "eeeeffff00001111").is_dir()


def test_an_entry_that_cannot_be_removed_is_reported_and_the_rest_go(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparseloom.cli import cache_prune

    rename = os.rename

    def refuse_zoo(source: Path, target: Path) -> None:
        if Path(source).name == TINY_ZOO and Path(source).parent.name == "zoo":
            raise PermissionError(13, "Permission denied", str(source))
        rename(source, target)

    monkeypatch.setattr(cache_prune.os, "rename", refuse_zoo)
    result = invoke("prune", "--workload", "tiny")
    one_error(result, f"zoo/{TINY_ZOO}", "Permission denied", "could not remove 1 entry")
    assert (cache / "zoo" / TINY_ZOO / "manifest.json").is_file()  # untouched, whole
    assert not (cache / "whole" / TINY_ZOO).exists() and "Removed 3 entries" in result.stdout


def test_prune_older_than_uses_modification_times(cache: Path, folders: dict[str, str]) -> None:
    age(cache / "ort" / "00ee0bf4b168daa9.onnx", 10)
    age(cache / "ort" / "00ee0bf4b168daa9.onnx.sha256", 10)
    age(cache / "ort" / "00ee0bf4b168daa9.onnx.providers.json", 10)
    age(cache / "workloads" / folders["vision"], 8)
    age(cache / "workloads" / f"{folders['vision']}.lock", 8)
    age(cache / "zoo" / VISION_ZOO, 6)
    before = tree(cache)
    assert invoke("prune", "--older-than", "7d", "--stage", "ort").exit_code == 0
    assert set(before) - set(tree(cache)) == {
        "ort/00ee0bf4b168daa9.onnx", "ort/00ee0bf4b168daa9.onnx.sha256",
        "ort/00ee0bf4b168daa9.onnx.providers.json"}
    before = tree(cache)
    assert invoke("prune", "--older-than", "7d").exit_code == 0  # every stage
    assert {path.split("/")[1] for path in set(before) - set(tree(cache))} == {
        folders["vision"], f"{folders['vision']}.lock"}
    before = tree(cache)
    assert invoke("prune", "--older-than", "5d", "--stage", "zoo").exit_code == 0
    gone = set(before) - set(tree(cache))  # a zoo takes its merged models along
    assert {"/".join(path.split("/")[:2]) for path in gone} == {f"zoo/{VISION_ZOO}",
                                                                 f"whole/{VISION_ZOO}"}


def test_dry_run_removes_nothing(cache: Path) -> None:
    before = {path: os.stat(cache / path).st_mtime_ns for path in tree(cache)}
    result = invoke("prune", "--all", "--dry-run")
    assert result.exit_code == 0, result.output
    assert {path: os.stat(cache / path).st_mtime_ns for path in tree(cache)} == before
    assert not (cache / ".in-use").exists()
    total = du(cache) - 100  # the build in progress is no entry
    assert f"freeing {total / 1024:.1f} KiB" in result.stdout and "dry run" in result.stdout


def test_bad_selectors_are_one_line_errors(cache: Path) -> None:
    before = tree(cache)
    one_error(invoke("prune", "--older-than", "7x"), "--older-than", "'7x'", "7d")
    one_error(invoke("prune", "--older-than", "-1d"), "--older-than")
    one_error(invoke("prune", "--stage", "zoos"), "--stage", "'zoos'", "zoo", "ort")
    one_error(invoke("prune"), "--older-than", "--workload", "--stage", "--all")
    one_error(invoke("prune", "--dry-run"), "--all")
    assert tree(cache) == before


# -- prune: safety ------------------------------------------------------------------------------


def _holder(cache: Path) -> subprocess.Popen[str]:
    """A process that uses the cache (calls cache_dir()) and then sleeps."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom sparseloom.core.cache import cache_dir\n"
         "cache_dir()\nprint('ready', flush=True)\ntime.sleep(120)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "SPARSELOOM_CACHE_DIR": str(cache)})
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_prune_refuses_while_another_process_uses_the_cache(cache: Path) -> None:
    child = _holder(cache)
    try:
        before = tree(cache)
        line = one_error(invoke("prune", "--stage", "ort"), "another sparseloom process",
                         "retry")
        if Path("/proc/locks").is_file():
            assert f"pid {child.pid}" in line
        assert tree(cache) == before
        dry = invoke("prune", "--stage", "ort", "--dry-run")
        assert dry.exit_code == 0 and "would be refused" in dry.stderr
    finally:
        child.kill()
        child.wait()
    result = invoke("prune", "--stage", "ort")
    assert result.exit_code == 0, result.output
    assert os.listdir(cache / "ort") == ["trt"] and os.listdir(cache / "ort" / "trt") == []


def test_a_process_starting_during_a_prune_waits_for_it(cache: Path) -> None:
    from sparseloom.cli.cache_prune import exclusive_use

    with exclusive_use(cache):
        child = subprocess.Popen(
            [sys.executable, "-c", "from sparseloom.core.cache import cache_dir\n"
             "cache_dir()\nprint('got the cache', flush=True)"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "SPARSELOOM_CACHE_DIR": str(cache)})
        assert child.stderr is not None
        assert "Waiting for `sparseloom cache prune`" in child.stderr.readline()
        assert child.poll() is None
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and "got the cache" in out


def test_prune_cut_short_leaves_no_half_entry_and_the_next_cleans_up(
        cache: Path, folders: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from sparseloom.cli import cache_prune

    def cut(path: object, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # the prune dies after renaming its first folder

    before, rmtree = tree(cache), shutil.rmtree
    monkeypatch.setattr(cache_prune.shutil, "rmtree", cut)
    assert invoke("prune", "--workload", "tiny").exit_code == 130
    monkeypatch.setattr(cache_prune.shutil, "rmtree", rmtree)
    build = cache / "workloads" / folders["tiny"]
    assert not build.exists()  # renamed whole: no half entry where readers look
    leftovers = [name for name in os.listdir(cache / "workloads") if ".pruning-" in name]
    assert leftovers == [f".{folders['tiny']}.pruning-{os.getpid()}"]
    assert (cache / "zoo" / TINY_ZOO / "manifest.json").is_file()  # the rest untouched
    report = json.loads(invoke("list", "--json").stdout)
    assert report["leftovers"] == {"count": 1, "size_bytes": du(build.parent / leftovers[0])}
    assert invoke("prune", "--stage", "ov").exit_code == 0
    assert not [name for name in os.listdir(cache / "workloads") if ".pruning-" in name]
    assert set(before) - set(tree(cache)) == {
        path for path in before if path.startswith((f"workloads/{folders['tiny']}/", "ov/"))}


def test_a_leftover_folder_is_skipped_by_list_and_cleaned_by_prune(cache: Path) -> None:
    leftover = cache / "zoo" / ".x.pruning-123"
    put(leftover / "p0" / "v0-dense.onnx", 100)
    report = json.loads(invoke("list", "--json").stdout)
    zoo = next(row for row in report["stages"] if row["name"] == "zoo")
    assert zoo["entries"] == 3 and zoo["size_bytes"] == du(cache / "zoo") - 100
    assert report["leftovers"] == {"count": 1, "size_bytes": 100}
    assert "leftover" in invoke("list").stdout
    result = invoke("prune", "--stage", "probes")
    assert result.exit_code == 0 and "1 leftover" in result.stdout
    assert not leftover.exists() and (cache / "zoo" / TINY_ZOO).is_dir()


# -- end to end ---------------------------------------------------------------------------------

_LOAD = ("import sparseloom\nw = sparseloom.load_workload('tiny', progress=False)\n"
         "print('cache_hit', w.task('tiny').info['cache_hit'])")


def test_real_tiny_workload_loads_again_after_its_compiled_models_are_pruned(
        tmp_path: Path) -> None:
    """Builds the bundled tiny task into an empty cache (~12 s on 2 vCPUs)."""
    root = tmp_path / "cache"
    env = {**os.environ, "SPARSELOOM_CACHE_DIR": str(root)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    def infer() -> None:  # compiles the built model with both backends, into ort/ and ov/
        model = next((root / "workloads").glob("tiny-*/model.onnx"))
        for processor in ("ort:CPU", "ov:CPU"):
            run("-m", "sparseloom", "infer", str(model), "-p", processor, "--repeat", "1")

    def compiled() -> list[str]:
        return [f"{stage}/{name}" for stage in ("ort", "ov", "batch1")
                if (root / stage).is_dir() for name in os.listdir(root / stage)]

    assert "cache_hit False" in run("-c", _LOAD).stdout
    infer()
    assert (root / "workloads").is_dir() and compiled()  # OpenVINO's blob, at least
    kept = set(tree(root)) - set(compiled())
    pruned = run("-m", "sparseloom", "cache", "prune", "--stage", "ort", "--stage", "ov",
                 "--stage", "batch1")
    assert pruned.stdout.startswith(("Removed", "Nothing to prune")), pruned.stdout
    assert compiled() == [] and set(tree(root)) == kept
    assert "cache_hit True" in run("-c", _LOAD).stdout
    infer()  # each backend compiles again where it keeps its artefacts
