"""What a zoo is built from: its options record, variant list and the hash of its config.

:class:`ZooOptions` is the one place a zoo's settings live; :func:`~sparseloom.zoo.build.build_zoo`
and :func:`~sparseloom.zoo.load.load_zoo` both take it, and its :func:`zoo_config` (everything the
zoo's content depends on) hashes into the zoo's cache directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core import __version__
from sparseloom.core.cache import cache_dir, file_hash
from sparseloom.core.errors import ConfigError
from sparseloom.workload.arguments import check_names, names_converter, names_field, number_field
from sparseloom.zoo.manifest import ZOO_FORMAT
from sparseloom.zoo.types import VariantSpec, ZooTask
from sparseloom.zoo.variants import DEFAULT_VARIANTS, create_compressor, resolve_variants

__all__ = [
    "DEFAULT_VARIANTS",
    "MANIFEST",
    "ZooOptions",
    "create_compressor",
    "default_subgraphs",
    "resolve_variants",
    "workload_processors",
    "zoo_config",
    "zoo_directory",
    "zoo_options_for",
]

#: The zoo's manifest file name inside its directory.
MANIFEST = "manifest.json"

#: Rows per calibration batch handed to compressors.
CALIBRATION_BATCH = 32
#: Rows of calibration data used to trace shapes, costs and check the partition.
SAMPLE_ROWS = 4



def workload_processors(workload: Any) -> list[str]:
    """The processor names a workload is for: its own list, else the available default set."""
    if getattr(workload, "processors", None):
        return list(workload.processors)
    from sparseloom.core.processors import default_processors

    return [p.name for p in default_processors()]


def default_subgraphs(processors: Sequence[Any] | None = None) -> int:
    """``S`` by default: one position per processor (given, else the available default set)."""
    if processors:
        return len(processors)
    from sparseloom.core.processors import default_processors

    return max(1, len(default_processors()))


def _variants(values: Iterable[str | VariantSpec] | None) -> Any:
    # A lone string stays one, for the validator to refuse (not read letter by letter).
    return values if values is None or isinstance(values, str) else tuple(values)


def _variant_items(instance: Any, attribute: Any, value: Any) -> None:
    check_names("ZooOptions", attribute.name, value, items=(str, VariantSpec))


def _strings(values: Iterable[str] | None) -> tuple[str, ...]:
    return names_converter(values) if values else ()


def _option_tables(tables: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {str(name): dict(options) for name, options in (tables or {}).items()}


@attrs.frozen
class ZooOptions:
    """How a task's zoo is built; together with the task it decides the zoo's cache key.

    Attributes:
        subgraphs: ``S``; default: one position per processor (:func:`default_subgraphs`).
        variants: variant names/specs, dense first; default :data:`DEFAULT_VARIANTS`.
        processors: the processors the zoo is meant for (default S; ``adms`` op support).
        cost: partition balance: ``flops`` or ``latency``.
        mode: ``balanced`` or ``adms`` (see :mod:`sparseloom.zoo.partition`).
        min_fraction: ``adms`` mode's smallest piece, as a fraction of the total cost.
        evaluation_processor: where the variants' metrics are measured.
        compressor_options: keyword options per compressor name, passed to its factory.
    """

    subgraphs: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    variants: tuple[str | VariantSpec, ...] | None = attrs.field(
        default=None, converter=_variants, validator=_variant_items)
    processors: tuple[str, ...] = attrs.field(default=(), converter=_strings,
                                              validator=names_field)
    cost: str = "flops"
    mode: str = "balanced"
    min_fraction: float = attrs.field(default=0.05, validator=number_field(low=0, high=1))
    evaluation_processor: str = "ort:CPU"
    compressor_options: Mapping[str, Mapping[str, Any]] = attrs.field(
        factory=dict, converter=_option_tables, hash=False)

    def count(self) -> int:
        """``S``: :attr:`subgraphs`, else the default for :attr:`processors`.

        :raises ConfigError: ``subgraphs`` is not a positive integer.
        """
        count = default_subgraphs(self.processors) if self.subgraphs is None else self.subgraphs
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(
                f"the number of subgraphs must be a positive integer, got {count!r}"
            )
        return count

    def config(self, task: ZooTask) -> dict[str, Any]:
        """The zoo's full config for ``task`` (see :func:`zoo_config`)."""
        return zoo_config(
            task, self.count(), self.resolved_variants(), cost=self.cost, mode=self.mode,
            min_fraction=self.min_fraction, processors=self.processors,
            evaluation_processor=self.evaluation_processor,
            compressor_options=self.compressor_options,
        )

    def resolved_variants(self) -> list[VariantSpec]:
        """:attr:`variants` checked and expanded (see :func:`resolve_variants`)."""
        return resolve_variants(self.variants, self.compressor_options)


def zoo_options_for(
    workload: Any,
    subgraphs: int | None = None,
    variants: Sequence[str | VariantSpec] | None = None,
    **settings: Any,
) -> ZooOptions:
    """The zoo options every command uses for ``workload``: the given S and variants, else
    the workload file's ``variants``; its ``[compressors.<name>]`` options; its processors.

    :param settings: other :class:`ZooOptions` fields (``cost``, ``mode``, ...).
    """
    chosen = variants or getattr(workload, "variants", None) or None
    return ZooOptions(subgraphs=subgraphs, variants=chosen,
                      processors=workload_processors(workload),
                      compressor_options=getattr(workload, "compressor_options", None) or {},
                      **settings)


def zoo_config(
    task: ZooTask,
    subgraphs: int,
    variants: Sequence[VariantSpec],
    *,
    cost: str,
    mode: str,
    min_fraction: float,
    processors: Sequence[str],
    evaluation_processor: str,
    compressor_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything a zoo's content depends on; its hash names the zoo directory."""
    from sparseloom.core.registry import get_registry

    registry = get_registry()
    compressors: dict[str, Any] = {}
    for spec in variants:
        for name, _ in spec.steps:
            registration = registry.get_compressor(name)
            factory = registration.factory
            compressors[name] = {
                "factory": f"{getattr(factory, '__module__', '?')}."
                           f"{getattr(factory, '__qualname__', repr(factory))}",
                "distribution": registration.distribution,
                "version": registration.version,
            }
            options = (compressor_options or {}).get(name)
            if options:  # only when given, so zoos built without options keep their hash
                compressors[name]["options"] = dict(options)
            key = compressor_cache_key(factory, options or {})
            if key:  # what the output depends on beyond the options (the CPU, a revision)
                compressors[name]["cache_key"] = key
    return {
        "format": ZOO_FORMAT,
        "sparseloom": __version__,
        "task": task.name,
        "dense_sha256": file_hash(task.model_path),
        "subgraphs": subgraphs,
        "variants": [spec.name for spec in variants],
        "compressors": compressors,
        "partition": {"cost": cost, "mode": mode, "min_fraction": min_fraction,
                      "processors": list(processors) if mode == "adms" else []},
        "calibration_sha256": arrays_hash(task.calibration_inputs),
        "eval_sha256": arrays_hash(task.eval_inputs),
        "evaluation_processor": evaluation_processor,
    }


def compressor_cache_key(factory: Any, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The compressor's ``cache_key()``, when it defines one: what its output depends on
    beyond its options (the CPU's int8 instructions, a revision of its method), so that a
    zoo built before or elsewhere is not reused."""
    key = getattr(factory, "cache_key", None)
    if key is None:
        return None
    try:
        return dict(factory(**options).cache_key())
    except Exception:  # bad options: the zoo build reports them when it makes the compressor
        return None


def arrays_hash(arrays: Mapping[str, np.ndarray]) -> str:
    """A SHA-256 hex digest of named arrays: names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def zoo_directory(key: str) -> Path:
    """Where the zoo with config hash ``key`` lives."""
    return cache_dir() / "zoo" / key
