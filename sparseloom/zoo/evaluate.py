"""Exact evaluation of stitched variants, sharing the activations of common prefixes.

A stitched variant ``(c0, c1, ..., c{S-1})`` runs subgraph ``c0`` of position 0, then ``c1``
of position 1, and so on. Every variant that starts with ``(c0, c1)`` needs the same
activations after position 1, so they are computed once: the requested variants form a prefix
tree (a trie), and a depth-first walk over it runs one *subgraph pass* (one subgraph over the
whole eval set) per trie node, keeping only the activations of the current path in memory.

For all ``V**S`` variants that is ``V + V**2 + ... + V**S`` passes instead of ``S * V**S``
(for V = 10, S = 3: 1,110 instead of 3,000, a 63% saving). A sample of variants is grouped by
its shared prefixes the same way; :class:`EvaluationReport` says how many passes were run and
how many the naive way would have taken.

Subgraphs run through the backends (:func:`sparseloom.core.processors.load_model`), each one
compiled and loaded once per :class:`SubgraphRunner` and reused for every prefix. A metric does
not depend on where it was computed, so exact evaluation uses every core this process may run
on (:func:`evaluation_spec`) unless the processor spec sets threads or cores itself; and every
measured metric goes to the zoo's :class:`~sparseloom.zoo.metric_store.MetricStore`, so no step
measures a variant another step already measured.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import ZooError
from sparseloom.core.types import StitchedVariant
from sparseloom.zoo.metric_store import metric_store

if TYPE_CHECKING:
    from sparseloom.zoo.types import Zoo, ZooTask

#: The processor exact evaluation runs on unless told otherwise.
EVALUATION_PROCESSOR = "ort:CPU"


def evaluation_spec(processor: str) -> str:
    """The spec exact evaluation loads models with: ``processor`` on every allowed core.

    A metric is the same whichever cores compute it (measured: identical metrics for 1 and 2
    ORT threads on every bundled task), so a bare name such as ``ort:CPU`` — which serving
    pins to one core — evaluates on all the cores this process may use. A spec that sets
    ``threads`` or ``cores`` (``ort:CPU?threads=1``) is used as given. An ONNX Runtime CPU
    processor evaluates without its memory arena (``cpu_mem_arena=0``) unless the spec says
    otherwise: the arena keeps the activations of the largest batch each session ran, and
    evaluation keeps every subgraph of a zoo loaded (a ``sentiment`` zoo's build held 5.2 GiB
    with it, 1.5 GiB without; AMD EPYC, 2026-12-03).
    """
    from sparseloom.core.processors import allowed_cores

    spec = processor
    if "?" not in processor and processor.upper().endswith("CPU"):
        cores = allowed_cores()
        spec = f"{processor}?threads={len(cores)}&cores={','.join(map(str, cores))}"
    if spec.startswith("ort:") and "CPU" in spec.partition("?")[0].upper() \
            and "cpu_mem_arena=" not in spec:
        spec += ("&" if "?" in spec else "?") + "cpu_mem_arena=0"
    return spec


@attrs.define(eq=False)
class SubgraphRunner:
    """Runs subgraphs over whole data sets on one processor, loading each file once.

    Loaded models are kept (keyed by the file's SHA-256) until :meth:`close`; use it as a
    context manager. ``passes`` counts the subgraph passes run so far.

    Attributes:
        processor: the processor spec (``ort:CPU``, ``ov:CPU``).
        batch_size: rows per inference request.
    """

    processor: str = EVALUATION_PROCESSOR
    batch_size: int = 256
    passes: int = attrs.field(default=0, init=False)
    _loaded: dict[str, tuple[Any, Any]] = attrs.field(factory=dict, init=False, alias="_loaded")
    _probed: set[Path] = attrs.field(factory=set, init=False, alias="_probed")

    def __enter__(self) -> SubgraphRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def load(self, path: str | os.PathLike[str], key: str | None = None) -> tuple[Any, Any]:
        """The (backend, loaded model) for ``path``, loading it on first use."""
        from sparseloom.workload.inference import load_model

        cache_key = key or str(Path(path).resolve())
        if cache_key not in self._loaded:
            self._probe_folder(Path(path).parent)
            self._loaded[cache_key] = load_model(str(path), evaluation_spec(self.processor))
        return self._loaded[cache_key]

    def _probe_folder(self, folder: Path) -> None:
        """Probe every model in ``folder`` (a zoo's subgraphs) in one child process before the
        first of them loads (:mod:`sparseloom.isolation`): one child, not one per subgraph."""
        if folder in self._probed:
            return
        self._probed.add(folder)
        from sparseloom.core.processors import get_backend, get_processor
        from sparseloom.isolation.guard import prepare

        processor = get_processor(evaluation_spec(self.processor))
        backend = get_backend(processor.backend)
        prepare((backend, model, processor) for model in sorted(folder.glob("*.onnx")))

    def run(
        self, path: str | os.PathLike[str], inputs: Mapping[str, np.ndarray],
        key: str | None = None
    ) -> dict[str, np.ndarray]:
        """Run the model at ``path`` over every row of ``inputs`` (extra names are ignored)."""
        backend, loaded = self.load(path, key)
        missing = [n for n in loaded.input_names if n not in inputs]
        if missing:
            raise ZooError(
                f"subgraph {Path(path).name} needs inputs {missing}; got {sorted(inputs)}"
            )
        feeds = {name: np.asarray(inputs[name]) for name in loaded.input_names}
        rows = next(iter(feeds.values())).shape[0]
        futures = [
            backend.infer_async(loaded, {n: a[start:start + self.batch_size]
                                         for n, a in feeds.items()})
            for start in range(0, rows, self.batch_size)
        ]
        results = [future.result() for future in futures]
        self.passes += 1
        return {name: np.concatenate([r[name] for r in results], axis=0)
                for name in loaded.output_names}

    def close(self) -> None:
        """Unload every model this runner loaded."""
        for backend, loaded in self._loaded.values():
            backend.unload(loaded)
        self._loaded.clear()


@attrs.frozen
class EvaluationReport:
    """Measured metrics of stitched variants and what prefix sharing saved.

    Attributes:
        task: the task name.
        metrics: the metric of each evaluated stitched variant, by its choices tuple.
        passes: subgraph passes over the eval set actually run.
        naive_passes: passes without prefix sharing (``S`` per variant).
        seconds: wall time of the evaluation.
        processor: where the subgraphs ran.
        cached: how many of the variants were read from the zoo's metric store, not run.
        rows: eval rows the metrics are measured on.
        seconds_per_pass: mean wall time of one subgraph pass over those rows (this run's
            passes and the store's), ``None`` when none was ever timed.
    """

    task: str
    metrics: Mapping[tuple[int, ...], float] = attrs.field(hash=False)
    passes: int
    naive_passes: int
    seconds: float
    processor: str
    cached: int = 0
    rows: int | None = None
    seconds_per_pass: float | None = None

    @property
    def cost_seconds(self) -> float:
        """What measuring every variant here costs with prefix sharing, cached ones included:
        this run's time, plus the cached variants' passes at :attr:`seconds_per_pass`."""
        all_passes = prefix_passes(self.metrics)
        if self.seconds_per_pass is None or all_passes <= self.passes:
            return self.seconds
        return self.seconds + (all_passes - self.passes) * self.seconds_per_pass

    @property
    def saving(self) -> float:
        """The fraction of subgraph passes prefix sharing avoided (0 when nothing ran)."""
        return 1.0 - self.passes / self.naive_passes if self.naive_passes else 0.0

    def metric(self, stitched: StitchedVariant | Sequence[int]) -> float:
        """The metric of one evaluated variant."""
        choices = stitched.choices if isinstance(stitched, StitchedVariant) else tuple(stitched)
        return self.metrics[tuple(choices)]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (metrics keyed by comma-joined choices)."""
        return {
            "task": self.task,
            "variants": len(self.metrics),
            "passes": self.passes,
            "naive_passes": self.naive_passes,
            "saving": round(self.saving, 4),
            "seconds": round(self.seconds, 3),
            "processor": self.processor,
            "cached": self.cached,
            "rows": self.rows,
            "cost_seconds": round(self.cost_seconds, 3),
            "metrics": {",".join(map(str, k)): v for k, v in self.metrics.items()},
        }


def prefix_passes(choices: Iterable[Sequence[int]]) -> int:
    """The subgraph passes prefix sharing needs for ``choices``: the prefix tree's node count."""
    prefixes = {tuple(c[: j + 1]) for c in choices for j in range(len(c))}
    return len(prefixes)


def evaluate_stitched(
    zoo: Zoo,
    task: ZooTask,
    stitched: Iterable[StitchedVariant | Sequence[int]],
    *,
    processor: str = EVALUATION_PROCESSOR,
    batch_size: int = 256,
    runner: SubgraphRunner | None = None,
    progress: bool = False,
    rows: np.ndarray | Sequence[int] | None = None,
    cache: bool = True,
) -> EvaluationReport:
    """Measure the metric of each stitched variant in ``stitched`` on ``task``'s eval set.

    Variants sharing a prefix share its activations (a depth-first walk over their prefix
    tree); duplicates are evaluated once. Pass a ``runner`` to reuse loaded subgraphs across
    calls (its processor and batch size then apply).

    :param rows: eval rows to measure on (e.g. :func:`~sparseloom.workload.subset.
        stratified_rows`); default every row.
    :param cache: read variants already in the zoo's metric store instead of running them, and
        store what is measured (``False``: run everything, store nothing).
    :raises ZooError: a variant of the wrong length or with an unknown variant id, or a task
        that does not match the zoo.
    """
    unique = sorted({zoo.check_choices(s) for s in stitched})
    if task.name != zoo.task:
        raise ZooError(f"the zoo is for task {zoo.task!r}, not {task.name!r}")
    active_processor = runner.processor if runner is not None else processor
    subset = None if rows is None else np.asarray(rows, dtype=np.int64)
    if subset is not None:
        from sparseloom.workload.subset import subset_task

        task = subset_task(task, subset)
    store = metric_store(zoo, task, active_processor) if cache else None
    known = store.load() if store is not None else {}
    metrics: dict[tuple[int, ...], float] = {c: known[c] for c in unique if c in known}
    missing = [c for c in unique if c not in known]
    own_runner = runner is None
    active = runner or SubgraphRunner(processor=processor, batch_size=batch_size)
    total = prefix_passes(missing)
    started = time.perf_counter()
    bar = _progress_bar(total, f"{zoo.task}: evaluating", progress)
    measured: dict[tuple[int, ...], float] = {}
    try:
        if missing:
            _walk(zoo, task, active, 0, missing, dict(task.eval_inputs), measured, bar)
    finally:
        bar.close()
        if own_runner:
            active.close()
        if store is not None:  # what was measured before an error is kept too
            store.add(measured, seconds=time.perf_counter() - started,
                      passes=prefix_passes(measured))
    metrics.update(measured)
    seconds = time.perf_counter() - started
    per_pass = store.seconds_per_pass() if store is not None else None
    return EvaluationReport(
        task=zoo.task,
        metrics=dict(sorted(metrics.items())),
        passes=total,
        naive_passes=zoo.positions * len(unique),
        seconds=seconds,
        processor=active.processor,
        cached=len(unique) - len(missing),
        rows=_row_count(task),
        seconds_per_pass=per_pass if per_pass is not None else (
            seconds / total if total else None),
    )


def _row_count(task: Any) -> int | None:
    inputs = getattr(task, "eval_inputs", None) or {}
    return int(next(iter(inputs.values())).shape[0]) if inputs else None


def evaluate_all(
    zoo: Zoo,
    task: ZooTask,
    *,
    processor: str = EVALUATION_PROCESSOR,
    batch_size: int = 256,
    runner: SubgraphRunner | None = None,
    progress: bool = False,
    cache: bool = True,
) -> EvaluationReport:
    """Measure every one of the zoo's ``V**S`` stitched variants (see :func:`evaluate_stitched`)."""
    everything = itertools.product(range(len(zoo.variants)), repeat=zoo.positions)
    return evaluate_stitched(
        zoo, task, everything, processor=processor, batch_size=batch_size, runner=runner,
        progress=progress, cache=cache,
    )


def _walk(
    zoo: Zoo,
    task: ZooTask,
    runner: SubgraphRunner,
    position: int,
    group: Sequence[tuple[int, ...]],
    activations: Mapping[str, np.ndarray],
    metrics: dict[tuple[int, ...], float],
    bar: Any,
) -> None:
    for variant, members in itertools.groupby(group, key=lambda c: c[position]):
        members_list = list(members)
        outputs = runner.run(
            zoo.subgraph_path(position, variant), activations,
            key=zoo.subgraph(position, variant).sha256,
        )
        bar.update(1)
        if position == zoo.positions - 1:
            score = float(task.score(outputs))
            for choices in members_list:
                metrics[choices] = score
        else:
            _walk(zoo, task, runner, position + 1, members_list, outputs, metrics, bar)
        del outputs  # only the current path's activations stay alive


def _progress_bar(total: int, description: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="pass", disable=not enabled, leave=False)
