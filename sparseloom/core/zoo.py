"""The subgraph zoo: every task's dense model cut into S pieces, each piece in V variants.

Split first, then compress: :func:`build_zoo` partitions the dense model once
(:mod:`sparseloom.core.partition`), then runs each compressor plugin on each dense piece, so
every variant is layer-aligned by construction. INT8 calibration of position ``j`` uses the
dense prefix's activations at ``j``. Each variant's boundary signature is checked against the
dense one before anything is written; a misaligned piece is refused with a :class:`ZooError`
naming the task, position, variant and tensor.

On disk (under ``cache_dir()/zoo/<hash>``, the hash keyed by the dense model's SHA-256, S, the
variant list, the compressors and the partition/evaluation config)::

    manifest.json
    p0/v0-dense.onnx  p0/v1-unstructured-0.3.onnx  ...
    p1/v0-dense.onnx  ...

``manifest.json`` lists, for every (task, position, variant), the ONNX file's path relative to
the zoo directory, its size and SHA-256 and its boundary input/output tensors, so any tool can
chain the pieces itself; see ``docs/zoo.md`` for the format. :func:`load_zoo` checks every
file's hash.

Variant ids are integers ``0..V-1`` (0 is dense); names look like ``unstructured-0.5`` or
``unstructured-0.5+int8`` (compressors applied in order).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sparseloom import __version__
from sparseloom.core.cache import cache_dir, config_hash, file_hash
from sparseloom.core.errors import ConfigError, SparseloomError, ZooError
from sparseloom.core.zoo_manifest import (
    ZOO_FORMAT,
    build_manifest,
    check_alignment,
    subgraph_file,
)
from sparseloom.core.zoo_types import (
    BoundaryInfo,
    SubgraphInfo,
    VariantInfo,
    VariantSpec,
    Zoo,
    ZooNotBuiltError,
    ZooTask,
)

__all__ = [
    "DEFAULT_VARIANTS",
    "BoundaryInfo",
    "SubgraphInfo",
    "VariantInfo",
    "VariantSpec",
    "Zoo",
    "ZooNotBuiltError",
    "ZooTask",
    "build_zoo",
    "check_alignment",
    "default_subgraphs",
    "load_zoo",
    "zoo_config",
    "zoo_directory",
]

MANIFEST = "manifest.json"

#: The default zoo: the dense model and nine compressed variants (ten, as in the paper's
#: Appendix A): four unstructured sparsities, two structured ones, INT8, FP16, and INT8 on
#: top of 50% unstructured sparsity.
DEFAULT_VARIANTS: tuple[str, ...] = (
    "dense",
    "unstructured-0.3",
    "unstructured-0.5",
    "unstructured-0.7",
    "unstructured-0.9",
    "structured-0.25",
    "structured-0.5",
    "int8",
    "fp16",
    "unstructured-0.5+int8",
)
#: Rows per calibration batch handed to compressors.
CALIBRATION_BATCH = 32
#: Rows of calibration data used to trace shapes, costs and check the partition.
SAMPLE_ROWS = 4


# -- building -------------------------------------------------------------------------------


def default_subgraphs(processors: Sequence[str] | None = None) -> int:
    """``S`` by default: the number of ``processors``, else of the available processors."""
    if processors:
        return len(processors)
    from sparseloom.core.processors import default_processors

    return max(1, len(default_processors()))


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
        "calibration_sha256": _arrays_hash(task.calibration_inputs),
        "eval_sha256": _arrays_hash(task.eval_inputs),
        "evaluation_processor": evaluation_processor,
    }


def _arrays_hash(arrays: Mapping[str, np.ndarray]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _resolve_variants(variants: Sequence[str | VariantSpec] | None) -> list[VariantSpec]:
    from sparseloom.core.registry import get_registry

    specs = [VariantSpec.parse(v) for v in (variants or DEFAULT_VARIANTS)]
    if not specs or specs[0].steps:
        raise ConfigError("the first variant (id 0) must be 'dense'")
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"variants listed twice: {duplicates}")
    registry = get_registry()
    for spec in specs[1:]:
        for name, level in spec.steps:
            compressor = registry.create("compressor", name)
            levels = tuple(getattr(compressor, "default_levels", ()))
            if levels and not 0.0 < level < 1.0:
                raise ConfigError(
                    f"variant {spec.name!r}: level {level:g} of compressor {name!r} is out of "
                    f"range; it takes a fraction 0 < level < 1 (default levels: "
                    f"{', '.join(f'{x:g}' for x in levels)})"
                )
            if not levels and level != 0.0:
                raise ConfigError(
                    f"variant {spec.name!r}: compressor {name!r} has no levels; "
                    f"write it as {name!r} without '-{level:g}'"
                )
    return specs


def zoo_directory(key: str) -> Path:
    """Where the zoo with config hash ``key`` lives."""
    return cache_dir() / "zoo" / key


def build_zoo(
    task: ZooTask,
    subgraphs: int | None = None,
    *,
    variants: Sequence[str | VariantSpec] | None = None,
    processors: Sequence[str] | None = None,
    cost: str = "flops",
    mode: str = "balanced",
    min_fraction: float = 0.05,
    evaluation_processor: str = "ort:CPU",
    rebuild: bool = False,
    progress: bool = True,
) -> Zoo:
    """Build (or load from the cache) the zoo of ``task``.

    :param task: the task (dense model, eval and calibration data, metric).
    :param subgraphs: ``S``; default: the number of ``processors`` (or available processors).
    :param variants: variant names/specs, dense first; default :data:`DEFAULT_VARIANTS`.
    :param processors: the processors the zoo is meant for (default S; ``adms`` op support).
    :param cost: partition balance: ``flops`` or ``latency``.
    :param mode: ``balanced`` or ``adms`` (see :mod:`sparseloom.core.partition`).
    :param min_fraction: ``adms`` mode's smallest piece, as a fraction of the total cost.
    :param evaluation_processor: where the variants' metrics are measured.
    :param rebuild: build even if a cached zoo exists (replacing it).
    :param progress: show a tqdm bar on stderr.
    :returns: the zoo, its files verified.
    :raises ConfigError: bad S, variant names, levels or processors.
    :raises ZooError: the model cannot be cut into S pieces, or a compressor broke alignment.
    """
    processors = list(processors or [])
    count = default_subgraphs(processors) if subgraphs is None else subgraphs
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"the number of subgraphs must be a positive integer, got {count!r}")
    specs = _resolve_variants(variants)
    config = zoo_config(
        task, count, specs, cost=cost, mode=mode, min_fraction=min_fraction,
        processors=processors, evaluation_processor=evaluation_processor,
    )
    key = config_hash(config)
    directory = zoo_directory(key)
    if (directory / MANIFEST).is_file() and not rebuild:
        return load_zoo(directory)
    staging = directory.with_name(f"{key}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        manifest = _build(task, count, specs, config, key, staging, processors, progress)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    zoo = load_zoo(directory)
    zoo.cached = False
    return zoo


def _build(
    task: ZooTask,
    subgraphs: int,
    specs: Sequence[VariantSpec],
    config: Mapping[str, Any],
    key: str,
    directory: Path,
    processors: Sequence[str],
    progress: bool,
) -> dict[str, Any]:
    import onnx
    from tqdm import tqdm

    from sparseloom.core.evaluate import SubgraphRunner, evaluate_stitched
    from sparseloom.core.extract import declared_signature
    from sparseloom.core.graph import iter_batches, take_batch, topological_sort
    from sparseloom.core.partition import partition_model
    from sparseloom.core.registry import get_registry

    started = time.perf_counter()
    partition_config = config["partition"]
    supports = _support_functions(processors) if partition_config["mode"] == "adms" else None
    sample = take_batch(task.calibration_inputs, 0, SAMPLE_ROWS)
    partition = partition_model(
        str(task.model_path), subgraphs, sample, cost=partition_config["cost"],
        mode=partition_config["mode"], supports=supports,
        min_fraction=partition_config["min_fraction"],
    )
    registry = get_registry()
    total_steps = subgraphs * len(specs) + len(specs)
    bar = tqdm(total=total_steps, desc=f"{task.name}: building zoo (S={subgraphs})",
               unit="piece", disable=not progress, leave=False)
    subgraph_entries: list[dict[str, Any]] = []
    calibration = list(iter_batches(task.calibration_inputs, CALIBRATION_BATCH))
    try:
        from sparseloom.core.graph import ort_session, run_model

        for position, dense_piece in enumerate(partition.pieces):
            dense_signature = declared_signature(dense_piece)
            for variant_id, spec in enumerate(specs):
                bar.set_postfix_str(f"p{position} {spec.name}")
                piece = dense_piece
                skipped: list[str] = []
                for name, level in spec.steps:
                    compressor = registry.create("compressor", name)
                    prunable = getattr(compressor, "prunable", None)
                    if prunable is not None and not prunable(piece):
                        # Nothing this pruner can shrink here (say a DFT front end alone):
                        # the step is the identity at this position, and the manifest says so.
                        skipped.append(name)
                        continue
                    try:
                        piece = compressor.compress(piece, level, calibration)
                    except SparseloomError as error:
                        raise ZooError(
                            f"task {task.name!r}, position {position}, variant {variant_id} "
                            f"({spec.name}): compressor {name!r} failed: {error}"
                        ) from error
                check_alignment(task.name, position, variant_id, spec.name, dense_signature,
                                declared_signature(piece))
                if piece is not dense_piece:
                    topological_sort(piece.graph)
                relative = subgraph_file(position, variant_id, spec.name)
                path = directory / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                onnx.save(piece, str(path))
                subgraph_entries.append({
                    "position": position,
                    "variant": variant_id,
                    "path": relative,
                    "sha256": file_hash(path),
                    "size_bytes": path.stat().st_size,
                    "inputs": [t["name"] for t in dense_signature["inputs"]],
                    "outputs": [t["name"] for t in dense_signature["outputs"]],
                    "skipped": skipped,
                })
                bar.update(1)
            if position + 1 < subgraphs:  # the dense prefix's activations at the next position
                session = ort_session(dense_piece)
                calibration = [run_model(session, batch) for batch in calibration]
        manifest = build_manifest(task, config, key, partition, specs, subgraph_entries)
        zoo = Zoo(directory, manifest)
        bar.set_postfix_str("measuring the variants' metrics")
        with SubgraphRunner(processor=config["evaluation_processor"]) as runner:
            report = evaluate_stitched(
                zoo, task, [(v,) * subgraphs for v in range(len(specs))], runner=runner,
            )
        bar.update(len(specs))
    finally:
        bar.close()
    for entry in manifest["variants"]:
        entry["metric"] = report.metrics[(entry["id"],) * subgraphs]
    manifest["metric"]["dense"] = manifest["variants"][0]["metric"]
    manifest["build_seconds"] = round(time.perf_counter() - started, 3)
    return manifest


def _support_functions(processors: Sequence[str]) -> dict[str, Any]:
    if not processors:
        raise ConfigError("partition mode 'adms' needs the processors (to ask their op support)")
    from sparseloom.core.processors import get_backend, get_processor

    functions = {}
    for spec in processors:
        processor = get_processor(spec)
        backend = get_backend(processor.backend)
        functions[processor.name] = (
            lambda op, b=backend, p=processor: bool(b.supports(op, p))
        )
    return functions


# -- loading --------------------------------------------------------------------------------


def load_zoo(
    source: str | os.PathLike[str] | ZooTask,
    subgraphs: int | None = None,
    *,
    variants: Sequence[str | VariantSpec] | None = None,
    processors: Sequence[str] | None = None,
    cost: str = "flops",
    mode: str = "balanced",
    min_fraction: float = 0.05,
    evaluation_processor: str = "ort:CPU",
    verify: bool = True,
) -> Zoo:
    """Load a built zoo from its directory, or find the one :func:`build_zoo` made for a task.

    With a task, the other arguments must be those it was built with (they make the hash).

    :param verify: check every file's SHA-256 (a mismatch raises :class:`ZooError`).
    :raises ZooError: no such zoo, an unreadable manifest, or a corrupted file.
    """
    if isinstance(source, str | os.PathLike):
        directory = Path(source)
    else:
        processors = list(processors or [])
        count = default_subgraphs(processors) if subgraphs is None else subgraphs
        config = zoo_config(
            source, count, _resolve_variants(variants), cost=cost, mode=mode,
            min_fraction=min_fraction, processors=processors,
            evaluation_processor=evaluation_processor,
        )
        directory = zoo_directory(config_hash(config))
        if not (directory / MANIFEST).is_file():
            raise ZooNotBuiltError(
                f"no zoo of task {source.name!r} with S={count} is built yet (looked in "
                f"{directory}); run `sparseloom zoo build WORKLOAD --subgraphs {count}`"
            )
    manifest_path = directory / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ZooError(f"{directory} holds no zoo: {MANIFEST} is missing") from None
    except (OSError, ValueError) as error:
        raise ZooError(f"cannot read zoo manifest {manifest_path}: {error}; "
                       f"rebuild it with `sparseloom zoo build ... --rebuild`") from error
    if manifest.get("format") != ZOO_FORMAT:
        raise ZooError(f"zoo {directory} has format {manifest.get('format')!r}, this sparseloom "
                       f"reads format {ZOO_FORMAT}; rebuild it with `sparseloom zoo build`")
    zoo = Zoo(directory.resolve(), manifest)
    if verify:
        zoo.verify()
    return zoo
