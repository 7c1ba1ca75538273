"""The Python API is as strict as the command line.

Every public function and record refuses a wrong argument with one
:class:`~sparseloom.core.errors.ArgumentError` naming the function (or record) and the
parameter — never an ``AttributeError`` from deep inside, never a string read letter by letter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

import sparseloom
from sparseloom.core.errors import ArgumentError, SparseloomError
from sparseloom.core.types import SLO
from sparseloom.evaluation.harness import EvalConfig
from sparseloom.evaluation.simulator import SimConfig
from sparseloom.profile.builder import ProfileOptions
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.session import RunConfig
from sparseloom.zoo.options import ZooOptions
from tests.plan.tables import random_table

CASES: list[tuple[Callable[[], Any], list[str]]] = [
    (lambda: sparseloom.make_plan(None), ["make_plan()", "profile", "ProfileTable", "None"]),
    (lambda: sparseloom.build_zoos(None), ["build_zoos()", "workload", "NoneType"]),
    (lambda: sparseloom.serve(None), ["serve()", "workload"]),
    (lambda: sparseloom.build_profile(3.5), ["build_profile()", "workload", "float"]),
    (lambda: sparseloom.refresh_profile(None), ["refresh_profile()", "workload"]),
    (lambda: sparseloom.load_workload(42), ["load_workload()", "name_or_path", "42"]),
    (lambda: sparseloom.load_workload(""), ["load_workload()", "name_or_path", "empty"]),
    (lambda: sparseloom.load_workload("tiny", tasks="tiny"),
     ["load_workload()", "tasks", "tasks=['tiny']"]),
    (lambda: sparseloom.load_workload("tiny", tasks=[1]), ["tasks", "str", "1 (int)"]),
    (lambda: sparseloom.load_profile(None), ["load_profile()", "directory"]),
    (lambda: sparseloom.load_workload("tiny", rebuild="no"), ["rebuild", "True or False"]),
    (lambda: sparseloom.build_zoos("tiny", rebuild=1), ["build_zoos()", "rebuild"]),
    (lambda: sparseloom.serve("tiny", progress="yes"), ["serve()", "progress"]),
    (lambda: sparseloom.make_plan(random_table(1, 2, 2, 2), slos={"t0": 0.5}),
     ["make_plan()", "slos['t0']", "(accuracy, latency_ms)"]),
    (lambda: sparseloom.make_plan(random_table(1, 2, 2, 2), slos={"t0": (0.5, math.inf)}),
     ["slos['t0']", "latency_ms", "inf"]),
    (lambda: sparseloom.make_plan(random_table(1, 2, 2, 2), processors="p0"),
     ["processors", "processors=['p0']"]),
    (lambda: sparseloom.make_plan(random_table(1, 2, 2, 2), memory_budget=math.nan),
     ["memory_budget", "finite"]),
    (lambda: sparseloom.make_plan(random_table(1, 2, 2, 2), policy=None),
     ["policy", "registered policy name"]),
    (lambda: LoadSpec(queries=0), ["LoadSpec", "queries", ">= 1", "0"]),
    (lambda: LoadSpec(queries=-5), ["LoadSpec", "queries", "-5"]),
    (lambda: LoadSpec(queries="abc"), ["LoadSpec", "queries", "whole number", "'abc'"]),
    (lambda: LoadSpec(queries=True), ["LoadSpec", "queries", "True (bool)"]),
    (lambda: LoadSpec("poisson", rate=math.nan), ["LoadSpec", "rate", "finite"]),
    (lambda: LoadSpec(duration_s=-1.0), ["LoadSpec", "duration_s", "> 0"]),
    (lambda: LoadSpec(arrival_order="tiny"), ["LoadSpec", "arrival_order", "['tiny']"]),
    (lambda: LoadSpec("burst"), ["LoadSpec", "kind", "'closed', 'poisson'"]),
    (lambda: RuntimeOptions(fault_rate=-1), ["RuntimeOptions", "fault_rate", "[0, 1]"]),
    (lambda: RuntimeOptions(window=0), ["RuntimeOptions", "window", ">= 1"]),
    (lambda: RuntimeOptions(fault_processors="ort:CPU"), ["fault_processors", "['ort:CPU']"]),
    (lambda: RuntimeOptions(feedback="no"), ["RuntimeOptions", "feedback", "True or False"]),
    (lambda: RuntimeOptions(freeze_heap=0), ["RuntimeOptions", "freeze_heap", "0 (int)"]),
    (lambda: RunConfig(slos={"t": 0.5}), ["RunConfig", "slos['t']", "(0.85, 40)"]),
    (lambda: RunConfig(processors="ort:CPU"), ["RunConfig", "processors", "['ort:CPU']"]),
    (lambda: RunConfig(load="fast"), ["RunConfig", "load", "LoadSpec"]),
    (lambda: RunConfig(memory_budget=0), ["RunConfig", "memory_budget", "> 0"]),
    (lambda: SLO("high", 3), ["SLO accuracy", "number", "'high'"]),
    (lambda: ProfileOptions(seed=-1), ["ProfileOptions", "seed", ">= 0"]),
    (lambda: ProfileOptions(samples=0), ["ProfileOptions", "samples", ">= 1"]),
    (lambda: ProfileOptions(variants="int8"), ["ProfileOptions", "variants", "['int8']"]),
    (lambda: ProfileOptions(accuracy_estimator=3), ["accuracy_estimator", "3 (int)"]),
    (lambda: ZooOptions(subgraphs="2"), ["ZooOptions", "subgraphs", "whole number"]),
    (lambda: ZooOptions(variants="int8"), ["ZooOptions", "variants", "['int8']"]),
    (lambda: ZooOptions(processors="ov:CPU"), ["ZooOptions", "processors", "['ov:CPU']"]),
    (lambda: ZooOptions(min_fraction=math.nan), ["ZooOptions", "min_fraction", "finite"]),
    (lambda: SimConfig(memory_budget=math.nan), ["SimConfig", "memory_budget", "finite"]),
    (lambda: SimConfig(arrival_order="ab"), ["SimConfig", "arrival_order", "['ab']"]),
    (lambda: EvalConfig(queries=0), ["EvalConfig", "queries", ">= 1"]),
    (lambda: EvalConfig(contenders="sparseloom"), ["EvalConfig", "contenders"]),
    (lambda: sparseloom.Server(None), ["Server()", "workload", "NoneType"]),
    (lambda: sparseloom.Server("tiny", tasks="tiny"), ["Server()", "tasks", "['tiny']"]),
    (lambda: sparseloom.Server("tiny", max_queued=0), ["Server()", "max_queued", ">= 1"]),
    (lambda: sparseloom.Server("tiny", slos={"tiny": 3}), ["Server()", "slos['tiny']"]),
    (lambda: sparseloom.Server("tiny", profile="p.json"), ["Server()", "profile"]),
]


@pytest.mark.parametrize(("call", "words"), CASES, ids=[" ".join(w[:2]) for _, w in CASES])
def test_a_wrong_argument_is_one_error_naming_the_parameter(call: Callable[[], Any],
                                                            words: list[str]) -> None:
    with pytest.raises(ArgumentError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert isinstance(caught.value, SparseloomError | TypeError)


def test_serve_refuses_a_config_that_is_not_a_run_config() -> None:
    from sparseloom.workload.task import Workload

    workload = Workload("w", [])
    with pytest.raises(ArgumentError, match=r"serve\(\): config must be a RunConfig"):
        sparseloom.serve(workload, random_table(1, 2, 2, 2), config="fast")
    with pytest.raises(ArgumentError, match=r"serve\(\): profile must be a ProfileTable"):
        sparseloom.serve(workload, profile="profile.json")


def test_an_slo_may_be_written_as_a_pair() -> None:
    table = random_table(1, 3, 2, 2)
    as_pair = sparseloom.make_plan(table, slos={"t0": (0.5, 40)})
    as_record = sparseloom.make_plan(table, slos={"t0": SLO(0.5, 40.0)})
    assert as_pair.slos["t0"] == SLO(0.5, 40.0) == as_record.slos["t0"]
    assert as_pair.plan.variants == as_record.plan.variants
    assert RunConfig(slos={"t": [0.9, 5]}).slos == {"t": SLO(0.9, 5.0)}


def test_records_keep_taking_what_they_took() -> None:
    import numpy as np

    spec = LoadSpec("poisson", queries=np.int64(5), rate=2, arrival_order=["a", "b"])
    assert spec.arrival_order == ("a", "b") and spec.queries == 5
    assert RuntimeOptions(fault_rate=0, fault_processors=["ort:CPU"]).fault_processors == (
        "ort:CPU",)
    assert RunConfig(processors=["ort:CPU"], memory_budget=123456).memory_budget == 123456
