"""ADMS dynamic dispatch: each ready subgraph goes to the processor that finishes it first."""

from __future__ import annotations

from typing import Any

from sparseloom.core.protocols import Dispatcher
from sparseloom.core.registry import get_registry
from sparseloom.runtime.load import LoadSpec


def _adms(profile: Any) -> Any:
    from sparseloom.plan.slo_grid import grid_middle

    policy = get_registry().create("policy", "adms")
    policy.plan(list(profile.tasks), profile, list(profile.processors),
                {t: grid_middle(profile.task(t)) for t in profile.tasks})
    return policy


def test_adms_dispatches_to_the_less_loaded_processor(tiny: tuple[Any, Any]) -> None:
    _, profile = tiny
    policy = _adms(profile)
    assert isinstance(policy, Dispatcher)
    a, b = profile.processors
    busy = 1000.0
    assert policy.dispatch("tiny", 0, 0, {a: busy, b: 0.0}, None) == b
    assert policy.dispatch("tiny", 0, 0, {a: 0.0, b: busy}, None) == a
    assert policy.dispatch("tiny", 1, 0, {a: busy, b: 0.0}, a) == b


def test_adms_avoids_a_loaded_processor_end_to_end(tiny: tuple[Any, Any]) -> None:
    from sparseloom.plan.slo_grid import grid_middle
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.load import offer
    from sparseloom.runtime.models import RuntimeTask
    from sparseloom.runtime.session import profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = tiny
    policy = _adms(profile)
    slos = {"tiny": grid_middle(profile.task("tiny"))}
    tasks = [RuntimeTask(workload.task("tiny"), load_zoo(zoo_directory(
        profile.meta["zoo_hashes"]["tiny"]), verify=False), slos["tiny"])]
    runtime = Runtime(tasks, profile_processors(profile), profile=profile, policy=policy)
    plan = policy.plan(["tiny"], profile, list(profile.processors), slos)
    switching.start(runtime, plan)
    try:
        for loaded, idle in (profile.processors, reversed(profile.processors)):
            for worker in runtime.workers.values():
                worker.pending_ms = 0.0
            runtime.workers[loaded].pending_ms = 1e6  # a long queue, as far as ADMS knows
            before = len(runtime.finished)
            offer(runtime, LoadSpec("closed", queries=20))
            served = runtime.finished[before:]
            assert len(served) == 20
            assert all(set(r.ran_on) == {idle} for r in served), (loaded, idle)
    finally:
        runtime.stop()
