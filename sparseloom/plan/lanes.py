"""Lanes for ``sparseloom-loaded``: which option each task takes on a lane, and what it costs.

A plan that puts every task on a lane of its own (``Plan.lanes``, :mod:`sparseloom.runtime.
lanes`) gives up the processors' queues: the kernel time-slices the lanes over every core and
pre-empts a long call for a short one. ``sparseloom-loaded`` takes such a plan when it is
estimated to miss fewer latency SLOs than the shared queues (its module doc). The
:class:`Option` records it weighs are defined here, beside the lanes that read them, so the
plan layer never imports the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    from sparseloom.profile.table import ProfileTable


@attrs.frozen
class Option:
    """One way to serve a task: a stitched-variant row under a placement.

    Attributes:
        row: the stitched-variant row.
        placement: the processor index of each position.
        work_ms: summed stage time on each processor, (P,).
        chain_ms: the isolated chain latency (stages + hand-offs, chain-fitted).
        longest_ms: the longest time one request holds each processor, (P,) (0 where unused):
            consecutive stages on one processor run in place, so they count as one.
        uses: whether the chain runs on each processor, (P,).
        longest_stage_ms: the longest single stage of the chain.
        served_accuracy: the metric measured for ``row`` served on ``placement``'s processor
            (``served_options`` of :mod:`sparseloom.plugins.policies.loaded_options`);
            ``None`` for an option read from the faithful profile.
    """

    row: int
    placement: tuple[int, ...]
    work_ms: np.ndarray = attrs.field(eq=False)
    chain_ms: float
    longest_ms: np.ndarray = attrs.field(eq=False)
    uses: np.ndarray = attrs.field(eq=False)
    longest_stage_ms: float
    served_accuracy: float | None = None


def lane_choice(options: Sequence[Sequence[Option]], n_processors: int
                ) -> tuple[list[Option], np.ndarray] | None:
    """Each task's fastest option whose chain keeps to one processor that computes as the
    profile measured, served on a lane, and the lanes' estimated latencies; ``None`` when a
    task has no such option.

    A lane shares every core, so an option of a processor whose arithmetic differs (the
    served options: OpenVINO ``bf16``, on AMX here) is left out: measured, a sentiment lane on
    ``bf16`` OpenVINO took the short lanes beside it from 0.36–0.6 ms to 1.3–1.6 ms at p90
    (docs/plan.md).

    The lanes share the cores of ``n_processors`` processors (one core each, as the default
    processors have) and the kernel time-slices them. A thread that wakes for a short call
    runs before one that has been running a long call for its share (the lag credit of
    Linux's CFS and EEVDF), so with every task's request in flight (the closed loop) a chain
    shares the cores with the lanes whose chains are no longer than its own: it takes
    ``max(1, those lanes / processors)`` times as long.
    """
    chosen = []
    for task_options in options:
        whole = [o for o in task_options
                 if len(set(o.placement)) == 1 and o.served_accuracy is None]
        if not whole:
            return None
        chosen.append(min(whole, key=lambda o: o.chain_ms))
    return chosen, time_sliced(np.array([o.chain_ms for o in chosen]), n_processors)


def time_sliced(chain_ms: np.ndarray, n_cores: int) -> np.ndarray:
    """Each chain of ``chain_ms`` run on a thread of its own, the threads sharing ``n_cores``
    cores: it takes ``max(1, k / n_cores)`` times as long, k the chains no longer than its own
    (a thread waking for a short call runs first; :func:`lane_choice`)."""
    sharing = (chain_ms[None, :] <= chain_ms[:, None]).sum(axis=1)
    return chain_ms * np.maximum(1.0, sharing / max(n_cores, 1))


def pinned_lanes(chosen: Sequence[Option], queued_ms: np.ndarray, n_processors: int
                 ) -> tuple[list[int], np.ndarray]:
    """The tasks of ``chosen`` (one option each) to serve on lanes pinned to their own
    processor's cores (``Plan.lanes_pinned``), and every task's latency estimated then.

    A processor whose every task keeps its whole chain there, two tasks or more, gives each
    of them a lane on its cores: the kernel time-slices them instead of the processor's queue
    serving one call after another. Each is estimated as :func:`lane_choice` estimates lanes,
    on that processor's one core: a chain takes ``max(1, the lanes there whose chains are no
    longer than its own)`` times as long. Every other task keeps its ``queued_ms``.
    """
    estimate = np.array(queued_ms, dtype=np.float64, copy=True)
    laned: list[int] = []
    for processor in range(n_processors):
        users = [t for t, option in enumerate(chosen) if option.uses[processor]]
        whole = [t for t in users if set(chosen[t].placement) == {processor}]
        if len(whole) < 2 or len(whole) != len(users):
            continue
        estimate[whole] = time_sliced(np.array([chosen[t].chain_ms for t in whole]), 1)
        laned += whole
    return sorted(laned), estimate


def installed_backend(processor: str) -> Any:
    """The backend of the processor named ``processor`` (``ort:CPU``), or ``None`` when none is
    installed here under that name (a simulated SoC's processor, a missing plugin)."""
    from sparseloom.core.errors import SparseloomError
    from sparseloom.core.processors import get_backend

    try:
        return get_backend(processor.partition(":")[0])
    except SparseloomError:
        return None


def laneable(table: ProfileTable) -> bool:
    """Whether every processor of ``table`` is a set of CPU cores served by a backend
    installed here (a lane runs on the cores of all of them)."""
    return all(name.partition(":")[2].upper().startswith("CPU")
               and installed_backend(name) is not None for name in table.processors)


def spare_tasks(names: Sequence[str], chosen: Sequence[Option], merged: Sequence[str],
                sharing: Mapping[str, int], processors: Sequence[str]) -> tuple[str, ...]:
    """Of ``names`` (one ``chosen`` option each), the tasks that get a spare (``Plan.spares``;
    :mod:`sparseloom.plugins.policies.loaded`): a merged chain (or one of one position) alone
    in its processor's queue (``sharing``: the tasks each processor's queue serves), where no
    other processor's queue serves any task (their cores hold only time-sliced lanes, or
    nothing)."""
    spares = []
    for name, option in zip(names, chosen, strict=True):
        home = {processors[p] for p in option.placement}
        one_call = name in merged or len(option.placement) == 1
        if one_call and len(home) == 1 and all(
                sharing[p] == (1 if p in home else 0) for p in processors):
            spares.append(name)
    return tuple(spares)
