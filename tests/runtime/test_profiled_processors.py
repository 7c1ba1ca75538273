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
