"""Fault injectors: backends whose native code "crashes" (the process kills itself with SIGSEGV).

ONNX Runtime through the documented protocols (:class:`ProtocolOnlyBackend`), except that
``crash-compile`` sends its own process SIGSEGV in ``compile`` and ``crash-infer`` in ``infer``,
as OpenVINO's and ONNX Runtime's native faults do, for every model whose file name contains
:data:`CRASH_MARK` (``crashy`` by default; set ``SPARSELOOM_TEST_CRASH_MARK`` to change it, or
to an empty string to crash on every model). Each has one CPU processor, ``crash-<point>:CPU``.
Registered by :data:`PLUGIN`, or as an entry point by :func:`crashing_distribution`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import attrs
import numpy as np

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import Processor
from tests.plugin_dists import make_distribution
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend, ProtocolOnlyLoaded

CRASH_MARK_ENV = "SPARSELOOM_TEST_CRASH_MARK"


def crashes_on(model: Any) -> bool:
    """Whether the injectors crash on ``model`` (a path whose name holds the mark)."""
    mark = os.environ.get(CRASH_MARK_ENV, "crashy")
    return not mark or mark in Path(str(model)).name


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(5)  # the signal is delivered before this returns


class CrashInCompileBackend(ProtocolOnlyBackend):
    """Sends itself SIGSEGV in ``compile`` of a marked model."""

    processors: ClassVar[tuple[Processor, ...]] = (
        Processor("crash-compile:CPU", "crash-compile", "CPU"),)

    def compile(self, model: Any, processor: Processor) -> bytes:
        if crashes_on(model):
            _segfault()
        return super().compile(model, processor)


@attrs.define(eq=False)
class MarkedLoaded(ProtocolOnlyLoaded):
    """A loaded model that remembers whether its model was marked to crash."""

    crashes: bool = False


class CrashInInferBackend(ProtocolOnlyBackend):
    """Sends itself SIGSEGV in the first ``infer`` of a marked model."""

    processors: ClassVar[tuple[Processor, ...]] = (
        Processor("crash-infer:CPU", "crash-infer", "CPU"),)

    def compile(self, model: Any, processor: Processor) -> bytes:
        marked = b"crashes" if crashes_on(model) else b""
        return marked + super().compile(model, processor)

    def load(self, compiled: bytes, processor: Processor) -> MarkedLoaded:
        base = super().load(compiled.removeprefix(b"crashes"), processor)
        return MarkedLoaded(base.processor, base.memory_bytes, base.input_names,
                            base.output_names, base._session,
                            crashes=compiled.startswith(b"crashes"))

    def infer(self, loaded: ProtocolOnlyLoaded, inputs: Any) -> dict[str, np.ndarray]:
        if getattr(loaded, "crashes", False):
            _segfault()
        return super().infer(loaded, inputs)


class HangInCompileBackend(ProtocolOnlyBackend):
    """Never returns from ``compile`` of a marked model (a native hang)."""

    processors: ClassVar[tuple[Processor, ...]] = (
        Processor("hang-compile:CPU", "hang-compile", "CPU"),)

    def compile(self, model: Any, processor: Processor) -> bytes:
        while crashes_on(model):
            time.sleep(1)
        return super().compile(model, processor)


@hookimpl
def sparseloom_register_backends(register: Any) -> None:
    register("crash-compile", CrashInCompileBackend, description="SIGSEGV in compile")
    register("crash-infer", CrashInInferBackend, description="SIGSEGV in infer")
    register("hang-compile", HangInCompileBackend, description="hangs in compile")


#: The plugin, for ``register_plugin``.
PLUGIN = SimpleNamespace(sparseloom_register_backends=sparseloom_register_backends)


def crashing_distribution(root: Path) -> Path:
    """A distribution folder declaring this module as an entry point (put ``root`` and the
    repository on ``PYTHONPATH`` and unset ``SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD``)."""
    return make_distribution(root, "sparseloom-crashing-plugins",
                             {"crashing": "tests.plugins.crashing"}, version="0.0.1")
