"""Bad input, round 4, run as a user would: plugins at the edges of their contracts, options
given twice, numbers without bounds, builder options, non-ASCII names and damaged profile
caches. The helpers are those of :mod:`tests.cli.test_bad_inputs`: a refusal exits non-zero
with exactly one ``Error:`` line and no traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_bad_inputs import clean, refused, run_cli, warned
from tests.plugin_dists import REPO
from tests.plugins.contract_edges import DISTRIBUTION, edges_distribution


@pytest.fixture(scope="module")
def tiny_entry() -> Path:
    """The shared cache's built tiny task (model.onnx, eval.npz, calibration.npz, meta.json)."""
    from sparseloom.api import load_workload

    return Path(load_workload("tiny", progress=False).tasks[0].info["cache_dir"])


@pytest.fixture(scope="module")
def edges_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that autoloads the contract-edge plugins' distribution."""
    root = edges_distribution(tmp_path_factory.mktemp("edges-dist"))
    path = os.pathsep.join(p for p in (str(root), str(REPO),
                                       os.environ.get("PYTHONPATH", "")) if p)
    return {"SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD": "0", "PYTHONPATH": path}


# -- 1. a plan with only the required fields -----------------------------------------------------


def test_a_plan_without_its_optional_fields_is_planned_run_and_simulated(
        edges_env: dict[str, str], tiny_entry: Path) -> None:
    proc = run_cli(["plan", "tiny", "--policy", "minimal-plan", "--json"], **edges_env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    task = json.loads(proc.stdout)["tasks"]["tiny"]
    assert task["variant"] == [0, 0] and len(set(task["processors"])) == 1
    # The dense variant's metric is the dense model's on the selection rows (the eval rows
    # not held out to judge it).
    from sparseloom.api import load_workload
    from sparseloom.workload.evaluate import evaluate

    dense = evaluate(load_workload("tiny", progress=False).task("tiny"))
    assert task["accuracy"] == pytest.approx(dense, abs=1e-6) and task["accuracy_measured"]
    assert task["latency_ms"] > 0
    # The SLO it was planned against: the one a built-in policy is given for the same task.
    builtin = json.loads(run_cli(["plan", "tiny", "--json"]).stdout)["tasks"]["tiny"]["slo"]
    assert task["slo"] == builtin
    meets = (task["accuracy"] >= task["slo"]["accuracy"]
             and task["latency_ms"] <= task["slo"]["latency_ms"])
    assert task["feasible"] is meets and (task["reason"] == "") is meets
    table = run_cli(["plan", "tiny", "--policy", "minimal-plan"], **edges_env)
    assert table.returncode == 0 and "dense+dense" in table.stdout, table.stderr

    served = run_cli(["run", "tiny", "--policy", "minimal-plan", "--queries", "20", "--json"],
                     **edges_env)
    assert served.returncode in (0, 1) and "Traceback" not in served.stderr, served.stderr
    row = json.loads(served.stdout)["tasks"][0]
    assert row["completed"] == 20 and row["variant"].startswith("tiny[0,0] @ ")
    simulated = run_cli(["simulate", "tiny", "--policy", "minimal-plan", "--json"], **edges_env)
    assert simulated.returncode == 0 and "Traceback" not in simulated.stderr, simulated.stderr
    result = json.loads(simulated.stdout)["results"]["minimal-plan"]
    assert result["tasks"][0]["variant"] == "0,0"
    bench = run_cli(["bench", "serve", "tiny", "--quick", "--scenario", "closed",
                     "--contender", "minimal-plan", "--json"], **edges_env)
    assert bench.returncode == 0 and "Traceback" not in bench.stderr, bench.stderr
    runs = json.loads(bench.stdout)["runs"]
    assert runs and all(r["contender"] == "minimal-plan" and r["valid"] for r in runs), runs


def test_a_plan_that_cannot_be_served_names_the_policy() -> None:
    from sparseloom.core.errors import PlanError
    from sparseloom.core.types import Plan, StitchedVariant
    from sparseloom.plan.contract import checked_plan
    from tests.plan.tables import random_table

    table = random_table(1, 3, 2, 2)
    task = next(iter(table.tasks))
    positions = table.task(task).n_positions
    order = (table.processors[0],) * positions
    cases: list[tuple[object, list[str]]] = [
        ({}, ["'p'", "dict, not a Plan"]),
        (Plan("p", order, {}), ["'p'", repr(task), "has no variant"]),
        (Plan("p", order, {task: StitchedVariant(task, (0,) * (positions + 1))}),
         [repr(task), f"{positions + 1} position(s)", f"cut into {positions}"]),
        (Plan("p", order, {task: StitchedVariant(task, (999,) * positions)}),
         ["variant index 999"]),
        (Plan("p", ("nosuch:CPU",) * positions, {task: StitchedVariant(task, (0,) * positions)}),
         ["'nosuch:CPU'", "does not hold"]),
    ]
    for plan, words in cases:
        with pytest.raises(PlanError) as caught:
            checked_plan(plan, table, "p", [task])
        for word in words:
            assert word in str(caught.value), str(caught.value)


# -- 2. a backend whose load() breaks the LoadedModel contract -----------------------------------


def test_a_loaded_model_without_its_members_names_the_backend(
        edges_env: dict[str, str], tiny_entry: Path) -> None:
    proc = run_cli(["infer", tiny_entry / "model.onnx", "-p", "bare-load:CPU", "--repeat", "1"],
                   **edges_env)
    refused(proc, "backend 'bare-load'", DISTRIBUTION, "load()", "input_names",
            "output_names", "memory_bytes")


def test_the_boundary_checks_what_load_and_devices_return() -> None:
    from sparseloom.core.errors import PluginCallError
    from sparseloom.core.protocols import contain
    from sparseloom.core.types import Processor, Registration
    from tests.plugins.contract_edges import BareLoadBackend

    registration = Registration("backend", "bare-load", BareLoadBackend, plugin="edges",
                                distribution="d", version="1")
    backend = contain(registration, BareLoadBackend())
    processor = BareLoadBackend.processors[0]
    with pytest.raises(PluginCallError, match=r"returned from load\(\) .*without processor"):
        backend.load(b"", processor)

    class NamesNotTuples(BareLoadBackend):
        def load(self, compiled: bytes, processor: Processor) -> object:
            return type("Loaded", (), {"processor": processor, "memory_bytes": 1,
                                       "input_names": "x", "output_names": ("y",)})()

        def devices(self) -> list[Processor]:
            return ["bare-load:CPU"]  # type: ignore[list-item]

    odd = contain(registration, NamesNotTuples())
    with pytest.raises(PluginCallError, match="input_names 'x', not a tuple of tensor names"):
        odd.load(b"", processor)
    with pytest.raises(PluginCallError, match=r"devices\(\) 'bare-load:CPU', not a Processor"):
        odd.devices()


# -- 3. given twice ------------------------------------------------------------------------------


def test_options_and_names_given_twice_are_refused(tiny_entry: Path) -> None:
    model = tiny_entry / "model.onnx"
    cases = [
        (["infer", model, "-p", "ort:CPU", "-p", "ov:CPU", "-p", "ort:CPU"],
         ["--processor", "3 times", "'ov:CPU'", "give it once"]),
        (["infer", model, "--processor=ort:CPU", "-pov:CPU"], ["--processor", "2 times"]),
        (["profile", "tiny", "-p", "ort:CPU", "-p", "ort:CPU?threads=1"],
         ["processor ort:CPU", "more than once"]),
        (["bench", "serve", "tiny", "--scenario", "closed", "--scenario", "closed"],
         ["--scenario", "'closed'", "more than once"]),
        (["run", "tiny", "--policy", "av-p", "--policy", "sparseloom"],
         ["--policy", "2 times", "'av-p'", "'sparseloom'"]),
        (["workloads", "build", "tiny", "--task", "tiny", "--task", "tiny"],
         ["--task", "'tiny'", "more than once"]),
        (["infer", model, "-p", "ort:CPU?cores=0&cores=1"],
         ["'cores' more than once", "cores=0 and cores=1", "cores=0,1"]),
        (["infer", model, "-p", "ort:CPU?threads=1&threads=1"], ["'threads' more than once"]),
    ]
    for args, words in cases:
        refused(run_cli(args), *words)


def test_a_python_list_naming_one_thing_twice_is_refused() -> None:
    import sparseloom
    from sparseloom.core.errors import ConfigError
    from sparseloom.evaluation.simulator import SimConfig
    from sparseloom.zoo.options import ZooOptions

    calls = [
        (lambda: sparseloom.Server("tiny", processors=["ort:CPU", "ort:CPU?threads=1"]),
         ["Server()", "processors", "'ort:CPU' more than once"]),
        (lambda: sparseloom.Server("tiny", tasks=["tiny", "tiny"]),
         ["Server()", "tasks", "'tiny' more than once"]),
        (lambda: SimConfig(arrival_order=("a", "b", "a")), ["arrival_order", "'a'"]),
        (lambda: ZooOptions(variants=("dense", "int8", "dense")), ["variants", "'dense'"]),
    ]
    for call, words in calls:
        with pytest.raises(ConfigError) as caught:
            call()
        for word in words:
            assert word in str(caught.value), str(caught.value)


# -- 4. numbers without bounds -------------------------------------------------------------------


def test_numbers_beyond_their_bounds_are_refused_before_any_work(tiny_entry: Path) -> None:
    model = tiny_entry / "model.onnx"
    huge = "99999999999999999999"
    cases = [
        (["simulate", "tiny", "--queries", "1000000000"], ["--queries", "10000000"]),
        (["sweep", "--queries", huge], ["--queries"]),
        (["run", "tiny", "--window", huge], ["--window", "1000000"]),
        (["run", "tiny", "--duration", "1e30"], ["--duration", "30 days"]),
        (["run", "tiny", "--load", "poisson", "--rate", "nan"], ["--rate", "finite"]),
        (["run", "tiny", "--seed", huge], ["--seed", "32-bit"]),
        (["profile", "tiny", "--seed", huge], ["--seed", "32-bit"]),
        (["profile", "tiny", "--repeats", huge], ["--repeats", "10000"]),
        (["profile", "tiny", "-S", huge], ["--subgraphs", "10000"]),
        (["zoo", "build", "tiny", "-S", "0"], ["--subgraphs", "1<=x<=10000"]),
        (["run", "tiny", "--duration", "inf"], ["--duration", "finite"]),
        (["infer", model, "--repeat", huge], ["--repeat", "1000000"]),
        (["bench", "serve", "tiny", "--k", "1e300"], ["--k", "1000"]),
        (["bench", "serve", "tiny", "--rounds", huge], ["--rounds"]),
        (["bench", "serve", "tiny", "--keep-loaded", "lots"],
         ["--keep-loaded", "'lots'", "1.5GiB", "units"]),
        (["evaluate", "tiny", "--repeats", huge], ["--repeats"]),
        (["infer", model, "-p", "ort:CPU?cores=0-400000000"],
         ["cores '0-400000000'", "core 400000000", "not usable by this process"]),
        (["infer", model, "-p", "ort:CPU?threads=2000"],
         ["threads=2000", "4 per core", "use threads="]),
        (["infer", model, "-p", "ort:CPU?streams=100000"], ["streams=100000"]),
    ]
    for args, words in cases:
        refused(run_cli(args), *words)


def test_a_simulation_too_long_to_hold_is_refused_in_python() -> None:
    from sparseloom.core.errors import ConfigError
    from sparseloom.evaluation.simulator import MAX_SIMULATED_QUERIES, SimConfig

    assert SimConfig(queries=MAX_SIMULATED_QUERIES).queries == MAX_SIMULATED_QUERIES
    with pytest.raises(ConfigError, match="queries"):
        SimConfig(queries=10**9)


# -- 5. builder options --------------------------------------------------------------------------


def test_builder_options_outside_their_range_are_refused_at_read(tmp_path: Path) -> None:
    cases = {
        "width = 0": ["width = 0", "[1, 256]"],
        "eval_fraction = 0.0": ["eval_fraction = 0.0", "[0.05, 0.95]"],
        "eval_fraction = 1.5": ["eval_fraction = 1.5", "[0.05, 0.95]"],
        "seed = -1": ["seed = -1", "[0, 4294967295]"],
        "batch_size = 0": ["batch_size = 0", "[1, 100000]"],
        "lr = nan": ["lr = nan", "(0, 10]"],
        "lr = inf": ["lr = inf", "(0, 10]"],
        "calibration_samples = 1": ["calibration_samples = 1", "[4, "],
    }
    for index, (option, words) in enumerate(cases.items()):
        path = tmp_path / f"w{index}.toml"
        path.write_text(f'name = "w{index}"\n[[task]]\nname = "t"\nbuilder = "tiny"\n'
                        f'[task.options]\n{option}\n')
        refused(run_cli(["workloads", "build", path, "--no-progress"], cache=tmp_path / "c"),
                str(path), "task 't'", "builder 'tiny'", *words)


def test_builder_option_rules_between_options_are_checked_in_python() -> None:
    from sparseloom.core.errors import ConfigError
    from sparseloom.plugins.workloads.activity import BUILDER as ACTIVITY
    from sparseloom.plugins.workloads.speech import BUILDER as SPEECH
    from sparseloom.plugins.workloads.vision import BUILDER as VISION
    from sparseloom.workload.task import TaskDefinition

    cases = [
        (ACTIVITY, {"dim": 63}, ["dim = 63", "heads = 4"]),
        (SPEECH, {"min_digits": 6}, ["min_digits = 6", "max_digits = 5"]),
        (VISION, {"stages": [[24]]}, ["stages", "[channels, stride]"]),
        (VISION, {"stages": [[0, 2]]}, ["stages", "[1, 1024]"]),
    ]
    for builder, options, words in cases:
        with pytest.raises(ConfigError) as caught:
            TaskDefinition(name="t", builder=builder, options=options)
        for word in words:
            assert word in str(caught.value), str(caught.value)
    assert TaskDefinition(name="t", builder=VISION).options == {}  # the defaults are valid


# -- 6. a non-ASCII workload name ----------------------------------------------------------------


def test_a_non_ascii_workload_is_found_where_it_was_profiled(tiny_entry: Path,
                                                             tmp_path: Path) -> None:
    for name in ("model.onnx", "eval.npz", "calibration.npz"):
        shutil.copy(tiny_entry / name, tmp_path / name)
    workload = tmp_path / "w.toml"
    workload.write_text('name = "café"\n[[task]]\nname = "thé"\nmodel = "model.onnx"\n'
                        'data = "eval.npz"\ncalibration = "calibration.npz"\n')
    options = ["-S", "2", "--variants", "dense,int8,unstructured-0.5", "--repeats", "3",
               "--warmup", "0", "--samples", "6"]
    cache = tmp_path / "cache"
    built = run_cli(["profile", workload, *options, "--json"], cache=cache)
    assert built.returncode == 0, built.stderr
    refreshed = run_cli(["profile", workload, *options, "--refresh", "rescale", "--json"],
                        cache=cache)
    assert refreshed.returncode == 0 and "Traceback" not in refreshed.stderr, refreshed.stderr
    # Refreshed in place: the table it found is the one the profile wrote.
    assert (json.loads(refreshed.stdout)["profile_directory"]
            == json.loads(built.stdout)["profile_directory"])


def test_names_that_differ_only_outside_ascii_get_their_own_cache_folders() -> None:
    from sparseloom.core.cache import cache_name

    assert cache_name("tiny") == "tiny"  # a plain name keeps its folder
    names = ["café", "cafè", "caf_", "caf?", "a/b", "a_b", ".."]
    folders = [cache_name(name) for name in names]
    assert len(set(folders)) == len(names), folders
    assert all("/" not in f and f not in (".", "..") for f in folders)


# -- 7. damaged profile caches -------------------------------------------------------------------


@pytest.fixture()
def profiled_cache(tiny_entry: Path, tmp_path: Path) -> Path:
    """A private cache with copies of the tiny task, its zoo and its profile's measured parts
    (not its tables: those record the shared cache's paths), so that ``plan tiny`` rebuilds
    the table in seconds."""
    from sparseloom.core.cache import cache_dir
    from sparseloom.workload.load import load_workload
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions, workload_processors

    shared = cache_dir()
    workload = load_workload("tiny", progress=False)
    zoo = build_zoo(workload.tasks[0], ZooOptions(processors=workload_processors(workload)),
                    progress=False)
    if not list((shared / "profiles" / "tiny").glob("*/accuracy-tiny-*.npz")):
        clean(run_cli(["profile", "tiny"]))  # the shared profile, made once
    cache = tmp_path / "cache"
    shutil.copytree(tiny_entry, cache / "workloads" / tiny_entry.name)
    shutil.copytree(zoo.directory, cache / "zoo" / Path(zoo.directory).name)
    shutil.copytree(shared / "profiles" / "tiny", cache / "profiles" / "tiny",
                    ignore=shutil.ignore_patterns("table-*", ".lock"))
    return cache


def test_a_unit_copied_over_another_is_measured_again(profiled_cache: Path) -> None:
    units = list((profiled_cache / "profiles" / "tiny").glob("*/accuracy-tiny-*.npz"))
    foreign = next((profiled_cache / "profiles" / "tiny").glob("*/fidelity-tiny.npz"))
    for unit in units:
        shutil.copy(foreign, unit)
    proc = run_cli(["plan", "tiny", "--json"], cache=profiled_cache)
    warned(proc, "accuracy-tiny-", "damaged", "measuring it again")
    assert json.loads(proc.stdout)["tasks"]["tiny"]["variant"]
    clean(run_cli(["plan", "tiny"], cache=profiled_cache))  # measured again and saved


def test_a_damaged_profile_table_is_named_with_the_fix(profiled_cache: Path) -> None:
    import sparseloom
    from sparseloom.core.errors import ProfileError

    built = run_cli(["profile", "tiny", "--json"], cache=profiled_cache)
    assert built.returncode == 0, built.stderr
    table = Path(json.loads(built.stdout)["profile_directory"])
    assert table.is_relative_to(profiled_cache)
    npz, document = (table / "profile.npz").read_bytes(), (table / "profile.json").read_text()

    (table / "profile.npz").write_bytes(npz[: len(npz) // 2])
    line = refused(run_cli(["profile", "tiny", "--refresh", "rescale"], cache=profiled_cache),
                   str(table), "BadZipFile", "--no-cache")
    assert "no cached profile" not in line
    with pytest.raises(ProfileError, match="delete"):
        sparseloom.load_profile(table)

    (table / "profile.npz").write_bytes(npz)
    (table / "profile.json").write_text(json.dumps(
        {k: v for k, v in json.loads(document).items() if k != "tasks"}))
    refused(run_cli(["profile", "tiny", "--refresh", "rescale"], cache=profiled_cache),
            str(table), "KeyError", "'tasks'", "sparseloom profile tiny --no-cache")
    with pytest.raises(ProfileError, match=str(table)):
        sparseloom.load_profile(table)

    shutil.rmtree(table)  # the fix the message gives
    clean(run_cli(["profile", "tiny"], cache=profiled_cache))
    assert sparseloom.load_profile(table).tasks["tiny"].n_positions == 2
    np.testing.assert_equal(sparseloom.load_profile(table).processors,
                            json.loads(built.stdout)["processors"])
