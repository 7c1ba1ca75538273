"""Helpers of the runtime tests: serve a workload, and score served samples exactly."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.session import RunConfig, RunResult, serve
from sparseloom.workload.metrics import get_metric


def run(setup: tuple[Any, Any], load: LoadSpec, **config: Any) -> RunResult:
    """Serve ``setup`` = (workload, profile) under ``load``."""
    workload, profile = setup
    options = config.pop("options", RuntimeOptions())
    return serve(workload, profile, RunConfig(load=load, options=options, **config))


def exact_accuracy(setup: tuple[Any, Any], result: RunResult, task_name: str) -> float:
    """The metric of the served requests' samples, each run alone (batch 1) through the
    variant and processors that served it, outside the runtime (``StitchedModel``)."""
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory
    from sparseloom.zoo.stitch import StitchedModel

    workload, profile = setup
    task = workload.task(task_name)
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task_name]), verify=False)
    done = [r for r in result.records if r.task == task_name and r.status == "completed"]
    outputs: dict[int, np.ndarray] = {}
    routes: dict[tuple[str, str], list[Any]] = {}
    for record in done:
        routes.setdefault((record.variant, record.processors), []).append(record)
    for (variant, processors), records in routes.items():
        choices = [int(c) for c in variant.split(",")]
        # a lane ("ort:CPU@task") computes as the processor it is a copy of
        lanes = [p.split("@", 1)[0] for p in processors.split(">")]
        with StitchedModel.load(zoo, choices, lanes) as model:
            for record in records:
                inputs = {k: v[record.sample:record.sample + 1]
                          for k, v in task.eval_inputs.items()}
                out = model.run_once(inputs)
                outputs[record.request_id] = next(iter(out.values()))[0]
    stacked = np.stack([outputs[r.request_id] for r in done])
    return float(get_metric(task.metric)(stacked, task.labels[[r.sample for r in done]]))


def check_invariant(result: RunResult) -> None:
    """submitted = completed + failed, every request ended once, records agree."""
    summary = result.summary
    assert summary.submitted == summary.completed + summary.failed
    ids = [r.request_id for r in result.records]
    assert len(ids) == len(set(ids)) == summary.submitted
    assert sum(r.status == "completed" for r in result.records) == summary.completed
    assert all(r.reason for r in result.records if r.status == "failed")



def plain_onnxruntime(setup: tuple[Any, Any], task_name: str, choices: Sequence[int]
                      ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """The oracle of served requests: ``run(inputs)`` runs the stitched variant ``choices`` of
    the task by plain ONNX Runtime sessions (default options), subgraph after subgraph, and
    returns the last subgraph's outputs by name."""
    import onnxruntime

    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    _, profile = setup
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task_name]), verify=False)
    sessions = [onnxruntime.InferenceSession(str(zoo.subgraph_path(position, int(variant))),
                                             providers=["CPUExecutionProvider"])
                for position, variant in enumerate(choices)]

    def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        carried = dict(inputs)
        for session in sessions:
            feeds = {i.name: carried[i.name] for i in session.get_inputs()}
            names = [o.name for o in session.get_outputs()]
            carried = dict(zip(names, session.run(names, feeds), strict=True))
        return carried

    return run


def answers_in_turn(runtime: Any, task: str, rows: Sequence[int]) -> list[Any]:
    """Submit eval-set ``rows`` of ``task`` one after another, each after the last answered;
    return the outputs by name of each."""
    from concurrent.futures import Future

    answers = []
    for row in rows:
        done: Future[Any] = Future()
        runtime.submit(task, row, future=done)
        answers.append(done.result(timeout=30))
    return answers


def eval_row(task: Any, sample: int) -> dict[str, np.ndarray]:
    """A task's eval-set row ``sample`` as request inputs (batch 1, a writable copy)."""
    return {name: np.asarray(values[sample:sample + 1]).copy()
            for name, values in task.eval_inputs.items()}


def route_choices(route: str) -> tuple[int, ...]:
    """The stitched variant of a described route: ``tiny[2,0] @ ov:CPU>ort:CPU`` -> (2, 0)."""
    inside = route.split("[", 1)[1].split("]", 1)[0]
    return tuple(int(c) for c in inside.split(","))
