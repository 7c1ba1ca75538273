"""The runtime serves a backend that implements only the documented protocols.

A third-party backend's loaded model has the four required ``LoadedModel`` members and no
``runner`` (the built-ins' fast path): the workers call ``backend.infer`` in place instead.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.processors import get_processor
from sparseloom.core.protocols import Backend, LoadedModel
from sparseloom.core.types import SLO, Plan, Processor, StitchedVariant
from sparseloom.runtime import switching
from sparseloom.runtime.executor import Runtime
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import RuntimeTask
from sparseloom.runtime.summary import measured_accuracy
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend


class ThirdBackend(ProtocolOnlyBackend):
    """One CPU processor, served by the runtime through ``backend.infer``."""

    processors = (Processor("third:CPU", "third", "CPU"),)


PLUGIN = SimpleNamespace(sparseloom_register_backends=hookimpl(
    lambda register: register("third", ThirdBackend, description="protocol only")))


def test_runtime_serves_a_protocol_only_backend(tiny: tuple[Any, Any], register_plugin) -> None:
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    register_plugin(PLUGIN, "protocol-only-backend")
    workload, profile = tiny
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"]["tiny"]), verify=False)
    processor = get_processor("third:CPU")
    task = RuntimeTask(workload.task("tiny"), zoo, SLO(0.0, 1e9))
    runtime = Runtime([task], [processor])
    variant = StitchedVariant("tiny", (0,) * zoo.positions)
    switching.start(runtime, Plan("test", ["third:CPU"] * zoo.positions, {"tiny": variant}))
    ThirdBackend.calls = 0
    try:
        resident = next(iter(runtime.workers["third:CPU"].models.values()))
        assert isinstance(resident.backend, Backend) and isinstance(resident.loaded, LoadedModel)
        assert not hasattr(resident.loaded, "runner")  # no fast path: backend.infer is called
        result = offer(runtime, LoadSpec("closed", queries=30))
    finally:
        runtime.stop()
    assert not result.interrupted and result.drained_failures == 0
    assert runtime.submitted == runtime.completed == 30 and runtime.failed == 0
    assert ThirdBackend.calls == 30 * zoo.positions
    assert all(r.ran_on == ["third:CPU"] * zoo.positions for r in runtime.finished)
    # The served outputs are the model's: the same accuracy as the dense chain run here.
    tiny_task = workload.task("tiny")
    samples = [r.sample for r in sorted(runtime.finished, key=lambda r: r.request_id)]
    rows = []
    backend = ThirdBackend()
    models = [backend.load(backend.compile(str(zoo.subgraph_path(j, 0)), processor), processor)
              for j in range(zoo.positions)]
    for sample in samples:
        carried = {k: v[sample:sample + 1] for k, v in tiny_task.eval_inputs.items()}
        for model in models:
            carried = backend.infer(model, {n: carried[n] for n in model.input_names})
        rows.append(carried[task.output_name][0])
    expected = np.stack(rows)
    served = np.stack([r.output for r in sorted(runtime.finished, key=lambda r: r.request_id)])
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    assert measured_accuracy(runtime, "tiny") == measured_accuracy(runtime, "tiny")  # not NaN
