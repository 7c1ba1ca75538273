"""The server's memory budget, held against what each load measured.

The preloader chose the resident set from the profile's figures
(:func:`~sparseloom.plan.preload.preload`); the runtime checks the same budget against the
memory each load *measured* (``ResidentModel.memory_bytes``, twins included), so that a figure
the profile under-estimated cannot carry the server past it — unless the budget is full
preloading (1.0, the default: :func:`enforced_bytes`):

- at start the routes load first (the server cannot serve without them; a start whose routes
  alone measure over the budget is refused, naming the budget they need), then the preloaded
  subgraphs in the preloader's order, each only while the measured total plus its profiled
  size fits the budget (one that measures more than that is unloaded again); those left out
  are counted in a note;
- a switch that needs models the budget cannot hold first unloads resident models that no
  task's route (current or pending) uses, least hot first (the last preloaded), by the
  profile's figures and again by what the loads measured, and is abandoned with a note (its
  new models unloaded) when that is not enough.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sparseloom.core.errors import OverBudget
from sparseloom.runtime.lanes import profiled_as
from sparseloom.runtime.models import resident_bytes
from sparseloom.runtime.resident import ModelKey

if TYPE_CHECKING:
    from sparseloom.runtime.executor import Runtime

_MIB = float(1 << 20)


def enforced_bytes(budget: float | int, planned_bytes: int) -> int | None:
    """The bytes the runtime holds its loads to for ``budget`` (``planned_bytes``: the
    preloader's figure for it): ``None`` for full preloading (the fraction 1.0, the default:
    every subgraph, whatever the loads measure — the profile's figures were measured in a
    process that had loaded models before, so a first load reads more), else the budget."""
    if isinstance(budget, float) and budget >= 1.0:
        return None
    return planned_bytes


def estimate_bytes(runtime: Runtime, key: ModelKey | None, processor: str,
                   wide: bool = False) -> int:
    """The profile's memory of model ``key`` on ``processor`` (a merged model: its chain's;
    with its wide twin: twice that); 0 without a profile or for a processor it lacks, or for
    no model (``None``)."""
    profile = runtime.profile
    name = profiled_as(runtime.workers, processor)
    if key is None or profile is None or name not in profile.processors:
        return 0
    task, position, variant = key
    table = profile.task(task).memory_bytes
    q = profile.processors.index(name)
    if isinstance(variant, tuple):
        size = sum(int(table[j, choice, q]) for j, choice in enumerate(variant))
    else:
        size = int(table[position, variant, q])
    return size * (2 if wide else 1)


def fits(runtime: Runtime, key: ModelKey | None, processor: str, wide: bool = False) -> bool:
    """Whether ``key`` (not resident yet; ``None``: nothing more) fits within the budget
    beside what is loaded now."""
    budget = runtime.loader.memory_budget
    return budget is None or (resident_bytes(runtime.workers)
                              + estimate_bytes(runtime, key, processor, wide) <= budget)


def _in_use(runtime: Runtime) -> set[tuple[ModelKey, str]]:
    """(model, worker) pairs some task's current or pending route runs."""
    used: set[tuple[ModelKey, str]] = set()
    for state in runtime.states.values():
        for route in (state.route, state.pending):
            if route is not None:
                used.update(zip(route.keys, route.processors, strict=False))
    return used


def make_room(runtime: Runtime, needed: list[tuple[ModelKey, str, bool]]) -> None:
    """Unload idle resident models until ``needed`` ((model, worker, wide) not resident) fits
    the budget by the profile's figures, least hot first.

    :raises OverBudget: the models no route uses do not free enough (nothing is unloaded then).
    """
    want = sum(estimate_bytes(runtime, key, processor, wide) for key, processor, wide in needed)
    if needed:
        _evict(runtime, want, {(key, processor) for key, processor, _ in needed},
               f"loading {len(needed)} model(s) (about {want / _MIB:.1f} MiB)")


def settle(runtime: Runtime, loaded: list[tuple[ModelKey, str]]) -> None:
    """After mandatory loads: unload idle models until what the loads *measured* fits the
    budget; if it cannot, unload ``loaded`` (the models just loaded, those no route in force
    uses) too and refuse.

    :raises OverBudget: the models no route uses do not free enough.
    """
    try:
        _evict(runtime, 0, set(loaded), f"the {len(loaded)} model(s) just loaded")
    except OverBudget:
        used = _in_use(runtime)
        for key, processor in loaded:
            if (key, processor) not in used:
                unload(runtime, processor, key)
        raise


def _evict(runtime: Runtime, want: int, keep: set[tuple[ModelKey, str]], what: str) -> None:
    budget = runtime.loader.memory_budget
    if budget is None:
        return
    loaded = resident_bytes(runtime.workers)
    if loaded + want <= budget:
        return
    used = _in_use(runtime) | keep
    idle = [(name, key, model.memory_bytes) for name, worker in runtime.workers.items()
            for key, model in worker.models.items() if (key, name) not in used]
    chosen, freed = [], 0
    for name, key, size in reversed(idle):  # preloaded in descending hotness
        if loaded - freed + want <= budget:
            break
        chosen.append((name, key))
        freed += size
    if loaded - freed + want > budget:
        raise OverBudget(
            f"{what} would carry the server past its memory budget of {budget / _MIB:.1f} "
            f"MiB: {loaded / _MIB:.1f} MiB are loaded and the models no route uses hold only "
            f"{freed / _MIB:.1f} MiB; give --memory-budget {loaded - freed + want} (bytes) or "
            f"more, or a policy that plans smaller variants")
    for name, key in chosen:
        unload(runtime, name, key)
    runtime.loader.evicted += len(chosen)


def unload(runtime: Runtime, worker_name: str, key: ModelKey) -> None:
    """Unload one resident model (a model a ``keep_loaded`` block keeps goes back to it)."""
    from sparseloom.runtime.kept import release

    worker = runtime.workers[worker_name]
    model = worker.models.pop(key, None)
    if model is None:
        return
    for loaded in (model.loaded, model.wide_loaded):
        if loaded is not None:
            release(model.backend, loaded)


def weights_bytes(runtime: Runtime) -> int:
    """The bytes of the weights of every resident model (its initializers, in the file or
    referenced by it; a wide twin counts them again): what the loaded total is compared
    with."""
    from sparseloom.zoo.batch_one import weight_bytes

    total = 0
    for worker in runtime.workers.values():
        for key, model in worker.models.items():
            with contextlib.suppress(OSError):
                total += weight_bytes(runtime.loader.model_path(key)) * (1 + model.wide)
    return total
