"""The probe process's own side: ``python -m sparseloom.isolation.child``.

Reads batches of :class:`~sparseloom.isolation.probe.ProbeItem` from stdin
(:mod:`sparseloom.isolation.prober` writes them) and, for each item, builds its backend,
compiles and loads the model for the processor, runs one inference on random inputs of the
model's declared shapes, and unloads it. Before each step it writes a ``step`` line to stdout
(JSON lines, flushed), after the last an ``ok`` or ``raised`` line: when the process dies of a
signal, the parent knows which item and which step killed it.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO

from sparseloom.isolation.prober import HEADER, env_number


def example_feeds(model_path: str) -> dict[str, Any]:
    """Random inputs for the graph inputs of the ONNX file (free dimensions = 1; integer inputs
    are zeros, a valid index for any embedding table)."""
    import numpy as np
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    model = onnx.load(model_path, load_external_data=False)
    initializers = {tensor.name for tensor in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {}
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                      for d in tensor.shape.dim)
        dtype = np.dtype(tensor_dtype_to_np_dtype(tensor.elem_type))
        feeds[value.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                             else np.zeros(shape, dtype))
    return feeds


def _write(out: BinaryIO, record: Mapping[str, Any]) -> None:
    out.write(json.dumps(record).encode() + b"\n")
    out.flush()


def probe_all(items: list[Any], out: BinaryIO) -> None:
    """Probe every item in order, writing its steps and outcome to ``out``."""
    for item in items:
        def step(name: str, key: str = item.key) -> None:
            _write(out, {"key": key, "event": "step", "step": name})

        try:
            step("building the backend")
            backend = _BACKENDS.get(item.factory)
            if backend is None:
                backend = _BACKENDS[item.factory] = item.factory()
            step("compile")
            compiled = backend.compile(item.model_path, item.processor)
            step("load")
            loaded = backend.load(compiled, item.processor)
            step("the first inference")
            backend.infer(loaded, example_feeds(item.model_path))
            step("unload")
            backend.unload(loaded)
        except Exception as error:
            _write(out, {"key": item.key, "event": "raised",
                         "detail": f"{type(error).__name__}: {error}"[:500]})
        else:
            _write(out, {"key": item.key, "event": "ok"})


#: The child's own settings, kept whatever the parent's are.
_OWN_SETTINGS = ("SPARSELOOM_ISOLATION", "SPARSELOOM_PROBE_IDLE_EXIT_S")
#: Backends built so far, by factory: one instance serves every item of the child's life.
_BACKENDS: dict[Any, Any] = {}


def main() -> int:
    """Serve batches from stdin until it closes or stays idle for the idle timeout."""
    idle_s = env_number("SPARSELOOM_PROBE_IDLE_EXIT_S", 60.0)
    # Native code may print to file descriptor 1: keep the protocol on a copy of it, and send
    # whatever else is written there to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    source = sys.stdin.buffer
    while True:
        ready, _, _ = select.select([source], [], [], idle_s)
        if not ready:
            return 0
        header = source.read(HEADER.size)
        if len(header) < HEADER.size:
            return 0  # the parent closed the pipe
        (size,) = HEADER.unpack(header)
        # Written by this user's own parent process.
        settings, items = pickle.loads(source.read(size))
        for name in [k for k in os.environ if k.startswith("SPARSELOOM_")]:
            if name not in settings and name not in _OWN_SETTINGS:
                del os.environ[name]
        os.environ.update(settings)
        probe_all(items, out)
        _write(out, {"event": "batch done"})


if __name__ == "__main__":
    sys.exit(main())
