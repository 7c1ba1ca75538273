"""The profile table every placement policy reads: accuracy and latency of stitched variants.

For each task it holds the per-subgraph measurements (latency, spread, compile and load time,
loaded memory on every processor), the measured hand-off cost at every boundary for every
processor pair, and the accuracy of every stitched variant (measured where it was measured,
estimated everywhere else). Stitched variants are rows of a mixed-radix index over the
positions: ``choices = (c_0, …, c_{S-1})`` is row ``Σ c_j · V^(S-1-j)``.

On disk (see ``docs/profile.md``): ``profile.json`` (metadata, processors, per-task names and
shapes) next to ``profile.npz`` (the arrays, keys ``t<i>.<field>``).
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import ProfileError
from sparseloom.profile.chain_floor import chain_latency
from sparseloom.profile.table_fields import (
    ARRAY_FIELDS,
    FORMAT_VERSION,
    JSON_NAME,
    NPZ_NAME,
    OPTIONAL_FIELDS,
)

ChoicesLike = Sequence[int] | np.ndarray


def _strings(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(value) for value in values)
#: A processor order by names or indices, (S,) or (n, S).
OrderLike = (Sequence[str] | Sequence[int] | Sequence[Sequence[str]] | Sequence[Sequence[int]]
             | np.ndarray)


@attrs.define(eq=False)
class TaskProfile:
    """Everything measured and estimated for one task (S positions, V variants, P processors).

    Attributes:
        task: the task name.
        metric: the task metric's name (``accuracy``, ``f1`` …).
        variant_names: the zoo's variant names, by variant index.
        variant_kinds: compressor kind per variant (``dense``, ``int8`` …).
        variant_levels: compression level per variant (V,).
        source_accuracy: measured metric of each original variant (V,).
        latency_ms: latency of subgraph (position, variant) on processor (S, V, P), the
            profile's statistic (``meta["profiler"]["statistic"]``, p25 by default) of the
            timed rounds, each a hot call (``meta["profiler"]["burst"]``,
            :class:`~sparseloom.profile.measure.ProfilerConfig`); what the latency
            estimators add up.
        latency_spread_ms: inter-quartile range of those rounds (S, V, P).
        compile_ms: compile time (S, V, P).
        load_ms: load time (S, V, P).
        memory_bytes: memory held once loaded (S, V, P).
        handoff_ms: extra cost of boundary j (after position j) from processor a to b
            (S-1, P, P): measured chained pair minus the two subgraphs alone.
        accuracy_estimated: estimated metric of every stitched variant (V**S,).
        accuracy_measured: measured metric where measured exactly, NaN elsewhere (V**S,).
        fidelity_error: relative output error of each subgraph against the dense one on
            dense-prefix calibration inputs (S, V); an accuracy-estimator feature.
        latency_median_ms: the median of the same rounds (S, V, P).
        chain_fit: ``(scale, offset)`` of the chain latency model (2,): a chain's latency is
            ``scale · additive + offset``, fitted on chains timed with the subgraphs by the
            ``additive-fitted`` estimator; ``(1, 0)`` (the plain additive model) otherwise.
        numerics_error: how far subgraph (position, variant)'s outputs on each processor are
            from the evaluation processor's, on which every accuracy was measured (S, V, P;
            :mod:`sparseloom.profile.numerics`); NaN where it could not be compared, 0 in a
            table written before it was measured.
        served_accuracy: the metric of stitched variant (row) measured exactly with every
            position on processor p, in p's own arithmetic (V**S, P;
            :mod:`sparseloom.profile.served`): measured only where p computes some of the
            variant's subgraphs differently from the evaluation processor, NaN elsewhere.
        latency_cold_ms: the same statistic of each round's first call, a cold one (S, V,
            P): what a lone request finds, the scale of the SLOs derived from the profile
            (:meth:`cold`); :attr:`latency_ms` in a table timed one cold call per round.
    """

    task: str
    metric: str
    variant_names: tuple[str, ...] = attrs.field(converter=_strings)
    variant_kinds: tuple[str, ...] = attrs.field(converter=_strings)
    variant_levels: np.ndarray
    source_accuracy: np.ndarray
    latency_ms: np.ndarray
    latency_spread_ms: np.ndarray
    compile_ms: np.ndarray
    load_ms: np.ndarray
    memory_bytes: np.ndarray
    handoff_ms: np.ndarray
    accuracy_estimated: np.ndarray
    accuracy_measured: np.ndarray
    fidelity_error: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0)))
    latency_median_ms: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0, 0)))
    chain_fit: np.ndarray = attrs.field(factory=lambda: np.array([1.0, 0.0]))
    numerics_error: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0, 0)))
    served_accuracy: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0)))
    latency_cold_ms: np.ndarray = attrs.field(factory=lambda: np.zeros((0, 0, 0)))

    def __attrs_post_init__(self) -> None:
        for name, dtype in ARRAY_FIELDS.items():
            setattr(self, name, np.asarray(getattr(self, name), dtype=dtype))
        if self.chain_fit.size == 0:
            self.chain_fit = np.array([1.0, 0.0])
        if self.fidelity_error.size == 0:
            self.fidelity_error = np.zeros(self.latency_ms.shape[:2])
        if self.latency_median_ms.size == 0:
            self.latency_median_ms = self.latency_ms.copy()
        if self.latency_cold_ms.size == 0:
            self.latency_cold_ms = self.latency_ms.copy()
        if self.numerics_error.size == 0:
            self.numerics_error = np.zeros(self.latency_ms.shape)
        if self.served_accuracy.size == 0:
            self.served_accuracy = np.full((self.n_stitched, self.latency_ms.shape[2]), np.nan,
                                           dtype=np.float32)
        self.check()

    @property
    def n_positions(self) -> int:
        """S, the number of subgraph positions."""
        return int(self.latency_ms.shape[0])

    @property
    def n_variants(self) -> int:
        """V, the number of source variants per position."""
        return int(self.latency_ms.shape[1])

    @property
    def n_stitched(self) -> int:
        """V**S, the number of stitched variants."""
        return int(self.n_variants**self.n_positions)

    def check(self) -> None:
        """Raise :class:`ProfileError` when the arrays' shapes disagree."""
        s, v, p = self.latency_ms.shape
        expected = {
            "variant_levels": (v,), "source_accuracy": (v,), "latency_spread_ms": (s, v, p),
            "compile_ms": (s, v, p), "load_ms": (s, v, p), "memory_bytes": (s, v, p),
            "handoff_ms": (max(s - 1, 0), p, p), "accuracy_estimated": (v**s,),
            "accuracy_measured": (v**s,), "fidelity_error": (s, v),
            "latency_median_ms": (s, v, p), "chain_fit": (2,), "numerics_error": (s, v, p),
            "served_accuracy": (v**s, p), "latency_cold_ms": (s, v, p),
        }
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ProfileError(
                    f"task {self.task!r}: {name} has shape {getattr(self, name).shape}, "
                    f"expected {shape} for S={s}, V={v}, P={p}; rebuild the profile"
                )
        if not self.chain_fit[0] > 0:
            raise ProfileError(f"task {self.task!r}: chain_fit scale must be positive; got "
                               f"{self.chain_fit[0]}; rebuild the profile")
        if len(self.variant_names) != v or len(self.variant_kinds) != v:
            raise ProfileError(f"task {self.task!r}: need {v} variant names and kinds")

    # -- indexing --------------------------------------------------------------------------

    def index(self, choices: ChoicesLike) -> np.ndarray | int:
        """Row index of stitched variant(s): ``choices`` is (S,) or (n, S)."""
        array = self._choices(choices)
        rows = np.ravel_multi_index(tuple(array.T), (self.n_variants,) * self.n_positions)
        return int(rows[0]) if np.ndim(choices) == 1 else rows

    def choices(self, rows: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """The (n, S) choices of the given rows (every stitched variant when ``None``)."""
        rows_array = np.arange(self.n_stitched) if rows is None else np.asarray(rows)
        unravelled = np.unravel_index(rows_array, (self.n_variants,) * self.n_positions)
        return np.stack(unravelled, axis=-1).astype(np.int64)

    def _choices(self, choices: ChoicesLike) -> np.ndarray:
        array = np.atleast_2d(np.asarray(choices, dtype=np.int64))
        if array.shape[1] != self.n_positions:
            raise ProfileError(
                f"task {self.task!r} has {self.n_positions} positions; got choices with "
                f"{array.shape[1]} entries"
            )
        if array.size and (array.min() < 0 or array.max() >= self.n_variants):
            raise ProfileError(
                f"task {self.task!r}: variant indices must lie in 0..{self.n_variants - 1}"
            )
        return array

    # -- queries ---------------------------------------------------------------------------

    def cold(self) -> TaskProfile:
        """This profile with :attr:`latency_cold_ms` as its stage times: the latencies of
        lone requests, from which SLO grids and isolated latencies are derived."""
        return attrs.evolve(self, latency_ms=self.latency_cold_ms)

    def accuracy(self, choices: ChoicesLike | None = None) -> np.ndarray:
        """Metric of stitched variants: measured where known, estimated elsewhere."""
        best = np.where(
            np.isnan(self.accuracy_measured), self.accuracy_estimated, self.accuracy_measured
        )
        if choices is None:
            return best
        return best[self.index(choices)]

    def apply_chain_fit(self, additive_ms: np.ndarray) -> np.ndarray:
        """``scale · additive_ms + offset`` (:attr:`chain_fit`) from additive latencies (stage
        times plus hand-offs), floored (:mod:`sparseloom.profile.chain_floor`): order kept."""
        scale, offset = (float(x) for x in self.chain_fit)
        return chain_latency(additive_ms, scale, offset)

    def _fitted(self, total: np.ndarray, include_handoff: bool, fitted: bool) -> np.ndarray:
        return self.apply_chain_fit(total) if include_handoff and fitted else total

    def latency(
        self, choices: ChoicesLike, order: np.ndarray, *, include_handoff: bool = True,
        fitted: bool = True,
    ) -> np.ndarray:
        """Latency in ms of stitched variants under processor orders: the chain model.

        ``choices`` is (S,) or (n, S); ``order`` holds processor indices, (S,) or (n, S).
        The additive sum of stage times and hand-offs, corrected by :attr:`chain_fit` (unless
        ``fitted`` is false); ``include_handoff=False`` is the paper's pure sum, uncorrected.
        """
        choice_array = self._choices(choices)
        order_array = np.broadcast_to(np.atleast_2d(order), choice_array.shape)
        positions = np.arange(self.n_positions)
        total = self.latency_ms[positions, choice_array, order_array].sum(axis=1)
        if include_handoff and self.n_positions > 1:
            boundaries = np.arange(self.n_positions - 1)
            total = total + self.handoff_ms[
                boundaries, order_array[:, :-1], order_array[:, 1:]
            ].sum(axis=1)
        return self._fitted(total, include_handoff, fitted)

    def latency_all(self, order: np.ndarray, *, include_handoff: bool = True,
                    fitted: bool = True) -> np.ndarray:
        """Latency of every stitched variant (V**S,) under one processor ``order`` (S,), as
        :meth:`latency` gives it."""
        order_array = np.asarray(order, dtype=np.int64)
        total: np.ndarray = np.zeros(())
        for position in range(self.n_positions):
            total = np.add.outer(total, self.latency_ms[position, :, order_array[position]])
        total = total.ravel()
        if include_handoff and self.n_positions > 1:
            total = total + float(
                self.handoff_ms[np.arange(self.n_positions - 1), order_array[:-1],
                                order_array[1:]].sum()
            )
        return self._fitted(total, include_handoff, fitted)


@attrs.define(eq=False)
class ProfileTable:
    """The accuracy–latency table of a workload on a set of processors.

    Attributes:
        workload: the workload name.
        processors: processor names; an order is a tuple of these (or of their indices).
        tasks: a :class:`TaskProfile` per task name.
        meta: provenance (zoo hash, processor config, estimator names, timings, failures).
    """

    workload: str
    processors: tuple[str, ...] = attrs.field(converter=_strings)
    tasks: dict[str, TaskProfile] = attrs.field(factory=dict)
    meta: dict[str, Any] = attrs.field(factory=dict)
    #: The table before :func:`~sparseloom.plan.feasible.faithful_profile` masked it (``None``
    #: for a table as measured): where a variant's accuracy was measured as served on a
    #: processor (``TaskProfile.served_accuracy``), its latencies come from here.
    unmasked: ProfileTable | None = attrs.field(default=None, kw_only=True, repr=False)

    def task(self, name: str) -> TaskProfile:
        """The profile of task ``name``."""
        try:
            return self.tasks[name]
        except KeyError:
            raise ProfileError(
                f"task {name!r} is not in the profile of workload {self.workload!r}; "
                f"profiled tasks: {', '.join(self.tasks) or 'none'}"
            ) from None

    def order_indices(self, order: OrderLike) -> np.ndarray:
        """Processor indices of an order given by names or indices, (S,) or (n, S)."""
        array = np.asarray(order)
        if array.dtype.kind in "iu":
            if array.size and (array.min() < 0 or array.max() >= len(self.processors)):
                raise ProfileError(f"processor index out of range 0..{len(self.processors) - 1}")
            return array.astype(np.int64)
        lookup = {name: i for i, name in enumerate(self.processors)}
        try:
            return np.vectorize(lookup.__getitem__, otypes=[np.int64])(array)
        except KeyError as error:
            raise ProfileError(
                f"processor {error.args[0]!r} is not profiled; profiled processors: "
                f"{', '.join(self.processors)}"
            ) from None

    def latency(
        self, task: str, choices: ChoicesLike, order: OrderLike, *, include_handoff: bool = True,
        fitted: bool = True,
    ) -> np.ndarray | float:
        """Estimated latency in ms; a float for one variant, an array for (n, S) choices
        (:meth:`TaskProfile.latency`)."""
        result = self.task(task).latency(
            choices, self.order_indices(order), include_handoff=include_handoff, fitted=fitted
        )
        single = np.ndim(choices) == 1 and np.ndim(order) == 1
        return float(result[0]) if single else result

    def accuracy(self, task: str, choices: ChoicesLike | None = None) -> np.ndarray | float:
        """Metric of stitched variants of ``task`` (measured where known, else estimated)."""
        result = self.task(task).accuracy(choices)
        return float(result) if np.ndim(result) == 0 else result

    # -- persistence -----------------------------------------------------------------------

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``profile.json`` and ``profile.npz`` into ``directory``; returns it."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        tasks_json = []
        for index, profile in enumerate(self.tasks.values()):
            tasks_json.append({
                "name": profile.task, "key": f"t{index}", "metric": profile.metric,
                "variant_names": list(profile.variant_names),
                "variant_kinds": list(profile.variant_kinds),
                "positions": profile.n_positions, "variants": profile.n_variants,
            })
            for field in ARRAY_FIELDS:
                arrays[f"t{index}.{field}"] = getattr(profile, field)
        document = {
            "format_version": FORMAT_VERSION, "workload": self.workload,
            "processors": list(self.processors), "tasks": tasks_json, "meta": self.meta,
        }
        temporary = path / (NPZ_NAME + ".tmp.npz")
        np.savez_compressed(temporary, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path / NPZ_NAME)
        (path / JSON_NAME).write_text(json.dumps(document, indent=2, default=_json_default))
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ProfileTable:
        """Read a table written by :meth:`save`.

        :raises ProfileError: the files are missing, cut short or not a profile table (one
            copied from elsewhere), naming the folder and how to rebuild it.
        """
        path, document = Path(directory), None
        try:
            document = json.loads((path / JSON_NAME).read_text())
            if document.get("format_version") != FORMAT_VERSION:
                raise ProfileError(
                    f"profile in {path} has format {document.get('format_version')}, this "
                    f"sparseloom reads {FORMAT_VERSION}; rebuild it")
            with np.load(path / NPZ_NAME) as npz:
                tasks = {
                    entry["name"]: TaskProfile(
                        task=entry["name"], metric=entry["metric"],
                        variant_names=entry["variant_names"],
                        variant_kinds=entry["variant_kinds"],
                        **{field: npz[f"{entry['key']}.{field}"] for field in ARRAY_FIELDS
                           if field not in OPTIONAL_FIELDS
                           or f"{entry['key']}.{field}" in npz},
                    )
                    for entry in document["tasks"]
                }
            return cls(document["workload"], document["processors"], tasks, document["meta"])
        except (ProfileError, OSError, ValueError, KeyError, TypeError, AttributeError,
                EOFError, zipfile.BadZipFile) as error:
            if isinstance(error, ProfileError) and str(path) in str(error):
                raise
            workload = document.get("workload") if isinstance(document, dict) else None
            rebuild = (f"`sparseloom profile {workload} --no-cache` (with the options that "
                       f"made it)" if isinstance(workload, str)
                       else "`sparseloom profile WORKLOAD --no-cache`")
            raise ProfileError(
                f"cannot read a profile table in {path} ({type(error).__name__}: {error}): it is "
                f"missing, damaged or not a profile table; delete {path} or rebuild it with "
                f"{rebuild}") from error


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
