"""Where a profile's measurements run: in this process (the default) or on a Ray cluster.

The builder (:mod:`sparseloom.profile.builder`) hands three kinds of work per task to a
:class:`ProfileExecutor` and caches what comes back, whoever computed it:

* ``fidelity_errors``: S·(V−1) subgraph passes, each variant fed the dense prefix;
* ``measure_latency``: every subgraph on every processor, interleaved on pinned threads
  (:func:`~sparseloom.profile.measure.measure_task`); it must run on the device measured;
* ``evaluate``: exact metrics of stitched variants, prefix-shared
  (:func:`~sparseloom.zoo.evaluate.evaluate_stitched`).

Accuracies and fidelities do not depend on where they are computed, so no executor setting is
part of any cache key. :class:`InProcessExecutor` is today's behaviour; ``ray``
(:mod:`sparseloom.profile.ray_executor`) fans the work out over a Ray cluster.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError, ProfileError
from sparseloom.profile.executor_work import Activations, variant_fidelity

if TYPE_CHECKING:
    from sparseloom.core.types import Processor
    from sparseloom.profile.measure import (
        BackendResolver,
        ProfilerConfig,
        SubgraphJob,
        TaskMeasurement,
    )
    from sparseloom.profile.options import ProfileOptions
    from sparseloom.profile.rounds import Chain
    from sparseloom.zoo.evaluate import EvaluationReport
    from sparseloom.zoo.types import Zoo, ZooTask

#: Executor names ``--executor`` and ``[profile] executor`` accept.
EXECUTORS: tuple[str, ...] = ("local", "ray")
#: The environment variable naming a Ray cluster to join (``--ray-address`` wins over it).
RAY_ADDRESS_ENV = "SPARSELOOM_RAY_ADDRESS"
#: How to get Ray when it is missing.
RAY_INSTALL_HINT = "install the extra: pip install 'sparseloom[ray]'"


@runtime_checkable
class ProfileExecutor(Protocol):
    """Runs the measurements of a profile; results come back to the builder, which caches them.

    Use it as a context manager, or call :meth:`close` when done.
    """

    name: str

    def fidelity_errors(self, zoo: Zoo, activations: Activations, dense: Activations, *,
                        processor: str) -> np.ndarray:
        """The (S, V) relative output error of every subgraph against the dense one, each fed
        ``activations[j]`` (the dense prefix's), ``dense[j]`` being the dense outputs; column
        0 (the dense variant) is 0."""
        ...

    def measure_latency(self, task: str, jobs: Sequence[SubgraphJob],
                        processors: Sequence[Processor], resolve_backend: BackendResolver,
                        config: ProfilerConfig, *, seed: int,
                        tick: Callable[[int], None] | None = None,
                        chains: Sequence[Chain] = ()) -> TaskMeasurement:
        """What :func:`~sparseloom.profile.measure.measure_task` measures, on the device
        (``chains`` timed in the same rounds where all their processors are on one device;
        NaN otherwise)."""
        ...

    def evaluate(self, zoo: Zoo, task: ZooTask, choices: Sequence[tuple[int, ...]], *,
                 processor: str, **options: Any) -> EvaluationReport:
        """Exact metrics of ``choices`` (``options`` go to ``evaluate_stitched`` unchanged)."""
        ...

    def close(self) -> None:
        """Release what the executor holds (workers, a Ray instance it started)."""
        ...

    def __enter__(self) -> ProfileExecutor: ...

    def __exit__(self, *exc_info: object) -> None: ...


@attrs.define(eq=False)
class InProcessExecutor:
    """Everything in this process, one step after another (the default, ``local``).

    Attributes:
        progress: show a progress bar over the fidelity passes.
        evaluator: what computes exact metrics (default
            :func:`~sparseloom.zoo.evaluate.evaluate_stitched`).
    """

    progress: bool = False
    evaluator: Callable[..., EvaluationReport] | None = None
    name: str = attrs.field(default="local", init=False)

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def fidelity_errors(self, zoo: Zoo, activations: Activations, dense: Activations, *,
                        processor: str) -> np.ndarray:
        """See :meth:`ProfileExecutor.fidelity_errors`; one runner loads each file once."""
        from tqdm import tqdm

        from sparseloom.zoo.evaluate import SubgraphRunner

        s, v = zoo.positions, len(zoo.variants)
        error = np.zeros((s, v))
        with SubgraphRunner(processor=processor) as runner, tqdm(
                total=s * (v - 1), desc=f"{zoo.task}: fidelity", unit="subgraph",
                disable=not self.progress, leave=False) as bar:
            for j in range(s):
                for i in range(1, v):
                    error[j, i] = variant_fidelity(zoo, j, [i], activations[j], dense[j],
                                                   runner)[0]
                    bar.update(1)
        return error

    def measure_latency(self, task: str, jobs: Sequence[SubgraphJob],
                        processors: Sequence[Processor], resolve_backend: BackendResolver,
                        config: ProfilerConfig, *, seed: int,
                        tick: Callable[[int], None] | None = None,
                        chains: Sequence[Chain] = ()) -> TaskMeasurement:
        """See :meth:`ProfileExecutor.measure_latency`: all processors in this process."""
        from sparseloom.profile.measure import measure_task

        return measure_task(task, jobs, processors, resolve_backend, config, seed=seed,
                            tick=tick, chains=chains)

    def evaluate(self, zoo: Zoo, task: ZooTask, choices: Sequence[tuple[int, ...]], *,
                 processor: str, **options: Any) -> EvaluationReport:
        """See :meth:`ProfileExecutor.evaluate`."""
        from sparseloom.zoo.evaluate import evaluate_stitched

        evaluator = self.evaluator or evaluate_stitched
        return evaluator(zoo, task, choices, processor=processor, **options)

    def close(self) -> None:
        """Nothing to release."""


def resolve_ray_address(address: str | None) -> tuple[str | None, str]:
    """The Ray cluster to join and where that came from: ``address`` (``--ray-address``), else
    ``$SPARSELOOM_RAY_ADDRESS``, else ``$RAY_ADDRESS`` (set by ``ray job submit``), else
    ``None``: a new local instance."""
    for value, source in ((address, "--ray-address"), (os.environ.get(RAY_ADDRESS_ENV),
                                                      RAY_ADDRESS_ENV),
                          (os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS")):
        if value and value.strip():
            return value.strip(), source
    return None, "a new local Ray instance"


def check_reachable(address: str, source: str, timeout_s: float = 5.0) -> None:
    """Raise :class:`ProfileError` unless ``address`` (``host:port`` or ``ray://host:port``)
    accepts a TCP connection within ``timeout_s``.

    Ray itself retries an unreachable cluster for minutes before it gives up, so a typo in
    an address is caught here, in seconds. ``auto`` and ``local`` are left to Ray.
    """
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"Ray address {address!r} (from {source}) is not host:port or ray://host:port; "
            f"`ray status` on the head node prints it, e.g. 10.0.0.5:6379")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ProfileError(
            f"cannot reach the Ray cluster at {address} (from {source}): "
            f"{error.strerror or error}; start its head node with `ray start --head` (see "
            f"docs/profile.md, 'Beyond one machine: Ray'), fix the address, or profile in "
            f"this process with --executor local") from None


def get_executor(name: str = "local", *, address: str | None = None,
                 resources: Mapping[str, str] | None = None,
                 progress: bool = False) -> ProfileExecutor:
    """The executor called ``name`` (``local`` or ``ray``).

    :param address: the Ray cluster to join (see :func:`resolve_ray_address`); checked to be
        reachable now, joined when the first work is sent.
    :param resources: ``ray`` only: processor name or spec → the Ray custom resource a node
        advertises (``{"ov:NPU": "soc-npu"}``); latency is measured by an actor on such a node.
    :param progress: show progress bars.
    :raises ConfigError: an unknown name, ``ray`` without Ray installed, a malformed address.
    :raises ProfileError: an address that accepts no connection.
    """
    if name == "local":
        return InProcessExecutor(progress=progress)
    if name != "ray":
        raise ConfigError(
            f"unknown profile executor {name!r} (from --executor or the workload file's "
            f"[profile] executor); known: {', '.join(EXECUTORS)}")
    try:
        import ray  # noqa: F401  (only to say clearly that it is missing)
    except ImportError:
        raise ConfigError(f"--executor ray needs Ray, which is not installed; "
                          f"{RAY_INSTALL_HINT}") from None
    from sparseloom.profile.ray_executor import RayExecutor

    resolved, source = resolve_ray_address(address)
    if resolved is not None:
        check_reachable(resolved, source)
    return RayExecutor(address=resolved, latency_resources=dict(resources or {}),
                       progress=progress)


def executor_for(options: ProfileOptions, progress: bool) -> ProfileExecutor:
    """The executor ``options`` ask for (``executor``, ``ray_address``, ``ray_resources``)."""
    return get_executor(options.executor, address=options.ray_address,
                        resources=options.ray_resources, progress=progress)
