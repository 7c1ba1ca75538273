"""The server's memory budget: held against what each load measured, at start and on switches;
and one model's weights mapped once for every session of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sparseloom.core.errors import OverBudget
from sparseloom.core.types import SLO, StitchedVariant
from sparseloom.runtime import switching
from sparseloom.runtime.budget import estimate_bytes
from sparseloom.runtime.executor import Runtime
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.models import RuntimeTask, profile_processors, resident_bytes
from sparseloom.runtime.request import Route
from sparseloom.runtime.server import Server
from sparseloom.zoo.load import load_zoo
from sparseloom.zoo.options import zoo_directory
from tests.runtime.support import check_invariant, run


def _route_bytes(runtime: Any) -> int:
    """What the loads of every task's route measured (their wide twins included)."""
    return sum(runtime.workers[processor].models[key].memory_bytes
               for state in runtime.states.values() if state.route is not None
               for key, processor in zip(state.route.keys, state.route.processors,
                                         strict=False))


def test_a_budget_below_full_preloading_is_never_exceeded(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    with Server(workload, profile, policy="sparseloom") as server:
        routes = _route_bytes(server.runtime)  # a first load in the process reads the most
        everything = sum(len(w.models) for w in server.runtime.workers.values())
        planned = server.preload
        own = planned.full_bytes - sum(r.memory_bytes for r in planned.resident
                                       if (r.task, r.position, r.variant) not in {
                                           ("tiny", j, c) for j, c in enumerate(
                                               server.plan.variants["tiny"].choices)})
    # Room for the routes as measured, and a third of the other subgraphs by the profile.
    budget = max(routes, own) + (planned.full_bytes - own) // 3
    with Server(workload, profile, policy="sparseloom", memory_budget=budget) as server:
        runtime = server.runtime
        assert 0 < resident_bytes(runtime.workers) <= budget  # what the loads measured
        assert sum(len(w.models) for w in runtime.workers.values()) < everything
    result = run(tiny, LoadSpec("closed", queries=30), memory_budget=budget)
    check_invariant(result)
    memory = result.summary.memory
    assert memory["loaded_bytes"] <= memory["budget_bytes"] == budget
    assert memory["weights_bytes"] > 0


def test_a_switch_beyond_the_budget_unloads_idle_models_first(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"]["tiny"]), verify=False)
    processor = profile_processors(profile)[0].name
    runtime = Runtime([RuntimeTask(task, zoo, SLO(0.0, 1000.0))], profile_processors(profile),
                      profile=profile)
    first = Route(StitchedVariant("tiny", (0, 0)), (processor, processor))
    switching.load_pairs(runtime, switching.route_keys(runtime, first), "preload")
    idle = [(("tiny", j, c), processor) for c in (1, 3) for j in (0, 1)]
    switching.load_pairs(runtime, idle, "preload")
    loaded = resident_bytes(runtime.workers)
    second = Route(StitchedVariant("tiny", (2, 2)), (processor, processor))
    # The switch asks for the profile's figure of the new route; the idle models free what
    # their loads measured, which depends on the pages the process had mapped before (a
    # worker that loaded other models measures less). The budget's headroom is less than the
    # switch asks for, so it must unload, and enough once every idle model is unloaded, with
    # slack for a new load that measures more than its profile.
    want = sum(estimate_bytes(runtime, key, name)
               for key, name in switching.route_keys(runtime, second))
    freeable = sum(runtime.workers[processor].models[key].memory_bytes for key, _ in idle)
    assert want > 0 and freeable > 0
    runtime.loader.memory_budget = loaded + max(0, want - freeable) + min(want, freeable) // 2
    runtime.start_workers()
    try:
        runtime.set_route("tiny", first, "plan")
        switching.load_pairs(runtime, switching.route_keys(runtime, second), "switch")
        models = runtime.workers[processor].models
        assert ("tiny", 0, 2) in models and ("tiny", 1, 2) in models
        assert runtime.loader.evicted >= 1
        assert ("tiny", 0, 0) in models and ("tiny", 1, 0) in models  # the route in use stays
        assert resident_bytes(runtime.workers) <= runtime.loader.memory_budget
        # Once the task runs (2, 2), a budget of just that route cannot hold one model more:
        # the load is refused, and nothing is unloaded for it.
        runtime.set_route("tiny", second, "switch")
        runtime.drain()
        in_use = (("tiny", 0, 2), ("tiny", 1, 2))
        runtime.loader.memory_budget = sum(models[key].memory_bytes for key in in_use)
        before = set(models)
        unloaded = [key for key, _ in idle if key not in models]  # the switch unloaded these
        with pytest.raises(OverBudget, match="memory budget"):
            switching.load_pairs(runtime, [(unloaded[0], processor)], "switch")
        assert set(models) == before
    finally:
        runtime.stop()


def _lookup_model(path: Path, rows: int = 32768, width: int = 256) -> int:
    """``y = ReduceSum(Gather(table, ids))``: a 32 MiB lookup table, the shape of an embedding;
    returns the table's bytes."""
    table = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"]),
         helper.make_node("ReduceSum", ["rows", "axes"], ["y"], keepdims=0)],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        [numpy_helper.from_array(table, "table"),
         numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return table.nbytes


@pytest.mark.parametrize("spec", ["ort:CPU", "ov:CPU"])
def test_sessions_of_one_model_map_its_weights_instead_of_copying_them(
        spec: str, tmp_path: Path) -> None:
    from sparseloom.core.processors import get_backend, get_processor
    from sparseloom.zoo.batch_one import batch_one_path, weight_bytes

    weights = _lookup_model(tmp_path / "lookup.onnx")
    copy = batch_one_path(tmp_path / "lookup.onnx", ["batch"])
    assert copy != tmp_path / "lookup.onnx" and copy.stat().st_size < weights // 100
    assert weight_bytes(copy) == weights + 8 == weight_bytes(tmp_path / "lookup.onnx")
    processor = get_processor(spec)
    backend = get_backend(processor.backend)
    ids = np.arange(8, dtype=np.int64).reshape(1, 8)
    loaded = [backend.load(backend.compile(str(copy), processor), processor) for _ in range(2)]
    try:
        answers = [backend.infer(model, {"ids": ids}) for model in loaded]
        table = numpy_helper.to_array(onnx.load(str(tmp_path / "lookup.onnx")).graph.initializer[0])
        np.testing.assert_allclose(answers[0]["y"][0], table[:8].sum(axis=0), rtol=1e-5)
        np.testing.assert_array_equal(answers[0]["y"], answers[1]["y"])
        # The second session holds what it touched of the table, not a copy of it.
        assert loaded[1].memory_bytes < weights // 2, (loaded[1].memory_bytes, weights)
    finally:
        for model in loaded:
            backend.unload(model)
