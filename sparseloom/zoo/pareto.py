"""Accuracy versus latency of original and stitched variants (the paper's Figure 4).

:func:`measure_subgraph_latencies` times every (position, variant) subgraph at batch 1 on its
position's processor (median of a few runs; the profiler does the thorough job).
:func:`pareto_analysis` measures the metric of the V originals and of a sample of stitched
variants (exactly, with prefix sharing), takes each variant's latency as the sum of its
subgraphs' latencies, and counts the stitched variants that lie beyond the originals:
above the best original metric, below the fastest original latency, or not dominated by any
original (no original is at least as accurate *and* at least as fast).
:func:`fastest_within` finds, among the measured variants, the fastest within a margin of
dense on the task's held-out rows.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError
from sparseloom.zoo.graph import as_tuple

if TYPE_CHECKING:
    from sparseloom.zoo.types import Zoo, ZooTask


@attrs.frozen
class ParetoOptions:
    """How the Pareto analysis measures.

    Attributes:
        sample: how many stitched variants to measure (all when fewer exist).
        seed: seeds the sample.
        runs: timing rounds per subgraph (the median is kept).
        warmup: untimed calls per subgraph before the rounds.
        settle: untimed calls before each timed one.
        evaluation_processor: where the metrics are measured.
    """

    sample: int = 200
    seed: int = 0
    runs: int = 7
    warmup: int = 2
    settle: int = 3
    evaluation_processor: str = "ort:CPU"

    def __attrs_post_init__(self) -> None:
        for name, least in (("sample", 0), ("runs", 1), ("warmup", 0), ("settle", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"Pareto option {name} must be an integer >= {least}, "
                                  f"got {value!r}")


def measure_subgraph_latencies(
    zoo: Zoo,
    task: ZooTask,
    order: Sequence[str],
    options: ParetoOptions | None = None,
    *,
    progress: bool = False,
) -> np.ndarray:
    """Median batch-1 latency in ms of every subgraph, shape ``(S, V)``.

    Position ``j`` runs on ``order[j]`` (one processor per position). Every subgraph is loaded
    first, then timed once per round, round after round, so that a burst of load from other
    processes spreads over all subgraphs instead of skewing one; the result is the median over
    the ``options.runs`` rounds. Within a round the subgraphs of one processor run together, in a
    shuffled order, after the processor has run untimed for a while: right after the other
    processor ran, calls are several times slower on shared cores, which is not the cost of
    whichever subgraph happens to come first. Each timed call follows ``options.settle``
    untimed ones.
    """
    from tqdm import tqdm

    from sparseloom.workload.inference import load_model
    from sparseloom.zoo.stitch import placement
    from sparseloom.zoo.tensors import dense_activations, take_batch

    options = options or ParetoOptions()
    runs, warmup, settle = options.runs, options.warmup, options.settle
    processors = placement(list(order), zoo.positions)
    feeds, _ = dense_activations(zoo, take_batch(task.eval_inputs, 0, 1))
    cells = list(itertools.product(range(zoo.positions), range(len(zoo.variants))))
    loaded: dict[tuple[int, int], tuple[Any, Any]] = {}
    samples: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    bar = tqdm(total=len(cells) * (1 + runs), desc=f"{zoo.task}: timing subgraphs",
               unit="run", disable=not progress, leave=False)
    try:
        for position, variant in cells:
            backend, model = load_model(str(zoo.subgraph_path(position, variant)),
                                        processors[position])
            loaded[(position, variant)] = (backend, model)
            for _ in range(warmup):
                backend.infer(model, feeds[position])
            bar.update(1)
        groups: dict[str, list[tuple[int, int]]] = {}
        for cell in cells:
            groups.setdefault(processors[cell[0]], []).append(cell)
        shuffler = random.Random(0)
        for _ in range(runs):
            for group in groups.values():
                visit = list(group)
                shuffler.shuffle(visit)  # no subgraph is always first after a switch
                _settle_processor(*loaded[visit[0]], feeds[visit[0][0]])
                for position, variant in visit:
                    backend, model = loaded[(position, variant)]
                    for _ in range(settle):
                        backend.infer(model, feeds[position])
                    started = time.perf_counter()
                    backend.infer(model, feeds[position])
                    samples[(position, variant)].append((time.perf_counter() - started) * 1e3)
                    bar.update(1)
    finally:
        bar.close()
        for backend, model in loaded.values():
            backend.unload(model)
    latencies = np.zeros((zoo.positions, len(zoo.variants)))
    for (position, variant), values in samples.items():
        latencies[position, variant] = float(np.median(values))
    return latencies


def _settle_processor(
    backend: Any, model: Any, inputs: Mapping[str, np.ndarray], seconds: float = 0.02
) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        backend.infer(model, inputs)


def sample_stitched(
    variants: int, positions: int, count: int, *, seed: int = 0
) -> list[tuple[int, ...]]:
    """Up to ``count`` distinct stitched variants that are not originals, sampled uniformly.

    All of them when there are no more than ``count``.
    """
    total = variants**positions
    originals = {(v,) * positions for v in range(variants)}
    if total - len(originals) <= count:
        return [c for c in itertools.product(range(variants), repeat=positions)
                if c not in originals]
    rng = random.Random(seed)
    chosen: set[tuple[int, ...]] = set()
    while len(chosen) < count:
        choice = tuple(rng.randrange(variants) for _ in range(positions))
        if choice not in originals:
            chosen.add(choice)
    return sorted(chosen)


def pareto_front(latency: Sequence[float], accuracy: Sequence[float]) -> list[int]:
    """Indices of the points no other point dominates (lower-or-equal latency and higher-or-equal
    accuracy, one strictly), sorted by latency."""
    points = sorted(range(len(latency)), key=lambda i: (latency[i], -accuracy[i]))
    front: list[int] = []
    best = -np.inf
    for index in points:
        if accuracy[index] > best:
            front.append(index)
            best = accuracy[index]
    return front


def beyond_originals(
    latency: Sequence[float], accuracy: Sequence[float], originals: int
) -> tuple[int, int, int]:
    """What the points after the first ``originals`` add beyond those originals.

    :returns: how many of them are above the best original metric, below the fastest original
        latency, and dominated by no original (none is at least as accurate *and* at least as
        fast; a tie with an original counts as dominated).
    """
    best = max(accuracy[:originals])
    fastest = min(latency[:originals])
    above = below = beyond = 0
    for index in range(originals, len(latency)):
        above += accuracy[index] > best
        below += latency[index] < fastest
        dominated = any(
            accuracy[o] >= accuracy[index] and latency[o] <= latency[index]
            for o in range(originals)
        )
        beyond += not dominated
    return above, below, beyond


@attrs.frozen
class ParetoPoint:
    """One variant in the accuracy–latency plane."""

    choices: tuple[int, ...] = attrs.field(converter=as_tuple)
    original: bool
    metric: float
    latency_ms: float
    on_front: bool = False


@attrs.frozen
class ParetoResult:
    """The points and what the stitched ones add beyond the originals.

    Attributes:
        task: the task name.
        order: the processor of each position.
        points: originals first, then the stitched sample.
        stitched_total: ``V**S - V``, how many stitched variants exist.
        above_best_accuracy: stitched variants with a metric above every original's.
        below_fastest_latency: stitched variants faster than every original.
        beyond_front: stitched variants that no original dominates.
        evaluation_passes: subgraph passes run (prefix sharing) for the sample's metrics.
        naive_passes: passes without prefix sharing.
    """

    task: str
    order: tuple[str, ...] = attrs.field(converter=as_tuple)
    points: tuple[ParetoPoint, ...] = attrs.field(converter=as_tuple)
    stitched_total: int
    above_best_accuracy: int
    below_fastest_latency: int
    beyond_front: int
    evaluation_passes: int
    naive_passes: int

    @property
    def stitched_sampled(self) -> int:
        """How many stitched variants were measured."""
        return sum(not p.original for p in self.points)

    def summary(self) -> dict[str, Any]:
        """The headline numbers, JSON-ready."""
        sampled = self.stitched_sampled or 1
        return {
            "task": self.task,
            "order": list(self.order),
            "originals": sum(p.original for p in self.points),
            "stitched_sampled": self.stitched_sampled,
            "stitched_total": self.stitched_total,
            "above_best_accuracy": self.above_best_accuracy,
            "above_best_accuracy_fraction": round(self.above_best_accuracy / sampled, 4),
            "below_fastest_latency": self.below_fastest_latency,
            "below_fastest_latency_fraction": round(self.below_fastest_latency / sampled, 4),
            "beyond_front": self.beyond_front,
            "beyond_front_fraction": round(self.beyond_front / sampled, 4),
            "front_stitched": sum(p.on_front and not p.original for p in self.points),
            "front_size": sum(p.on_front for p in self.points),
            "evaluation_passes": self.evaluation_passes,
            "naive_passes": self.naive_passes,
        }


def pareto_analysis(
    zoo: Zoo,
    task: ZooTask,
    order: Sequence[str],
    options: ParetoOptions | None = None,
    *,
    latencies: np.ndarray | None = None,
    progress: bool = False,
) -> ParetoResult:
    """Measure originals and a sample of stitched variants; see the module docstring.

    :param order: the processor of each position (latency is measured there).
    :param options: sample size, seed, timing rounds, evaluation processor.
    :param latencies: per-subgraph ms ``(S, V)`` to use instead of measuring.
    """
    from sparseloom.zoo.evaluate import evaluate_stitched

    count = len(zoo.variants)
    if latencies is None:
        latencies = measure_subgraph_latencies(zoo, task, order, options, progress=progress)
    originals = [(v,) * zoo.positions for v in range(count)]
    options = options or ParetoOptions()
    stitched = sample_stitched(count, zoo.positions, options.sample, seed=options.seed)
    report = evaluate_stitched(zoo, task, originals + stitched,
                               processor=options.evaluation_processor, progress=progress)
    choices = originals + stitched
    latency = [float(sum(latencies[j, c[j]] for j in range(zoo.positions))) for c in choices]
    accuracy = [report.metrics[c] for c in choices]
    front = set(pareto_front(latency, accuracy))
    above, below, beyond = beyond_originals(latency, accuracy, len(originals))
    points = [
        ParetoPoint(c, i < len(originals), accuracy[i], latency[i], i in front)
        for i, c in enumerate(choices)
    ]
    return ParetoResult(
        task=zoo.task, order=tuple(order), points=tuple(points),
        stitched_total=count**zoo.positions - count, above_best_accuracy=above,
        below_fastest_latency=below, beyond_front=beyond,
        evaluation_passes=report.passes, naive_passes=report.naive_passes,
    )


#: How many of the fastest variants within the margin on the selection rows are judged on
#: the held-out rows by :func:`fastest_within`.
JUDGED_FASTEST = 8


@attrs.frozen
class FastestWithin:
    """The fastest measured variant within a margin of dense on the task's held-out rows.

    Attributes:
        choices: its variant at each position.
        latency_ms, dense_latency_ms: its summed latency and the dense model's.
        drop_points: ``100 × (dense − it)`` on the held-out rows.
        judging_rows: how many held-out rows.
        judged: how many variants were judged on them to find it.
    """

    choices: tuple[int, ...] = attrs.field(converter=as_tuple)
    latency_ms: float
    dense_latency_ms: float
    drop_points: float
    judging_rows: int
    judged: int

    @property
    def speedup(self) -> float:
        """Dense's summed latency ÷ its own."""
        return self.dense_latency_ms / self.latency_ms


def fastest_within(zoo: Zoo, task: Any, result: ParetoResult, margin_points: float = 1.0,
                   *, judged: int = JUDGED_FASTEST, processor: str = "ort:CPU"
                   ) -> FastestWithin | None:
    """The fastest variant of ``result`` (an original or a stitched one) within
    ``margin_points`` of dense on ``task``'s held-out rows (``task.judging()``: rows its
    selection never saw): the variants within the margin on the selection rows (the
    analysis' metrics), fastest first, are judged there one by one, at most ``judged`` of
    them, and the first within the margin is it. ``None`` when the task holds no rows out or
    none judged is within.
    """
    from sparseloom.zoo.stitch import held_out_scores

    if getattr(task, "held_out", None) is None:
        return None
    dense = result.points[0]  # the first original: dense at every position

    def held_out(choices: tuple[int, ...]) -> float:
        return held_out_scores(zoo, task, [choices], processor)[choices]

    candidates = sorted((p for p in result.points[1:]
                         if p.metric >= dense.metric - margin_points / 100
                         and p.latency_ms < dense.latency_ms),
                        key=lambda p: p.latency_ms)[:judged]
    if not candidates:
        return None
    reference = held_out(dense.choices)
    for count, point in enumerate(candidates, start=1):
        drop = 100.0 * (reference - held_out(point.choices))
        if drop <= margin_points:
            return FastestWithin(point.choices, point.latency_ms, dense.latency_ms, drop,
                                 task.held_out.count, count)
    return None
