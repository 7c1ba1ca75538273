"""``sparseloom bench memory``: what a loaded model costs against its weights, and the server
against its budget.

Two measurements, both real loads:

* **per session** — for each task's dense model on each processor, in a fresh Python process
  (no other load's freed pages to reuse): the memory two sessions of its batch-1 copy hold
  one after the other (the second is what a wide twin or a lane costs), and, side by side,
  two sessions of the same model read from its file with the weights inside it (how every
  model was loaded before the batch-1 copies mapped their weights);
* **serving** — a :class:`~sparseloom.Server` started on the workload at each budget: what
  its loads measured against the bytes of the weights it holds, the process's RSS growth,
  and the budget, with the preloaded subgraphs the budget left out.

Memory per load is the backend's ``memory_bytes`` (PSS growth over the load and one warm-up
request; :mod:`sparseloom.plugins.backends._memory`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from sparseloom.core.errors import EvaluationError

#: The child process that loads one model twice and prints what each load measured.
_CHILD = """
import json, sys
from sparseloom.core.processors import get_backend, get_processor
processor = get_processor(sys.argv[2])
backend = get_backend(processor.backend)
loaded = [backend.load(backend.compile(sys.argv[1], processor), processor) for _ in range(2)]
print(json.dumps([model.memory_bytes for model in loaded]))
"""


@attrs.frozen
class SessionCost:
    """Two sessions of one model on one processor, from its batch-1 copy and from its file.

    Attributes:
        task: the task whose dense model it is.
        processor: the processor spec.
        weights_bytes: the bytes of its initializers.
        mapped: what the first and the second session of the batch-1 copy measured.
        embedded: the same for the model read from its file, weights inside it.
    """

    task: str
    processor: str
    weights_bytes: int
    mapped: tuple[int, int]
    embedded: tuple[int, int]


@attrs.frozen
class ServingCost:
    """A server started on a workload at one budget.

    Attributes:
        budget: the budget asked for (a fraction of full preloading, or bytes).
        budget_bytes: it in bytes.
        loaded_bytes: what every load measured, summed (twins included).
        weights_bytes: the bytes of the weights the loaded models hold.
        rss_growth_bytes: the process's RSS growth over the server's start.
        models: models loaded.
        left_out: preloaded subgraphs the budget left out.
        reshaped: what the budget made the plan give up.
    """

    budget: float | int
    budget_bytes: int
    loaded_bytes: int
    weights_bytes: int
    rss_growth_bytes: int
    models: int
    left_out: int
    reshaped: tuple[str, ...]


def _two_sessions(path: str, spec: str) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", _CHILD, path, spec], capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise EvaluationError(f"loading {path} on {spec} in a child process failed "
                              f"(exit {done.returncode}): {done.stderr.strip()[-800:]}")
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    return int(first), int(second)


def session_costs(workload: Any, profile: Any, processors: Sequence[str] = ()
                  ) -> list[SessionCost]:
    """Two sessions of each task's dense model on each processor (see the module doc)."""
    from sparseloom.runtime.models import profile_processors
    from sparseloom.zoo.batch_one import batch_one_path, batch_params, weight_bytes
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory
    from sparseloom.zoo.whole import merged_path

    specs = [str(config["spec"]) for config in profile.meta.get("processor_config", ())]
    chosen = {p.name for p in profile_processors(profile, processors)}
    costs = []
    for task in workload.tasks:
        zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task.name]), verify=False)
        source = (zoo.subgraph_path(0, 0) if zoo.positions == 1
                  else merged_path(zoo, (0,) * zoo.positions))
        copy = batch_one_path(source, batch_params(zoo.boundary(0).inputs))
        for spec in specs:
            if spec.partition("?")[0] not in chosen:
                continue
            costs.append(SessionCost(task.name, spec, weight_bytes(copy),
                                     _two_sessions(str(copy), spec),
                                     _two_sessions(str(source), spec)))
    return costs


def serving_cost(workload: Any, profile: Any, *, policy: str, budget: float | int,
                 processors: Sequence[str] = ()) -> ServingCost:
    """Start a server at ``budget`` and read what it holds (see the module doc)."""
    from sparseloom.runtime.budget import weights_bytes
    from sparseloom.runtime.models import resident_bytes, rss_bytes
    from sparseloom.runtime.server import Server

    before = rss_bytes()
    # Without the paired gate: its start-up runs over the selection rows load models the
    # server does not hold, and their freed pages would read as the server's RSS growth.
    with Server(workload, profile, policy=policy, memory_budget=budget,
                processors=tuple(processors), progress=False, paired_gate=False) as server:
        runtime = server.runtime
        grown = max(rss_bytes() - before, 0)
        reshaped = tuple(note.split(": ", 1)[1] for note in runtime.notes
                         if note.startswith("the memory budget reshaped the plan"))
        return ServingCost(budget, int(server.preload.budget_bytes),
                           resident_bytes(runtime.workers), weights_bytes(runtime), grown,
                           sum(len(w.models) for w in runtime.workers.values()),
                           runtime.loader.left_out, reshaped)
