"""What a profile is built from: :class:`ProfileOptions`, the processors, the zoos, the estimators.

Shared by :func:`~sparseloom.profile.builder.build_profile`, validation and re-profiling.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import ProfileError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import Processor
from sparseloom.profile.features import DEFAULT_FEATURE_SET, FEATURE_SETS
from sparseloom.profile.measure import ProfilerConfig
from sparseloom.workload.arguments import instance_field, names_field, number_field

__all__ = ["ProfileOptions", "check_estimator", "processor_key", "profiling_inputs",
           "resolve_processors", "workload_zoos", "zoo_for"]


def _optional_names(values: Sequence[str] | None) -> Any:
    if values is None or isinstance(values, str):  # a lone string: refused by the validator
        return values
    return tuple(str(v) for v in values)


@attrs.frozen
class ProfileOptions:
    """What to build and how.

    Attributes:
        accuracy_estimator: registered estimator name with the ``accuracy`` capability.
        latency_estimator: registered estimator name with the ``latency`` capability.
        samples: N, stitched variants measured exactly per task (``None``: the default of
            :func:`~sparseloom.profile.features.default_sample_count`).
        feature_set: ``extended`` (default) or ``paper``.
        config: how latencies are measured.
        subgraphs: S (``None``: one per processor).
        seed: seed of the sampled stitched variants and of the estimators.
        evaluation_processor: where accuracies and fidelities are measured.
        variants: the zoo's variant names (``None``: the workload file's ``variants``, else
            the default list), as ``zoo build --variants`` takes them.
        compressor_options: keyword options per compressor (``None``: the workload file's
            ``[compressors.<name>]`` tables).
        sample_rows: measure the N exact samples on a stratified subset of this many eval rows
            (:func:`~sparseloom.workload.subset.stratified_rows`, seeded by ``seed``);
            ``None``: every eval row. The error it adds is recorded per task in
            ``meta["sample_rows"]``.
        executor, ray_address, ray_resources: where measurements run, ``local`` or ``ray``,
            and how (:func:`~sparseloom.profile.executors.get_executor`); in no cache key.
    """

    accuracy_estimator: str = attrs.field(
        default="xgboost", validator=instance_field(str, "a registered estimator name"))
    latency_estimator: str = attrs.field(
        default="additive-fitted", validator=instance_field(str, "a registered estimator name"))
    samples: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    feature_set: str = attrs.field(default=DEFAULT_FEATURE_SET,
                                   validator=attrs.validators.in_(FEATURE_SETS))
    config: ProfilerConfig = attrs.field(factory=ProfilerConfig)
    subgraphs: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    seed: int = attrs.field(default=0, validator=number_field(low=0, integer=True))
    evaluation_processor: str = "ort:CPU"
    variants: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_names,
                                                   validator=names_field)
    compressor_options: Mapping[str, Mapping[str, Any]] | None = attrs.field(
        default=None, hash=False)
    sample_rows: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    executor: str = "local"
    ray_address: str | None = None
    ray_resources: Mapping[str, str] | None = attrs.field(default=None, hash=False)

    def for_workload(self, workload: Any) -> ProfileOptions:
        """These options with the zoo settings the workload file gives where none are set."""
        return attrs.evolve(
            self,
            variants=self.variants or tuple(getattr(workload, "variants", ()) or ()) or None,
            compressor_options=(self.compressor_options if self.compressor_options is not None
                                else dict(getattr(workload, "compressor_options", {}) or {})))


def check_estimator(name: str, capability: str) -> None:
    """Raise :class:`ProfileError` unless ``name`` is a registered ``capability`` estimator."""
    registration = get_registry().get_estimator(name)  # UnknownNameError lists the known ones
    if capability not in registration.capabilities:
        usable = [r.name for r in get_registry().estimators(capability)]
        raise ProfileError(
            f"estimator {name!r} cannot estimate {capability} (its capabilities: "
            f"{', '.join(registration.capabilities) or 'none'}); {capability} estimators: "
            f"{', '.join(usable) or 'none'}"
        )


def resolve_processors(specs: Sequence[str | Processor] | None, workload: Any) -> list[Processor]:
    """The processors to profile: ``specs``, else the workload's, else the default set."""
    from sparseloom.core.processors import default_processors, get_processor

    chosen = list(specs or getattr(workload, "processors", ()) or [])
    processors = [get_processor(s) for s in chosen] if chosen else default_processors()
    if not processors:
        raise ProfileError("no processor is available to profile on; run `sparseloom devices`")
    return processors


def processor_key(processor: Processor) -> dict[str, Any]:
    """What of a processor changes its measurements (part of the cache key)."""
    from sparseloom.core.processors import format_processor_spec

    return {"spec": format_processor_spec(processor), "device": processor.full_name}


def zoo_for(task: Any, processors: Sequence[Processor], options: ProfileOptions,
            progress: bool) -> Any:
    """The task's zoo with S = ``options.subgraphs`` (default: one position per processor)."""
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions, default_subgraphs

    zoo_options = ZooOptions(subgraphs=options.subgraphs or default_subgraphs(processors),
                             variants=options.variants,
                             compressor_options=options.compressor_options or {},
                             evaluation_processor=options.evaluation_processor)
    return build_zoo(task, zoo_options, progress=progress)


def profiling_inputs(
    workload: Any, processors: Sequence[str | Processor] | None,
    options: ProfileOptions | None, progress: bool,
) -> tuple[Any, list[Processor], ProfileOptions]:
    """What building, validating or refreshing a profile starts from: the workload (built or
    loaded from the cache when given by name or path), the processors
    (:func:`resolve_processors`) and ``options`` (default :class:`ProfileOptions`) with the
    workload file's zoo settings."""
    from sparseloom.workload.load import load_workload

    loaded = (load_workload(workload, progress=progress)
              if isinstance(workload, str | os.PathLike) else workload)
    chosen = resolve_processors(processors, loaded)
    return loaded, chosen, (options or ProfileOptions()).for_workload(loaded)


def workload_zoos(workload: Any, processors: Sequence[Processor], options: ProfileOptions,
                  zoos: Mapping[str, Any] | None, progress: bool) -> dict[str, Any]:
    """Each task's zoo by task name: the one ``zoos`` gives, else :func:`zoo_for`'s."""
    return {task.name: (zoos or {}).get(task.name) or zoo_for(task, processors, options, progress)
            for task in workload.tasks}
