"""Online calibration of the processors, end to end on a real runtime (OpenVINO and ONNX Runtime
serving the two-task workload's stitched ONNX subgraphs).

One processor is slowed on purpose (a fault-injecting double wraps its models' runners with a
sleep of :data:`FAULT_S`, hundreds of times this tiny model's profiled call of tens of
microseconds). The contract checked (module docs of :mod:`sparseloom.plan.calibration` and
:mod:`sparseloom.plan.policy`): the workers' measured service time reaches the policy, whose
first plan after the fault moves stages off the slowed processor, until it carries none (every
SLO is loose: no violation can move the plan, only the measurement); once the processor
recovers, what the policy learned of it is forgotten (its factor decays while no stage runs
there, or is measured again at its recovered speed).

Margins are wide on purpose: the fault dwarfs the noise of a shared 2-core machine (the measured
time of a tens-of-microseconds call includes waiting for the GIL after it), and nothing is
compared with a factor measured before the fault. The plan may reach the other processor in one
plan or in two (a first, partly measured slowdown can make splitting the tasks best); whether it
moves back to the recovered processor depends on this small model's profiled latencies, whose
differences are within the machine's noise: neither is asserted.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from sparseloom.core.types import SLO

#: Seconds the fault adds to every model call on the slowed processor.
FAULT_S = 0.02
#: The policy's recovery half-life here (seconds; 2 by default), short to keep the test short.
HALF_LIFE_S = 0.5


class SlowRunnerFault:
    """Fault injection: a model call that takes ``extra_s`` longer (a slowed processor)."""

    def __init__(self, runner: Any, extra_s: float) -> None:
        self.runner, self.extra_s = runner, extra_s

    def __call__(self, inputs: Any) -> Any:
        time.sleep(self.extra_s)
        return self.runner(inputs)


def _stages_on(runtime: Any, processor: str) -> int:
    return sum(s.route.processors.count(processor) for s in runtime.states.values()
               if s.route is not None)


def _wait(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_slowed_processor_is_left_by_the_next_plan_and_forgotten_once_it_recovers(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.plugins.policies.loaded import LoadedPolicy
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    processors = profile_processors(profile)
    names = [p.name for p in processors]
    slos = {name: SLO(0.0, 1000.0) for name in profile.tasks}  # never violated
    # Queues only: the calibration reads the processors' own workers, and a task on a
    # time-sliced lane (its call times sliced by design) is left out of it.
    policy = LoadedPolicy(recovery_half_life_s=HALF_LIFE_S, time_share=False)
    plan = policy.plan(list(profile.tasks), profile, names, slos)
    tasks = [RuntimeTask(workload.task(n), load_zoo(zoo_directory(
        profile.meta["zoo_hashes"][n]), verify=False), slos[n]) for n in profile.tasks]
    runtime = Runtime(tasks, processors, profile=profile, policy=policy)
    switching.start(runtime, plan)
    stop = threading.Event()

    def client(task: str) -> None:  # closed loop: one request in flight per task
        row = 0
        while not stop.is_set():
            done: Future[Any] = Future()
            runtime.submit(task, row % 100, future=done)
            done.result(timeout=30)
            row += 1

    def factor(processor: str) -> float:
        return policy._calibration.processor_factor(processor, time.monotonic())

    clients = [threading.Thread(target=client, args=(t,), daemon=True) for t in profile.tasks]
    try:
        for thread in clients:
            thread.start()
        # The (fast, 3-repeat) profile is corrected by what the workers measure: on a steady
        # load that may move the plan. Wait (a while, not forever) for a whole dwell (2 s)
        # without a plan applied (nor a switch still pending), so that the fault meets a
        # settled plan.
        for _ in range(4):
            version = runtime.plan_version
            time.sleep(2.1)
            if runtime.plan_version == version and all(
                    s.pending is None for s in runtime.states.values()):
                break
        # The processor the plan loads most: slowing it makes the other worth using.
        slowed = max(names, key=lambda n: _stages_on(runtime, n))
        before, at_fault = _stages_on(runtime, slowed), runtime.plan_version
        assert before > 0
        worker = runtime.workers[slowed]
        originals = {key: model.runner for key, model in worker.models.items()}
        for model in worker.models.values():
            model.runner = SlowRunnerFault(model.runner, FAULT_S)
        peak = [1.0]  # the policy's factor on the slowed processor, highest yet

        def off(most: int) -> bool:
            peak[0] = max(peak[0], factor(slowed))
            return _stages_on(runtime, slowed) <= most

        assert _wait(lambda: off(before - 1), 30), \
            f"the plan kept {before} stages on the slowed {slowed} for 30 s"
        # The plan applied first after the fault is the one that moved them (+1 per plan).
        assert runtime.plan_version == at_fault + 1, [e.to_route for e in runtime.switches]
        assert _wait(lambda: off(0), 30), \
            f"the plan kept {_stages_on(runtime, slowed)} stages on the slowed {slowed}"
        for key, model in worker.models.items():  # the processor recovers
            model.runner = originals[key]
        # The policy learned the fault (hundreds of times the profile) ...
        assert peak[0] > 10, peak[0]

        def forgotten() -> bool:
            # ... and forgets it: down to a quarter of the highest factor it learned. While
            # no stage runs there that is two half-lives after the last (the requests in
            # flight when the plan moved end on it, and a feedback delayed by the switch's
            # loads may still report them); if a later plan probes it, it is measured again
            # at its recovered speed.
            now = factor(slowed)
            peak[0] = max(peak[0], now)
            return now < 1.0 + (peak[0] - 1.0) / 4

        assert _wait(forgotten, 10), \
            f"the slowed processor's factor stayed at {factor(slowed):.1f} (peak {peak[0]:.1f})"
    finally:
        stop.set()
        for thread in clients:
            thread.join(30)
        runtime.drain(30)
        runtime.stop()
    assert runtime.failed == 0
