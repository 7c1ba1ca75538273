"""Device files: SoCs that are not at hand, described by scale factors over a measured processor.

A device file (TOML, see ``docs/evaluation.md``) names a ``reference`` processor of a measured
profile and lists target processors, each with a latency factor per compressor kind, a
transfer cost and a memory size, and states the source of its numbers. :func:`apply_device`
turns a measured profile into the profile the SoC would have: subgraph latency (and compile /
load time) = reference × factor of the variant's kind (a compound kind such as
``unstructured+int8`` multiplies its parts' factors); a hand-off between two different target
processors costs the sum of their transfer costs.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path

import attrs
import numpy as np

from sparseloom.core.errors import SimulationError
from sparseloom.core.types import as_dict, as_tuple
from sparseloom.profile.table import ProfileTable, TaskProfile


@attrs.frozen
class DeviceProcessor:
    """One simulated processor: latency factors by kind, transfer cost, memory, source."""

    name: str
    scale: dict[str, float] = attrs.field(converter=as_dict)
    transfer_ms: float = 0.0
    memory_bytes: int = 0
    source: str = ""

    def factor(self, kind: str) -> float:
        """Latency factor of a compressor kind (compound kinds multiply their parts)."""
        if kind in self.scale:
            return float(self.scale[kind])
        parts = kind.split("+")
        if len(parts) > 1:
            return float(np.prod([self.factor(part) for part in parts]))
        return float(self.scale.get("default", 1.0))


@attrs.frozen
class DeviceFile:
    """A SoC for the simulator: its processors and the measured processor they scale."""

    name: str
    reference: str
    processors: tuple[DeviceProcessor, ...] = attrs.field(converter=as_tuple)
    description: str = ""
    path: str = ""


def bundled_devices() -> list[str]:
    """Names of the device files shipped with sparseloom."""
    folder = resources.files("sparseloom.evaluation") / "devices"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir()
                  if p.name.endswith(".toml"))


#: The keys a device file, and each of its [[processors]], may hold.
FILE_KEYS = ("name", "description", "reference", "processors")
PROCESSOR_KEYS = ("name", "scale", "transfer_ms", "memory_bytes", "source")
#: A scale factor is a latency ratio to the measured reference processor; one outside
#: [1/1000, 1000] is a typo (a factor of 1e-6 reported 20,000 req/s for a 2 ms model).
SCALE_RANGE = (1e-3, 1e3)


def known_kinds() -> list[str]:
    """The scale keys a device file may use: ``default``, ``dense`` and every registered
    compressor's kind (a compound kind such as ``unstructured+int8`` joins them with ``+``)."""
    from sparseloom.core.registry import get_registry

    kinds = {"default", "dense"}
    for registration in get_registry().compressors():
        kind = getattr(registration.factory, "kind", None)
        kinds.add(kind if isinstance(kind, str) else registration.name)
    return sorted(kinds)


def _number(value: object, where: str, key: str, low: float, high: float, fix: str) -> float:
    """``value`` as a float in [low, high]; a :class:`SimulationError` naming ``where``/key."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimulationError(f"{where}: {key} must be a number, got {value!r}; {fix}")
    number = float(value)
    if not low <= number <= high:  # NaN fails too
        raise SimulationError(f"{where}: {key} = {value!r} is outside [{low:g}, {high:g}]; "
                              f"{fix}")
    return number


def _unknown_keys(table: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise SimulationError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: "
                              f"{', '.join(allowed)} (see docs/evaluation.md)")


def _device_processor(table: object, index: int, path: Path, kinds: list[str],
                      seen: set[str]) -> DeviceProcessor:
    where = f"device file {path}: [[processors]] #{index + 1}"
    if not isinstance(table, dict):
        raise SimulationError(f"{where} must be a table, got {table!r}")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SimulationError(f"{where}: `name` must be a non-empty string, got {name!r}")
    where = f"device file {path}: processor {name!r}"
    if name in seen:
        raise SimulationError(f"{where} is listed twice; name each processor once")
    seen.add(name)
    _unknown_keys(table, PROCESSOR_KEYS, where)
    scale = table.get("scale", {})
    if not isinstance(scale, dict):
        raise SimulationError(f"{where}: scale must be a table [processors.scale] of factors "
                              f"by kind, got {scale!r}")
    factors = {}
    for kind, value in scale.items():
        unknown = [part for part in kind.split("+") if part not in kinds]
        if unknown:
            raise SimulationError(f"{where}: scale key {kind!r} is not a compressor kind; "
                                  f"known: {', '.join(kinds)} (join kinds with '+')")
        factors[kind] = _number(value, where, f"scale.{kind}", *SCALE_RANGE,
                                "give the latency ratio to the reference processor (0.5 = "
                                "twice as fast)")
    transfer = _number(table.get("transfer_ms", 0.0), where, "transfer_ms", 0.0, 1e4,
                       "give the hand-off cost in milliseconds, 0 or more")
    memory = table.get("memory_bytes", 0)
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise SimulationError(f"{where}: memory_bytes must be a whole number of bytes, 0 or "
                              f"more, got {memory!r}")
    source = table.get("source", "")
    if not isinstance(source, str):
        raise SimulationError(f"{where}: source must be a string, got {source!r}")
    return DeviceProcessor(name, factors, transfer, memory, source)


def load_device_file(name_or_path: str | os.PathLike[str]) -> DeviceFile:
    """Read a device file: a path, or the name of a bundled one (:func:`bundled_devices`).

    Every key is checked on read: known keys only, scale factors in :data:`SCALE_RANGE` by
    known compressor kinds, finite transfer costs and memory of 0 or more, each processor
    named once.

    :raises SimulationError: the file is missing or does not parse, or a value is out of its
        range (naming the file, the processor and the key).
    """
    path = Path(name_or_path)
    if not path.exists():
        bundled = resources.files("sparseloom.evaluation") / "devices" / f"{name_or_path}.toml"
        if not bundled.is_file():
            raise SimulationError(f"device file {str(name_or_path)!r} not found; give a path or "
                                  f"one of the bundled: {', '.join(bundled_devices())}")
        path = Path(str(bundled))
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SimulationError(f"cannot read device file {path}: {error}; it needs `reference` "
                              f"and [[processors]] tables with `name` and [processors.scale] "
                              f"(see docs/evaluation.md)") from error
    _unknown_keys(document, FILE_KEYS, f"device file {path}")
    reference = document.get("reference")
    if not isinstance(reference, str) or not reference.strip():
        raise SimulationError(f"device file {path}: `reference` must name the measured "
                              f"processor to scale (e.g. \"ov:CPU\"), got {reference!r}")
    tables = document.get("processors")
    if not isinstance(tables, list) or not tables:
        raise SimulationError(f"device file {path} lists no [[processors]]")
    kinds, seen = known_kinds(), set[str]()
    processors = tuple(_device_processor(t, i, path, kinds, seen) for i, t in enumerate(tables))
    for key in ("name", "description"):
        if not isinstance(document.get(key, ""), str):
            raise SimulationError(f"device file {path}: {key} must be a string")
    return DeviceFile(str(document.get("name", path.stem)), reference, processors,
                      str(document.get("description", "")), str(path))


def apply_device(profile: ProfileTable, device: DeviceFile) -> ProfileTable:
    """The profile ``profile`` would have on ``device`` (see the module doc).

    :raises SimulationError: the device's reference processor is not in the profile.
    """
    if device.reference not in profile.processors:
        raise SimulationError(f"device {device.name!r} scales processor {device.reference!r}, "
                              f"which the profile of {profile.workload!r} does not hold "
                              f"({', '.join(profile.processors)}); profile it, or edit "
                              f"`reference` in {device.path or 'the device file'}")
    ref = profile.processors.index(device.reference)
    names = tuple(p.name for p in device.processors)
    transfer = np.array([p.transfer_ms for p in device.processors])
    handoff_pair = transfer[:, None] + transfer[None, :]
    np.fill_diagonal(handoff_pair, 0.0)
    tasks = {}
    for name, task in profile.tasks.items():
        factors = np.array([[p.factor(kind) for p in device.processors]
                            for kind in task.variant_kinds])  # (V, P')
        s = task.n_positions

        def scaled(array: np.ndarray, factors: np.ndarray = factors) -> np.ndarray:
            return array[:, :, ref][:, :, None] * factors[None, :, :]

        tasks[name] = TaskProfile(
            task=name, metric=task.metric, variant_names=task.variant_names,
            variant_kinds=task.variant_kinds, variant_levels=task.variant_levels,
            source_accuracy=task.source_accuracy, latency_ms=scaled(task.latency_ms),
            latency_spread_ms=scaled(task.latency_spread_ms),
            compile_ms=scaled(task.compile_ms), load_ms=scaled(task.load_ms),
            memory_bytes=np.repeat(task.memory_bytes[:, :, ref][:, :, None], len(names), 2),
            handoff_ms=np.repeat(handoff_pair[None], max(s - 1, 0), 0),
            accuracy_estimated=task.accuracy_estimated,
            accuracy_measured=task.accuracy_measured, fidelity_error=task.fidelity_error,
            latency_median_ms=scaled(task.latency_median_ms),
            latency_cold_ms=scaled(task.latency_cold_ms))
    meta = dict(profile.meta) | {"simulated_device": device.name, "device_file": device.path,
                                 "reference_processor": device.reference}
    return ProfileTable(f"{profile.workload}@{device.name}", names, tasks, meta)
