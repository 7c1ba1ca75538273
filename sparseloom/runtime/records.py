"""What a run records: one frozen record per request, latency statistics, load and switch events.

Records are values (``@attrs.frozen``); rendering lives in :mod:`sparseloom.runtime.summary`.
:func:`write_records` writes the per-request records as CSV (or Parquet when ``pyarrow`` is
installed and the path ends in ``.parquet``) for plots; a :class:`RecordStream` writes every
ended request's record to CSV while a run goes on (``sparseloom run --out``), so records of a
long run are never all held in memory.
"""

from __future__ import annotations

import collections
import csv
import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sparseloom.core.errors import SparseloomError

#: Percentiles every latency record reports (optimum-benchmark style).
PERCENTILES: tuple[int, ...] = (50, 90, 99)


@attrs.frozen
class RequestRecord:
    """One served (or failed) request.

    Attributes:
        request_id: unique within the run, in submission order.
        task: the task name.
        sample: the eval-set row it carried (its label scores it); -1 for outside inputs.
        status: ``completed`` or ``failed``.
        submitted_s: when it was submitted, seconds since the run started.
        finished_s: when it completed or failed.
        latency_ms: end-to-end latency (submission to last output), ms.
        variant: the stitched variant's choices, e.g. ``"0,3"``.
        processors: the processor that ran each position, e.g. ``"ov:CPU>ort:CPU"``.
        plan_version: the plan (0 = the first, +1 per switch) whose route it took.
        retries: how many stages were retried on another processor.
        correct: for classification metrics, whether its top-1 prediction matched its label.
        reason: why it failed (empty when completed).
    """

    request_id: int
    task: str
    sample: int
    status: str
    submitted_s: float
    finished_s: float
    latency_ms: float
    variant: str
    processors: str
    plan_version: int
    retries: int = 0
    correct: bool | None = None
    reason: str = ""


@attrs.frozen
class LatencyStats:
    """Latency samples summarised: unit, count, mean and p50/p90/p99 (nearest rank)."""

    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    unit: str = "ms"

    def percentile(self, which: int) -> float:
        """The p50, p90 or p99 value."""
        return float(getattr(self, f"p{which}_ms"))


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (``q`` in 0..100) of ``samples``; NaN if empty."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(math.ceil(q / 100.0 * len(ordered)), 1)
    return float(ordered[rank - 1])


def latency_stats(samples: Sequence[float]) -> LatencyStats:
    """Summarise latency samples in ms (NaN fields when there are none)."""
    values = list(samples)
    mean = sum(values) / len(values) if values else math.nan
    return LatencyStats(len(values), mean, percentile(values, 50), percentile(values, 90),
                        percentile(values, 99))


@attrs.frozen
class LoadEvent:
    """A subgraph compiled and loaded during a run (preload, switch, retry or dispatch).

    Attributes:
        task, position, variant, processor: which subgraph, where; a stitched variant merged
            into one model (``Plan.merged``) has position ``-1`` and its choices as variant.
        reason: ``preload``, ``switch``, ``retry`` or ``replan``.
        compile_ms: time to compile (a cached artefact is fast).
        load_ms: time to load the compiled artefact.
        memory_bytes: memory the backend reports the loaded model holds.
        at_s: when the load finished, seconds since the run started (negative = before).
    """

    task: str
    position: int
    variant: int | tuple[int, ...]
    processor: str
    reason: str
    compile_ms: float
    load_ms: float
    memory_bytes: int
    at_s: float

    @property
    def total_ms(self) -> float:
        """Compile plus load, ms."""
        return self.compile_ms + self.load_ms


@attrs.frozen
class SwitchEvent:
    """A task moved to another stitched variant or route.

    Attributes:
        task: the task.
        from_route, to_route: ``variant @ processors`` before and after.
        reason: ``feedback``, ``join``, ``processor-down`` or ``plan``.
        loads: subgraphs that had to be compiled and loaded first.
        load_ms: their summed compile + load time (0 when all were resident).
        at_s: when the new route took effect, seconds since the run started.
    """

    task: str
    from_route: str
    to_route: str
    reason: str
    loads: int
    load_ms: float
    at_s: float


_FIELDS = [field.name for field in attrs.fields(RequestRecord)]


def write_records(records: Iterable[RequestRecord], path: str | os.PathLike[str]) -> Path:
    """Write per-request records to ``path`` (``.csv``, or ``.parquet`` with pyarrow).

    :raises SparseloomError: the path cannot be written, or Parquet was asked without pyarrow.
    """
    target = Path(path)
    rows = [attrs.asdict(record) for record in records]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.suffix == ".parquet":
            _write_parquet(rows, target)
        else:
            with target.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=_FIELDS)
                writer.writeheader()
                writer.writerows(rows)
    except OSError as error:
        raise SparseloomError(f"cannot write request records to {target}: {error.strerror}; "
                              f"choose another --out folder") from error
    return target


def _write_parquet(rows: list[dict[str, Any]], target: Path) -> None:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise SparseloomError("writing Parquet needs pyarrow (pip install pyarrow); "
                              "or write CSV") from None
    table = pyarrow.Table.from_pylist(rows) if rows else pyarrow.table(
        {name: [] for name in _FIELDS})
    pyarrow.parquet.write_table(table, target)


class RecordStream:
    """Appends the record of every ended request to a CSV file, in the order they ended.

    :meth:`accept` (the runtime's ``record_sink``, called on a worker thread) only appends the
    request to a queue; a background thread turns them into records and writes them every
    ``interval_s`` seconds, so the hot path does no formatting or I/O.

    :raises SparseloomError: the file cannot be created.
    """

    def __init__(self, path: str | os.PathLike[str], to_record: Callable[[Any], RequestRecord],
                 interval_s: float = 0.25) -> None:
        self.path = Path(path)
        self.written = 0
        self._to_record = to_record
        self._interval_s = interval_s
        self._pending: collections.deque[Any] = collections.deque()
        self._stop = threading.Event()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("w", newline="")
        except OSError as error:
            raise SparseloomError(f"cannot write request records to {self.path}: "
                                  f"{error.strerror}; choose another --out folder") from error
        self._writer = csv.writer(self._handle)
        self._writer.writerow(_FIELDS)
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="sparseloom-records")
        self._thread.start()

    def accept(self, request: Any) -> None:
        """Queue one ended request (thread-safe, O(1))."""
        self._pending.append(request)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._flush()

    def _flush(self) -> None:
        pending, rows = self._pending, []
        while pending:
            rows.append(attrs.astuple(self._to_record(pending.popleft()), recurse=False))
        if rows:
            self._writer.writerows(rows)
            self._handle.flush()
            self.written += len(rows)

    def close(self) -> Path:
        """Write what is queued and close the file; returns its path."""
        self._stop.set()
        self._thread.join()
        self._flush()
        self._handle.close()
        return self.path
