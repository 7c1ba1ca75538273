"""The runtime serves a processor as its profile measured it (``profile_processors``)."""

from __future__ import annotations

from typing import Any

import pytest


def test_a_processor_spec_the_profile_did_not_measure_is_refused(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.core.errors import RuntimeServeError
    from sparseloom.runtime.models import profile_processors

    # The profile measured ov:CPU in f32: serving it in bf16 would use times and accuracies
    # of other arithmetic. Its own spec, or the bare name, is served as profiled.
    _, profile = two_tasks
    with pytest.raises(RuntimeServeError, match=r"profile with -p 'ov:CPU\?INFERENCE_PRECISION"):
        profile_processors(profile, ["ov:CPU?INFERENCE_PRECISION_HINT=bf16"])
    spec = next(str(c["spec"]) for c in profile.meta["processor_config"]
                if str(c["spec"]).startswith("ov:CPU"))
    assert profile_processors(profile, [spec]) == profile_processors(profile, ["ov:CPU"])


def test_a_processor_with_streams_is_served_by_one_thread_and_the_run_says_so(
        two_tasks: tuple[Any, Any]) -> None:
    import threading

    from sparseloom.core.processors import get_processor
    from sparseloom.core.types import SLO, Plan, StitchedVariant
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"]["digits_a"]), verify=False)
    processor = get_processor("ort:CPU?streams=2")
    runtime = Runtime([RuntimeTask(workload.task("digits_a"), zoo, SLO(0.0, 1000.0))],
                      [processor], profile=profile)
    before = {t.name for t in threading.enumerate()}
    try:
        switching.start(runtime, Plan("hand", ("ort:CPU", "ort:CPU"),
                                      {"digits_a": StitchedVariant("digits_a", (0, 0))}))
        started = [t.name for t in threading.enumerate() if t.name not in before]
        assert started.count("sparseloom-run-ort:CPU") == 1
        assert any("ort:CPU has streams=2" in note and "one worker thread" in note
                   for note in runtime.notes)
    finally:
        runtime.stop()
