"""Test doubles: a third-party plugin that fails on purpose at each call into plugin code.

Every implementation here raises a plain ``RuntimeError("injected <point> failure")`` (not a
sparseloom error) at one point, as a buggy plugin would:

* backends ``fail-devices``, ``fail-compile``, ``fail-load``, ``fail-infer`` (each with one
  CPU processor, ``fail-<point>:CPU``), otherwise ONNX Runtime through the documented
  protocols;
* policies ``fail-plan`` (its ``plan`` raises) and ``fail-feedback`` (plans like
  ``sparseloom``; its ``on_feedback`` raises);
* accuracy estimators ``fail-fit`` and ``fail-predict``;
* a policy factory that raises, ``fail-factory``, and a workload ``fail-workload`` whose
  factory raises;
* a compressor ``failcompress`` whose ``compress`` raises;
* :data:`OBSERVER`, a separate plugin whose ``sparseloom_slo_violation`` and
  ``sparseloom_profile_built`` observers raise.

:func:`failing_distribution` writes a distribution declaring both as entry points, for
subprocess tests of the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO, Plan, Processor
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from tests.plugin_dists import make_distribution
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend

DISTRIBUTION = "sparseloom-failing-plugins"
BACKEND_POINTS = ("devices", "compile", "load", "infer")


def injected(point: str) -> RuntimeError:
    """The error every double raises at ``point``."""
    return RuntimeError(f"injected {point} failure")


class FailingBackend(ProtocolOnlyBackend):
    """ONNX Runtime that raises in :attr:`fails_in` (``devices``, ``compile``, ``load`` or
    ``infer``)."""

    fails_in: ClassVar[str] = ""

    def devices(self) -> list[Processor]:
        if self.fails_in == "devices":
            raise injected("devices")
        return super().devices()

    def compile(self, model: Any, processor: Processor) -> bytes:
        if self.fails_in == "compile":
            raise injected("compile")
        return super().compile(model, processor)

    def load(self, compiled: bytes, processor: Processor) -> Any:
        if self.fails_in == "load":
            raise injected("load")
        return super().load(compiled, processor)

    def infer(self, loaded: Any, inputs: Any) -> dict[str, np.ndarray]:
        if self.fails_in == "infer":
            raise injected("infer")
        return super().infer(loaded, inputs)


def failing_backend(point: str) -> type[FailingBackend]:
    """The backend class ``fail-<point>`` with one processor, ``fail-<point>:CPU``."""
    name = f"fail-{point}"
    return type(f"Fail{point.title()}Backend", (FailingBackend,), {
        "fails_in": point, "processors": (Processor(f"{name}:CPU", name, "CPU"),)})


class FailingPlanPolicy:
    """A policy written to the protocol whose ``plan`` raises."""

    def plan(self, tasks: Sequence[str], profile: Any, processors: Sequence[Processor],
             slos: Mapping[str, SLO]) -> Plan:
        raise injected("plan")


class FailingFeedbackPolicy(SparseLoomPolicy):
    """The ``sparseloom`` policy, except that ``on_feedback`` raises."""

    def on_feedback(self, observations: Any) -> Plan | None:
        raise injected("on_feedback")


class FailingFitEstimator:
    """An accuracy estimator whose ``fit`` raises."""

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        raise injected("fit")

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.full(np.asarray(features).shape[0], 0.5)


class FailingPredictEstimator(FailingFitEstimator):
    """An accuracy estimator whose ``predict`` raises."""

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        return None

    def predict(self, features: np.ndarray) -> np.ndarray:
        raise injected("predict")


class FailingCompressor:
    """A level-less compressor whose ``compress`` raises."""

    kind = "int8"
    default_levels: tuple[float, ...] = ()

    def compress(self, subgraph: Any, level: float, calibration: Any) -> Any:
        raise injected("compress")


def failing_factory() -> Any:
    """A policy factory that raises."""
    raise injected("factory")


@hookimpl
def sparseloom_register_backends(register: Any) -> None:
    for point in BACKEND_POINTS:
        register(f"fail-{point}", failing_backend(point), description=f"fails in {point}")


@hookimpl
def sparseloom_register_policies(register: Any) -> None:
    register("fail-plan", FailingPlanPolicy, description="plan() raises")
    register("fail-feedback", FailingFeedbackPolicy, description="on_feedback() raises")
    register("fail-factory", failing_factory, description="its factory raises")


@hookimpl
def sparseloom_register_compressors(register: Any) -> None:
    register("failcompress", FailingCompressor, description="compress() raises")


@hookimpl
def sparseloom_register_workloads(register: Any) -> None:
    register("fail-workload", failing_factory, description="its factory raises")


@hookimpl
def sparseloom_register_estimators(register: Any) -> None:
    register("fail-fit", FailingFitEstimator, capabilities=("accuracy",))
    register("fail-predict", FailingPredictEstimator, capabilities=("accuracy",))


def _raise_on_violation(task: str, latency_ms: float, slo_latency_ms: float) -> None:
    raise injected("observer")


def _raise_on_profile(workload: str, profile: Any) -> None:
    raise injected("observer")


#: A plugin of observers that raise at every call.
OBSERVER = SimpleNamespace(sparseloom_slo_violation=hookimpl(_raise_on_violation),
                           sparseloom_profile_built=hookimpl(_raise_on_profile))


def failing_distribution(root: Path) -> Path:
    """A distribution folder declaring this module and :data:`OBSERVER` as entry points.

    Put ``root`` and the repository on ``PYTHONPATH`` to load it in a subprocess.
    """
    return make_distribution(root, DISTRIBUTION, {
        "failing": "tests.plugins.failing",
        "failing-observer": "tests.plugins.failing:OBSERVER",
    }, version="6.6.6")
