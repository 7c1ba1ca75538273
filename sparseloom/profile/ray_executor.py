"""The ``ray`` profile executor: a profile's measurements fanned out over a Ray cluster.

* **accuracy samples** are Ray tasks: the requested stitched variants are split by their choice
  at position 0, so prefix sharing survives inside each task (variants with different first
  choices share no prefix), and the groups are packed into about as many tasks as the cluster
  has CPUs; every requested variant must come back exactly once.
* **fidelity** passes are Ray tasks, one per (position, variant).
* **latency** runs on Ray actors, one per device: processors mapped to the same custom
  resource (``{"ov:NPU": "soc-npu"}``) are measured together, interleaved on their pinned
  threads exactly as in-process, by one actor on a node that advertises that resource;
  processors mapped to none are measured on the driver's node.

A worker that dies (killed, out of memory, node lost) is retried by Ray (``max_retries`` for
tasks, ``max_restarts``/``max_task_retries`` for actors); a task's result replaces any earlier
attempt's, so nothing is lost or counted twice. Errors raised on purpose in a worker (a missing
zoo file, a backend failure) are not retried and reach the caller as the sparseloom error they
are. Ray is imported here only, and this module only when ``--executor ray`` is chosen.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError, ProfileError, SparseloomError
from sparseloom.profile.executor_work import Activations, require_zoo_files, variant_fidelity
from sparseloom.profile.ray_split import (
    device_groups,
    merge_measurements,
    merge_metrics,
    pack_by_first_choice,
)

if TYPE_CHECKING:
    from sparseloom.core.types import Processor
    from sparseloom.profile.measure import (
        BackendResolver,
        ProfilerConfig,
        SubgraphJob,
        TaskMeasurement,
    )
    from sparseloom.zoo.evaluate import EvaluationReport
    from sparseloom.zoo.types import Zoo, ZooTask

__all__ = ["RayExecutor"]

#: Where a Ray node keeps its workers' logs (the first place to look when one died).
RAY_LOGS = "/tmp/ray/session_latest/logs"


# --- what runs in the workers ---------------------------------------------------------------

def _fidelity_pass(zoo: Zoo, position: int, variant: int, activations: Mapping[str, np.ndarray],
                   dense: Mapping[str, np.ndarray], processor: str) -> float:
    from sparseloom.zoo.evaluate import SubgraphRunner

    require_zoo_files([zoo.subgraph_path(position, variant)], "a Ray fidelity task")
    with SubgraphRunner(processor=processor) as runner:
        return variant_fidelity(zoo, position, [variant], activations, dense, runner)[0]


def _evaluate_group(evaluator: Callable[..., EvaluationReport] | None, zoo: Zoo, task: ZooTask,
                    choices: Sequence[tuple[int, ...]], processor: str,
                    options: Mapping[str, Any]) -> EvaluationReport:
    require_zoo_files({zoo.subgraph_path(j, c) for row in choices for j, c in enumerate(row)},
                      "a Ray accuracy task")
    return (evaluator or _evaluate_stitched())(zoo, task, choices, processor=processor,
                                               **options)


class _LatencyActor:
    """Measures the latencies of one device's processors (one actor per device)."""

    def __init__(self) -> None:
        self.steps = 0

    def measure(self, task: str, jobs: Sequence[SubgraphJob], processors: Sequence[Processor],
                resolve_backend: BackendResolver, config: ProfilerConfig,
                seed: int, chains: Sequence[Any] = ()) -> TaskMeasurement:
        from sparseloom.profile.measure import measure_task

        require_zoo_files([job.model_path for job in jobs], "a Ray latency actor")
        self.steps = 0

        def tick(count: int) -> None:
            self.steps += count

        return measure_task(task, jobs, processors, resolve_backend, config, seed=seed,
                            tick=tick, chains=chains)

    def progress(self) -> int:
        return self.steps


def _evaluate_stitched() -> Callable[..., EvaluationReport]:
    from sparseloom.zoo.evaluate import evaluate_stitched

    return evaluate_stitched


@functools.cache
def _remote(function: Callable[..., Any]) -> Any:
    import ray

    return ray.remote(function)


# --- the driver's side ----------------------------------------------------------------------

@attrs.define(eq=False)
class RayExecutor:
    """Profile measurements as Ray tasks and actors (see the module docstring).

    Attributes:
        address: the cluster to join (``host:port``, ``ray://host:port``, ``auto``); ``None``
            starts a local instance on first use and shuts it down in :meth:`close`. When Ray
            is already initialised in this process, that instance is used as it is.
        latency_resources: processor name or spec → custom resource of the node that measures
            it (``{"ov:NPU": "soc-npu"}``); processors mapped to none: the driver's node.
        progress: show progress bars.
        evaluator: what each accuracy task calls (default
            :func:`~sparseloom.zoo.evaluate.evaluate_stitched`); tests inject faults here.
        cpus_per_task: Ray CPUs an accuracy or fidelity task reserves.
        max_retries: times Ray reruns a task (or restarts a latency actor) whose worker died.
    """

    address: str | None = None
    latency_resources: Mapping[str, str] = attrs.field(factory=dict)
    progress: bool = False
    evaluator: Callable[..., EvaluationReport] | None = None
    cpus_per_task: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))
    max_retries: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    name: str = attrs.field(default="ray", init=False)
    _started: bool = attrs.field(default=False, init=False)
    _actors: dict[str, Any] = attrs.field(factory=dict, init=False)

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- fidelity ---------------------------------------------------------------------------
    def fidelity_errors(self, zoo: Zoo, activations: Activations, dense: Activations, *,
                        processor: str) -> np.ndarray:
        """See :meth:`~sparseloom.profile.executors.ProfileExecutor.fidelity_errors`: one Ray
        task per (position, variant)."""
        ray = self._connect()
        error = np.zeros((zoo.positions, len(zoo.variants)))
        task = _remote(_fidelity_pass).options(**self._task_options())
        zoo_ref = ray.put(zoo)
        cells, refs = [], []
        for j in range(zoo.positions):
            inputs, outputs = ray.put(dict(activations[j])), ray.put(dict(dense[j]))
            for i in range(1, error.shape[1]):
                cells.append((j, i))
                refs.append(task.remote(zoo_ref, j, i, inputs, outputs, processor))
        with _bar(len(refs), f"{zoo.task}: fidelity on Ray", "pass", self.progress) as bar:
            for cell, value in zip(cells, _gather(refs, bar, "a fidelity pass"), strict=True):
                error[cell] = value
        return error

    # -- accuracy ---------------------------------------------------------------------------
    def evaluate(self, zoo: Zoo, task: ZooTask, choices: Sequence[tuple[int, ...]], *,
                 processor: str, **options: Any) -> EvaluationReport:
        """See :meth:`~sparseloom.profile.executors.ProfileExecutor.evaluate`: groups of
        variants sharing their first choice, one Ray task per group of groups.

        ``options`` go to the evaluator in every task; they must be picklable (a ``runner``
        cannot travel). :class:`ProfileError` if a variant comes back missing or twice.
        """
        from sparseloom.zoo.evaluate import prefix_passes

        if "runner" in options:
            raise ConfigError("a SubgraphRunner holds loaded models and cannot be sent to Ray "
                              "workers; evaluate through the ray executor without one")
        options.pop("progress", None)  # the workers draw no bars; this side does
        requested = sorted({zoo.check_choices(c) for c in choices})
        ray = self._connect()
        chunks = pack_by_first_choice(requested, self._parallelism(ray))
        if not chunks:  # nothing asked: the evaluator's own empty report
            return (self.evaluator or _evaluate_stitched())(zoo, task, [], processor=processor,
                                                            **options)
        evaluate = _remote(_evaluate_group).options(**self._task_options())
        zoo_ref, task_ref = ray.put(zoo), ray.put(task)
        started = time.perf_counter()
        refs = [evaluate.remote(self.evaluator, zoo_ref, task_ref, chunk, processor, options)
                for chunk in chunks]
        passes = [prefix_passes(chunk) for chunk in chunks]
        with _bar(sum(passes), f"{zoo.task}: accuracy on Ray", "pass", self.progress) as bar:
            reports = _gather(refs, bar, "an accuracy task", weights=passes)
        metrics = merge_metrics(requested, chunks, [r.metrics for r in reports], zoo.task)
        merged: dict[str, Any] = {
            "metrics": metrics, "passes": sum(r.passes for r in reports),
            "naive_passes": sum(r.naive_passes for r in reports),
            "seconds": time.perf_counter() - started}
        if "cached" in attrs.fields_dict(type(reports[0])):
            merged["cached"] = sum(r.cached for r in reports)
        return attrs.evolve(reports[0], **merged)

    # -- latency ----------------------------------------------------------------------------
    def measure_latency(self, task: str, jobs: Sequence[SubgraphJob],
                        processors: Sequence[Processor], resolve_backend: BackendResolver,
                        config: ProfilerConfig, *, seed: int,
                        tick: Callable[[int], None] | None = None,
                        chains: Sequence[Any] = ()) -> TaskMeasurement:
        """See :meth:`~sparseloom.profile.executors.ProfileExecutor.measure_latency`: one actor
        per device (custom resource); each measures its processors interleaved, in place.

        Hand-offs between processors of different devices are not measured (NaN), nor are
        ``chains`` unless every processor is on one device.
        """
        ray = self._connect()
        groups = device_groups(processors, self.latency_resources, ray.cluster_resources())
        results = []
        for resource, indices in groups.items():
            actor = self._actor(ray, resource)
            chosen = [processors[i] for i in indices]
            whole = len(groups) == 1 and list(indices) == list(range(len(processors)))
            ref = actor.measure.remote(task, jobs, chosen, resolve_backend, config, seed,
                                       chains if whole else ())
            results.append(_wait_for_actor(ray, ref, actor, tick))
        merged = merge_measurements(results, list(groups.values()), len(processors))
        if chains and merged.chain_ms.size != len(chains):
            merged.chain_ms = np.full(len(chains), np.nan)
            merged.chain_spread_ms = np.full(len(chains), np.nan)
        return merged

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the latency actors, and the local Ray instance if this executor started it."""
        if not self._actors and not self._started:
            return
        import ray

        for actor in self._actors.values():
            with contextlib.suppress(Exception):  # already gone: nothing left to stop
                ray.kill(actor)
        self._actors.clear()
        if self._started:
            ray.shutdown()
            self._started = False

    def _connect(self) -> Any:
        import ray

        if ray.is_initialized():
            return ray
        settings: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        if self.address is None:
            settings |= {"address": "local", "include_dashboard": False}
        else:
            settings["address"] = self.address
        try:
            with _quiet_token_notice(self.address is None):
                ray.init(**settings)
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError...
            where = self.address or "a new local instance"
            raise ProfileError(
                f"could not start or join Ray at {where}: {type(error).__name__}: {error}; "
                f"check that the cluster runs the same Ray and Python versions as this machine "
                f"(`ray status` on the head node) or profile with --executor local") from None
        self._started = True
        return ray

    def _task_options(self) -> dict[str, Any]:
        return {"num_cpus": self.cpus_per_task, "max_retries": self.max_retries,
                "retry_exceptions": False}

    def _parallelism(self, ray: Any) -> int:
        return max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_task))

    def _actor(self, ray: Any, resource: str | None) -> Any:
        key = resource or ""
        if key not in self._actors:
            options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 2,
                                       "max_restarts": self.max_retries,
                                       "max_task_retries": self.max_retries}
            if resource is None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                here = ray.get_runtime_context().get_node_id()
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(here, soft=False)
            else:
                options["resources"] = {resource: 1}
            self._actors[key] = ray.remote(_LatencyActor).options(**options).remote()
        return self._actors[key]


# --- helpers --------------------------------------------------------------------------------

def _gather(refs: Sequence[Any], bar: Any, what: str,
            weights: Sequence[int] | None = None) -> list[Any]:
    """The results of ``refs`` in order, advancing ``bar`` as each arrives; a worker error
    raised on purpose comes back as itself, a worker lost beyond its retries as
    :class:`ProfileError`."""
    import ray

    position = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[position[ref]] = _result(ray, ref, what)
                bar.update(weights[position[ref]] if weights else 1)
    except BaseException:
        for ref in pending:  # no use finishing the rest of a failed step
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
    return results


def _result(ray: Any, ref: Any, what: str) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, SparseloomError):
            raise error.cause from None
        raise  # a bug: keep the worker's traceback
    except ray.exceptions.RayError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ProfileError(
            f"{what} failed on Ray beyond its retries: {type(error).__name__}: {first}; the "
            f"worker's log is under {RAY_LOGS} on the node that ran it") from None


def _wait_for_actor(ray: Any, ref: Any, actor: Any,
                    tick: Callable[[int], None] | None) -> TaskMeasurement:
    """The actor's measurement, passing its progress to ``tick`` while it runs."""
    reported = 0
    while not ray.wait([ref], timeout=0.5)[0]:
        if tick is None:
            continue
        with contextlib.suppress(ray.exceptions.RayError):  # restarting: ask again later
            steps = ray.get(actor.progress.remote(), timeout=5)
            if steps > reported:
                tick(steps - reported)
                reported = steps
    return _result(ray, ref, "a latency actor")


@contextlib.contextmanager
def _bar(total: int, description: str, unit: str, enabled: bool) -> Iterator[Any]:
    from tqdm import tqdm

    with tqdm(total=total, desc=description, unit=unit, disable=not enabled,
              leave=False) as bar:
        yield bar


@contextlib.contextmanager
def _quiet_token_notice(local: bool) -> Iterator[None]:
    """Ray ≥ 2.5x logs a warning that a new local instance uses token authentication; on a
    private local instance that is noise on every run, so it is silenced there only."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = logger.level
    if local:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
