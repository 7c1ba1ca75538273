"""Every hook sparseloom calls, documented: who implements it, when it runs, what it returns.

Built-in plugins implement these hooks exactly as third-party plugins do. Implement a hook with
the :data:`hookimpl` marker::

    from sparseloom.core.hookspecs import hookimpl

    @hookimpl
    def sparseloom_register_policies(register):
        register("greedy", GreedyPolicy, description="lowest-latency variant that meets the SLO")

A registration hook receives a ``register`` callback with the signature
``register(name, factory, *, description="", capabilities=())``. ``factory`` is called with no
arguments (or with the keyword options a caller documents) to build the implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sparseloom.core.types import Processor

PROJECT_NAME = "sparseloom"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class RegisterFn(Protocol):
    """The ``register`` callback a registration hook receives."""

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        description: str = "",
        capabilities: Iterable[str] = (),
    ) -> None: ...


# ---------------------------------------------------------------------------------------------
# Registration hooks: called once per plugin when the registry is built.
# ---------------------------------------------------------------------------------------------


@hookspec
def sparseloom_register_backends(register: RegisterFn) -> None:
    """Register inference backends.

    Implemented by: plugins that bring an inference runtime (OpenVINO, ONNX Runtime, ...).
    Called: once, when the registry is built.

    :param register: call ``register(name, factory, description=..., capabilities=...)`` once
        per backend. ``factory()`` returns an object implementing
        :class:`sparseloom.core.protocols.Backend`. ``name`` prefixes its processors
        (``ov`` gives ``ov:CPU``).
    :returns: nothing; registrations go through ``register``.
    """


@hookspec
def sparseloom_register_compressors(register: RegisterFn) -> None:
    """Register subgraph compressors.

    Implemented by: plugins that prune or quantize ONNX subgraphs.
    Called: once, when the registry is built.

    :param register: call once per compressor. ``factory()`` returns an object implementing
        :class:`sparseloom.core.protocols.Compressor`; ``capabilities`` should hold its kind
        (``unstructured``, ``structured``, ``int8`` or ``fp16``).
    :returns: nothing; registrations go through ``register``.
    """


@hookspec
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register accuracy and latency estimators.

    Implemented by: plugins that predict the metric or the latency of stitched variants.
    Called: once, when the registry is built.

    :param register: call once per estimator; ``capabilities`` must contain ``"accuracy"``
        (factory builds an :class:`~sparseloom.core.protocols.AccuracyEstimator`) or
        ``"latency"`` (a :class:`~sparseloom.core.protocols.LatencyEstimator`).
    :returns: nothing; registrations go through ``register``.
    """


@hookspec
def sparseloom_register_policies(register: RegisterFn) -> None:
    """Register placement policies.

    Implemented by: plugins that choose processor orders and variants (SparseLoom, baselines).
    Called: once, when the registry is built.

    :param register: call once per policy; ``factory()`` returns an object implementing
        :class:`sparseloom.core.protocols.PlacementPolicy`.
    :returns: nothing; registrations go through ``register``.
    """


@hookspec
def sparseloom_register_workloads(register: RegisterFn) -> None:
    """Register bundled workloads (sets of tasks with models, data and SLOs).

    Implemented by: plugins that ship tasks; users with their own files need no plugin, a
    workload TOML file is enough.
    Called: once, when the registry is built.

    :param register: call once per workload; ``factory()`` returns the workload definition
        described in ``docs/workloads.md``.
    :returns: nothing; registrations go through ``register``.
    """


# ---------------------------------------------------------------------------------------------
# Lifecycle hooks: observers. Every implementation is called; return values are ignored.
# ---------------------------------------------------------------------------------------------


@hookspec
def sparseloom_profile_built(workload: str, profile: Any) -> None:
    """Observe a freshly built profile table.

    Implemented by: plugins that export, log or check profiles.
    Called: after the profiler has measured and estimated a workload, before it is cached.

    :param workload: the workload name.
    :param profile: the profile table (see ``docs/profile.md``).
    :returns: nothing.
    """


@hookspec
def sparseloom_slo_violation(task: str, latency_ms: float, slo_latency_ms: float) -> None:
    """Observe a request that missed its latency SLO.

    Implemented by: plugins that log, alert or collect violation statistics.
    Called: by the runtime for every request whose end-to-end latency exceeds the SLO, before
    the placement policy is asked for a new plan.

    :param task: the task name.
    :param latency_ms: the measured end-to-end latency of the request.
    :param slo_latency_ms: the task's latency SLO.
    :returns: nothing.
    """


@hookspec
def sparseloom_backend_error(processor: Processor, operation: str, error: BaseException) -> None:
    """Observe a backend failure.

    Implemented by: plugins that log or count device errors.
    Called: whenever a backend raises while compiling, loading or running a model, before the
    error is raised or reported to the caller.

    :param processor: the processor on which it failed.
    :param operation: ``compile``, ``load`` or ``infer``.
    :param error: the exception raised.
    :returns: nothing.
    """
