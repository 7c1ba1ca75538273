"""Loading subgraphs onto processors for the runtime, timed, with inputs checked once.

Every subgraph a worker runs is compiled (cached on disk) and loaded here; the load checks its
inputs against the zoo's boundary once, so the hot path never checks them again. Inputs that
come from outside (:meth:`~sparseloom.runtime.executor.Runtime.submit` with your own arrays)
are checked per request by :func:`check_request_inputs`; eval-set rows once per task.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import BackendError, RuntimeServeError
from sparseloom.core.processors import discover_processors, get_backend, get_processor
from sparseloom.core.types import SLO, Processor
from sparseloom.runtime.kept import kept, release
from sparseloom.runtime.records import LoadEvent
from sparseloom.runtime.resident import ModelKey, ResidentModel
from sparseloom.runtime.worker import ProcessorWorker

if TYPE_CHECKING:
    from sparseloom.workload.task import Task
    from sparseloom.zoo.types import Zoo


@attrs.frozen(eq=False)
class RuntimeTask:
    """A task as the runtime serves it: its data, its zoo and its SLO.

    Attributes:
        task: the workload task (eval inputs, labels, metric).
        zoo: the zoo its subgraphs come from (the one the profile measured).
        slo: the SLO it is served under.
    """

    task: Task
    zoo: Zoo
    slo: SLO

    @property
    def name(self) -> str:
        """The task name."""
        return self.task.name

    @functools.cached_property
    def output_name(self) -> str:
        """The scored output: the task's first output if the last position produces it."""
        names = self.zoo.boundary(self.zoo.positions - 1).output_names
        first = self.task.output_names[0] if self.task.output_names else None
        return first if first in names else names[0]


def _spec_dtype(spec: Mapping[str, Any]) -> str:
    return str(spec.get("dtype", "?"))


def check_request_inputs(task: RuntimeTask, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Check one request's inputs (batch 1) against position 0 of the task's zoo.

    :raises BackendError: naming the input, what was expected and what came.
    """
    boundary = task.zoo.boundary(0)
    where = f"a request of task {task.name!r}"
    expected = {spec["name"]: spec for spec in boundary.inputs}
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise BackendError(f"{where} lacks input(s) {', '.join(map(repr, missing))}; the "
                           f"task's inputs are {', '.join(map(repr, expected))}")
    arrays: dict[str, np.ndarray] = {}
    for name, spec in expected.items():
        array = np.ascontiguousarray(inputs[name])
        dtype = _spec_dtype(spec)
        if dtype not in ("?", array.dtype.name):
            raise BackendError(f"{where}: input {name!r} has dtype {array.dtype.name}, "
                               f"expected {dtype}; convert it with .astype(np.{dtype})")
        shape = list(spec.get("shape") or [])
        wrong = len(shape) != array.ndim or any(
            isinstance(want, int) and want != got for want, got in zip(shape, array.shape,
                                                                       strict=False))
        if shape and (wrong or array.shape[0] != 1):
            raise BackendError(f"{where}: input {name!r} has shape {list(array.shape)}, "
                               f"expected {shape} with a batch of 1")
        arrays[name] = array
    return arrays


@attrs.define(eq=False)
class ModelLoader:
    """Compiles and loads subgraphs onto workers and keeps the record of every load.

    Attributes:
        tasks: the served tasks by name (their zoos give the subgraph files).
        started_s: ``time.perf_counter()`` at the start of the run (events are relative to it).
        events: every load so far.
        batch_one: load each model with its batch dimension fixed to 1
            (:mod:`sparseloom.zoo.batch_one`): every request is one row.
        memory_budget: the server's memory budget in bytes (``None``: none), held against
            what each load measured (:mod:`sparseloom.runtime.budget`).
        evicted: models unloaded to make room within it.
        left_out: preloaded subgraphs not loaded because they did not fit it.
    """

    tasks: Mapping[str, RuntimeTask]
    started_s: float = attrs.field(factory=time.perf_counter)
    events: list[LoadEvent] = attrs.field(factory=list)
    batch_one: bool = True
    memory_budget: int | None = None
    evicted: int = 0
    left_out: int = 0

    def load(self, key: ModelKey, worker: ProcessorWorker, reason: str,
             lent_cores: tuple[int, ...] = ()) -> LoadEvent | None:
        """Load subgraph ``key`` on ``worker`` unless it is resident there; return the event.

        :param lent_cores: also load its *wide twin* (``Plan.wide``): the same subgraph with one
            more thread on each of these cores, where the backend can (``backend.widened``;
            others load it as usual). The worker runs the twin while the lenders are idle.
        :raises BackendError: compiling or loading failed, or its inputs do not match the zoo.
        """
        processor = worker.processor
        backend = get_backend(processor.backend)
        widened = getattr(backend, "widened", None)
        wide = bool(lent_cores) and callable(widened)
        resident = worker.models.get(key)
        if resident is not None and (resident.wide or not wide):
            return None
        event = None
        if resident is None:
            loaded, runner, event = self._load_one(key, backend, processor, reason)
            resident = worker.models[key] = ResidentModel(
                key, processor, backend, loaded, runner, tuple(loaded.input_names),
                int(getattr(loaded, "memory_bytes", 0)),
                reentrant=runner is getattr(loaded, "runner", None))
        if wide and widened is not None:  # (wide implies it; the check narrows the type)
            twin_processor = widened(processor, tuple(lent_cores))
            twin, twin_runner, twin_event = self._load_one(key, backend, twin_processor, reason)
            resident.wide_loaded, resident.wide_runner = twin, twin_runner
            resident.wide_processor = twin_processor
            resident.memory_bytes += int(getattr(twin, "memory_bytes", 0))
            event = event or twin_event
        return event

    def model_path(self, key: ModelKey) -> Path:
        """The file subgraph ``key`` is loaded from: its zoo file or merged chain, as a batch-1
        copy when :attr:`batch_one`."""
        task_name, position, variant = key
        zoo = self.tasks[task_name].zoo
        if isinstance(variant, tuple):  # a merged chain (WHOLE): merged once, then cached
            from sparseloom.zoo.whole import merged_path

            path = merged_path(zoo, variant)
        else:
            path = zoo.subgraph_path(position, variant)
        if self.batch_one:
            from sparseloom.zoo.batch_one import batch_one_path, batch_params

            path = batch_one_path(path, batch_params(zoo.boundary(0).inputs))
        return path

    def probe(self, loads: Iterable[tuple[ModelKey, ProcessorWorker, tuple[int, ...]]]) -> None:
        """Probe in one child process every model that :meth:`load` of these (key, worker,
        lent cores) would compile, wide twins included (:mod:`sparseloom.isolation`): not one
        child per model."""
        from sparseloom.isolation.guard import prepare

        requests = []
        for key, worker, lent in loads:
            resident = worker.models.get(key)
            if resident is not None and (resident.wide or not lent):
                continue
            backend = get_backend(worker.processor.backend)
            path = self.model_path(key)
            requests.append((backend, path, worker.processor))
            widened = getattr(backend, "widened", None)
            if lent and callable(widened):
                requests.append((backend, path, widened(worker.processor, tuple(lent))))
        prepare(requests)

    def _load_one(self, key: ModelKey, backend: Any, processor: Processor, reason: str
                  ) -> tuple[Any, Callable[[Mapping[str, Any]], Mapping[str, Any]], LoadEvent]:
        """Compile and load subgraph ``key`` for ``processor``: (loaded, its call, the event)."""
        task_name, position, variant = key
        task = self.tasks[task_name]
        path = self.model_path(key)
        started = time.perf_counter()
        pool = kept()
        reused = pool.take((str(path), processor)) if pool is not None else None
        if reused is not None:
            backend, loaded = reused
            compiled_at = time.perf_counter()
        else:
            compiled = backend.compile(str(path), processor)
            compiled_at = time.perf_counter()
            loaded = backend.load(compiled, processor)
            if pool is not None:
                pool.add((str(path), processor), backend, loaded, time.perf_counter() - started)
        done = time.perf_counter()
        boundary = set(task.zoo.boundary(max(position, 0)).input_names)
        unknown = [name for name in loaded.input_names if name not in boundary]
        if unknown:
            if pool is not None:
                pool.drop((str(path), processor))
            backend.unload(loaded)
            what = (f"the merged chain {list(variant)}" if isinstance(variant, tuple) else
                    f"subgraph {position} (variant {variant})")
            raise BackendError(
                f"{what} of task {task_name!r} reads "
                f"{', '.join(map(repr, unknown))}, which the zoo's boundary does not carry "
                f"({', '.join(sorted(boundary))}); rebuild the zoo")
        runner = getattr(loaded, "runner", None)
        if not callable(runner):
            runner = functools.partial(backend.infer, loaded)
        event = LoadEvent(task_name, position, variant, processor.name, reason,
                          (compiled_at - started) * 1e3, (done - compiled_at) * 1e3,
                          int(getattr(loaded, "memory_bytes", 0)), done - self.started_s)
        self.events.append(event)
        return loaded, runner, event

    def unload_all(self, workers: Mapping[str, ProcessorWorker]) -> None:
        """Unload every resident model, or hand it back to the :func:`~sparseloom.runtime.kept.
        keep_loaded` pool that keeps it (errors are ignored: the run is over)."""
        for worker in workers.values():
            for model in list(worker.models.values()):
                for loaded in (model.loaded, model.wide_loaded):
                    if loaded is not None:
                        release(model.backend, loaded)
            worker.models.clear()


def resident_bytes(workers: Mapping[str, ProcessorWorker]) -> int:
    """Summed backend-measured memory of every resident model."""
    return sum(m.memory_bytes for w in workers.values() for m in w.models.values())


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


def profile_processors(profile: Any, names: Sequence[str] = ()) -> list[Processor]:
    """The processors a profile was measured on (with its pinning), or the ``names`` given.

    :raises RuntimeServeError: a processor the profile holds is not there any more, a named
        one was not profiled, or a spec with options differs from what was profiled.
    """
    configs = {str(c["spec"]).partition("?")[0]: c["spec"]
               for c in profile.meta.get("processor_config", [])}
    wanted = [str(n) for n in names] or list(profile.processors)
    out = []
    for name in wanted:
        base = name.partition("?")[0]
        if base not in profile.processors:
            here = {p.name for p in discover_processors() if p.available}
            fix = (f"profile again with -p {base}" if base in here else
                   f"{base} is not an available processor here, see `sparseloom devices`")
            raise RuntimeServeError(
                f"processor {base!r} was not profiled; the profile of {profile.workload!r} "
                f"holds {', '.join(profile.processors)} (choose among them, or {fix})")
        processor = get_processor(name if "?" in name else configs.get(base, base))
        if "?" in name and base in configs and processor != get_processor(configs[base]):
            raise RuntimeServeError(
                f"processor {name!r} is not the one the profile of {profile.workload!r} "
                f"measured ({configs[base]}): its stage times and accuracies would not hold; "
                f"profile with -p {name!r} (`sparseloom profile`, or `run -p` builds it), or "
                f"name it {base!r} to serve it as profiled")
        if not processor.available:
            raise RuntimeServeError(f"processor {processor.name} of the plan is not available "
                                    f"here ({processor.reason or 'it did not answer'}); "
                                    f"choose others with --processor")
        out.append(processor)
    return out
