"""The records of a built subgraph zoo: :class:`Zoo` and what it lists.

:class:`Zoo` is read from a zoo directory's ``manifest.json`` (see :mod:`sparseloom.zoo.build`
for building and loading, ``docs/zoo.md`` for the format).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np

from sparseloom.core.cache import file_hash
from sparseloom.core.errors import ConfigError, ZooError, ZooNotBuiltError
from sparseloom.core.protocols import LEVEL_SUFFIX
from sparseloom.core.types import StitchedVariant
from sparseloom.zoo.graph import as_tuple

__all__ = [
    "BoundaryInfo",
    "SubgraphInfo",
    "VariantInfo",
    "VariantSpec",
    "Zoo",
    "ZooNotBuiltError",
    "ZooTask",
]


class ZooTask(Protocol):
    """What the zoo needs from a task (:class:`sparseloom.workload.task.Task` provides it)."""

    # Read-only members (properties): a frozen Task satisfies them; a protocol of plain
    # attributes would ask for settable ones.
    @property
    def name(self) -> str:
        """The task name."""
        ...

    @property
    def model_path(self) -> Any:
        """The dense ONNX model's path."""
        ...

    @property
    def eval_inputs(self) -> Mapping[str, np.ndarray]:
        """The eval set's input arrays by model input name."""
        ...

    @property
    def calibration_inputs(self) -> Mapping[str, np.ndarray]:
        """The calibration rows by model input name."""
        ...

    @property
    def metric(self) -> str:
        """The metric's name."""
        ...

    def score(self, outputs: Mapping[str, np.ndarray]) -> float:
        """The task metric of model outputs on the eval set."""
        ...


@attrs.frozen
class VariantSpec:
    """One source variant: compressor steps applied in order to the dense subgraph.

    Attributes:
        steps: ``(compressor name, level)`` pairs; empty for the dense variant. Level-less
            compressors (``int8``, ``fp16``) take level ``0.0``.
    """

    steps: tuple[tuple[str, float], ...] = attrs.field(
        converter=lambda s: tuple((str(c), float(lv)) for c, lv in s)
    )

    @property
    def name(self) -> str:
        """``dense``, ``unstructured-0.5``, ``int8`` or ``unstructured-0.5+int8``."""
        if not self.steps:
            return "dense"
        return "+".join(c if lv == 0.0 else f"{c}-{lv:g}" for c, lv in self.steps)

    @property
    def compressor(self) -> str:
        """The compressor names joined by ``+`` (``dense`` for none)."""
        return "+".join(c for c, _ in self.steps) or "dense"

    @property
    def level(self) -> float:
        """The first non-zero level (0.0 when none)."""
        return next((lv for _, lv in self.steps if lv != 0.0), 0.0)

    @classmethod
    def parse(cls, text: str | VariantSpec) -> VariantSpec:
        """Parse ``dense``, ``int8``, ``unstructured-0.5`` or ``unstructured-0.5+int8``."""
        if isinstance(text, VariantSpec):
            return text
        cleaned = str(text).strip()
        if not cleaned:
            raise ConfigError("an empty variant name; use e.g. 'dense', 'unstructured-0.5'")
        if cleaned == "dense":
            return cls(())
        steps = []
        for part in cleaned.split("+"):
            match = LEVEL_SUFFIX.fullmatch(part)
            steps.append((match.group(1), float(match.group(2))) if match else (part, 0.0))
        return cls(tuple(steps))


@attrs.frozen
class VariantInfo:
    """A source variant as the zoo holds it.

    Attributes:
        id: its index, ``0..V-1`` (0 is dense).
        name: ``unstructured-0.5`` etc.
        kind: the compressor kinds joined by ``+`` (``dense``, ``unstructured``, ``int8`` ...).
        compressor: the compressor names joined by ``+``.
        level: the first non-zero level, else 0.0.
        steps: the ``(compressor, level)`` steps.
        metric: the metric of the whole variant (all positions this variant) on the eval set.
        size_bytes: the summed size of its S subgraph files.
    """

    id: int
    name: str
    kind: str
    compressor: str
    level: float
    steps: tuple[tuple[str, float], ...] = attrs.field(converter=lambda s: tuple(map(tuple, s)))
    metric: float | None
    size_bytes: int


@attrs.frozen
class SubgraphInfo:
    """One (position, variant) file of the zoo.

    Attributes:
        position: 0-based position.
        variant: variant id.
        path: the ONNX file, relative to the zoo directory.
        sha256: the file's SHA-256.
        size_bytes: the file's size.
        inputs: boundary input tensor names.
        outputs: boundary output tensor names.
        skipped: compressor steps left out here because the compressor's ``prunable()`` found
            nothing to prune in this subgraph (the step is the identity at this position).
    """

    position: int
    variant: int
    path: str
    sha256: str
    size_bytes: int
    inputs: tuple[str, ...] = attrs.field(converter=as_tuple)
    outputs: tuple[str, ...] = attrs.field(converter=as_tuple)
    skipped: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)


@attrs.frozen
class BoundaryInfo:
    """The tensors one position reads and writes (the same for every variant).

    Each tensor is a dict with ``name``, ``dtype``, ``shape`` and ``source`` (its name in the
    dense model).
    """

    position: int
    inputs: tuple[Mapping[str, Any], ...] = attrs.field(converter=as_tuple)
    outputs: tuple[Mapping[str, Any], ...] = attrs.field(converter=as_tuple)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The input tensor names."""
        return tuple(t["name"] for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The output tensor names."""
        return tuple(t["name"] for t in self.outputs)


@attrs.define(eq=False)
class Zoo:
    """A built zoo of one task, read from its ``manifest.json``.

    Attributes:
        directory: the zoo directory (every path in the manifest is relative to it).
        manifest: the parsed manifest.
        cached: whether it was found in the cache (``False`` right after a build).
    """

    directory: Path
    manifest: dict[str, Any]
    cached: bool = True

    @property
    def task(self) -> str:
        """The task name."""
        return str(self.manifest["task"])

    @property
    def hash(self) -> str:
        """The zoo's config hash (its directory name under the cache)."""
        return str(self.manifest["hash"])

    @property
    def positions(self) -> int:
        """``S``, the number of subgraph positions (iterate with ``range(zoo.positions)``)."""
        return len(self.manifest["positions"])

    @property
    def variants(self) -> list[VariantInfo]:
        """The ``V`` source variants, by id."""
        return [VariantInfo(**v) for v in self.manifest["variants"]]

    @property
    def metric_name(self) -> str:
        """The task metric's name."""
        return str(self.manifest["metric"]["name"])

    def variant(self, variant: int | str) -> VariantInfo:
        """One variant, by id or name."""
        for info in self.variants:
            if variant in (info.id, info.name):
                return info
        known = ", ".join(f"{v.id}={v.name}" for v in self.variants)
        raise ZooError(f"zoo of task {self.task!r} has no variant {variant!r}; known: {known}")

    def boundary(self, position: int) -> BoundaryInfo:
        """The boundary tensors of ``position`` (inputs from the previous, outputs to the next)."""
        self._check_position(position)
        entry = self.manifest["positions"][position]
        return BoundaryInfo(position, entry["inputs"], entry["outputs"])

    def subgraph(self, position: int, variant: int) -> SubgraphInfo:
        """The file entry of (``position``, ``variant``)."""
        self._check_position(position)
        self._check_variant(variant)
        entry = self.manifest["subgraphs"][position * len(self.manifest["variants"]) + variant]
        return SubgraphInfo(**entry)

    def subgraph_path(self, position: int, variant: int) -> Path:
        """The absolute path of the ONNX file of (``position``, ``variant``)."""
        return self.directory / self.subgraph(position, variant).path

    def stitched(self, choices: Sequence[int]) -> StitchedVariant:
        """The stitched variant with ``choices``, checked against this zoo."""
        return StitchedVariant(self.task, self.check_choices(choices))

    def check_choices(self, stitched: StitchedVariant | Sequence[int]) -> tuple[int, ...]:
        """``stitched``'s choices as a tuple; :class:`ZooError` for a wrong length or id."""
        if isinstance(stitched, StitchedVariant):
            if stitched.task != self.task:
                raise ZooError(f"stitched variant {stitched} is for task {stitched.task!r}, "
                               f"but this zoo is for task {self.task!r}")
            choices = stitched.choices
        else:
            choices = tuple(stitched)
        if len(choices) != self.positions:
            raise ZooError(
                f"stitched variant {list(choices)} of task {self.task!r} has {len(choices)} "
                f"choice(s) but the zoo has {self.positions} positions; give one variant id "
                f"per position"
            )
        count = len(self.manifest["variants"])
        for position, choice in enumerate(choices):
            if isinstance(choice, bool) or not isinstance(choice, int | np.integer) or not (
                0 <= choice < count
            ):
                raise ZooError(
                    f"stitched variant {list(choices)} of task {self.task!r}: position "
                    f"{position} has unknown variant id {choice!r}; ids are 0..{count - 1} "
                    f"({', '.join(f'{v.id}={v.name}' for v in self.variants)})"
                )
        return tuple(int(c) for c in choices)

    def verify(self) -> None:
        """Check every file's SHA-256 against the manifest; :class:`ZooError` on a mismatch."""
        for entry in self.manifest["subgraphs"]:
            path = self.directory / entry["path"]
            if not path.is_file():
                raise ZooError(
                    f"zoo of task {self.task!r} at {self.directory}: file {entry['path']} "
                    f"(position {entry['position']}, variant {entry['variant']}) is missing; "
                    f"rebuild it with `sparseloom zoo build WORKLOAD --rebuild`"
                )
            digest = file_hash(path)
            if digest != entry["sha256"]:
                raise ZooError(
                    f"zoo of task {self.task!r} at {self.directory}: file {entry['path']} "
                    f"(position {entry['position']}, variant {entry['variant']}) is corrupted: "
                    f"SHA-256 {digest[:12]}… but the manifest expects {entry['sha256'][:12]}…; "
                    f"rebuild it with `sparseloom zoo build WORKLOAD --rebuild`"
                )

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (directory, S, variants with metric and size)."""
        return {
            "task": self.task,
            "directory": str(self.directory),
            "hash": self.hash,
            "subgraphs": self.positions,
            "metric": self.metric_name,
            "variants": [attrs.asdict(v) for v in self.variants],
            "cuts": self.manifest["partition"]["cuts"],
            "build_seconds": self.manifest.get("build_seconds"),
            "cached": self.cached,
        }

    def _check_position(self, position: int) -> None:
        if not 0 <= position < self.positions:
            raise ZooError(f"zoo of task {self.task!r} has positions 0..{self.positions - 1}, "
                           f"not {position}")

    def _check_variant(self, variant: int) -> None:
        count = len(self.manifest["variants"])
        if not 0 <= variant < count:
            raise ZooError(f"zoo of task {self.task!r} has variants 0..{count - 1}, "
                           f"not {variant}")
