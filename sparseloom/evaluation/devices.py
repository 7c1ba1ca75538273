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
from sparseloom.profile.table import ProfileTable, TaskProfile


@attrs.frozen
class DeviceProcessor:
    """One simulated processor: latency factors by kind, transfer cost, memory, source."""

    name: str
    scale: dict[str, float] = attrs.field(converter=dict)
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
    processors: tuple[DeviceProcessor, ...] = attrs.field(converter=tuple)
    description: str = ""
    path: str = ""


def bundled_devices() -> list[str]:
    """Names of the device files shipped with sparseloom."""
    folder = resources.files("sparseloom.evaluation") / "devices"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir()
                  if p.name.endswith(".toml"))


def load_device_file(name_or_path: str | os.PathLike[str]) -> DeviceFile:
    """Read a device file: a path, or the name of a bundled one (:func:`bundled_devices`).

    :raises SimulationError: the file is missing, does not parse or lacks a field.
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
        processors = tuple(DeviceProcessor(
            str(p["name"]), {str(k): float(v) for k, v in p.get("scale", {}).items()},
            float(p.get("transfer_ms", 0.0)), int(p.get("memory_bytes", 0)),
            str(p.get("source", ""))) for p in document["processors"])
        device = DeviceFile(str(document.get("name", path.stem)), str(document["reference"]),
                            processors, str(document.get("description", "")), str(path))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
        raise SimulationError(f"cannot read device file {path}: {error!r}; it needs `reference` "
                              f"and [[processors]] tables with `name` and [processors.scale] "
                              f"(see docs/evaluation.md)") from error
    if not processors:
        raise SimulationError(f"device file {path} lists no [[processors]]")
    return device


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
            latency_median_ms=scaled(task.latency_median_ms))
    meta = dict(profile.meta) | {"simulated_device": device.name, "device_file": device.path,
                                 "reference_processor": device.reference}
    return ProfileTable(f"{profile.workload}@{device.name}", names, tasks, meta)
