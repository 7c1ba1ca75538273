"""The subgraph zoo: every task's dense model cut into S pieces, each piece in V variants.

Split first, then compress: :func:`build_zoo` partitions the dense model once
(:mod:`sparseloom.zoo.partition`), then runs each compressor plugin on each dense piece, so
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

from sparseloom.core.cache import config_hash, file_hash
from sparseloom.core.errors import ConfigError, PluginCallError, SparseloomError, ZooError
from sparseloom.zoo.load import load_zoo
from sparseloom.zoo.manifest import build_manifest, check_alignment, subgraph_file
from sparseloom.zoo.options import (
    CALIBRATION_BATCH,
    MANIFEST,
    SAMPLE_ROWS,
    ZooOptions,
    zoo_directory,
)
from sparseloom.zoo.types import VariantSpec, Zoo, ZooTask
from sparseloom.zoo.variants import create_compressor

__all__ = ["build_zoo"]

def build_zoo(
    task: ZooTask,
    options: ZooOptions | None = None,
    *,
    rebuild: bool = False,
    progress: bool = True,
) -> Zoo:
    """Build (or load from the cache) the zoo of ``task``.

    :param task: the task (dense model, eval and calibration data, metric).
    :param options: S, variants, processors, partition and evaluation settings
        (:class:`~sparseloom.zoo.options.ZooOptions`; its defaults when omitted).
    :param rebuild: build even if a cached zoo exists (replacing it).
    :param progress: show a tqdm bar on stderr.
    :returns: the zoo, its files verified.
    :raises ConfigError: bad S, variant names, levels or processors.
    :raises ZooError: the model cannot be cut into S pieces, or a compressor broke alignment.
    """
    options = options or ZooOptions()
    count = options.count()
    specs = options.resolved_variants()
    processors = list(options.processors)
    config = options.config(task)
    key = config_hash(config)
    directory = zoo_directory(key)
    _remove_abandoned_builds(directory.parent)
    if (directory / MANIFEST).is_file() and not rebuild:
        return load_zoo(directory)  # a damaged zoo is refused, naming `zoo build --rebuild`
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


def _remove_abandoned_builds(folder: Path) -> None:
    """Delete the staging folders (``<key>.building-<pid>``) of builds whose process is gone:
    a build that crashed or was killed leaves one behind."""
    for staging in folder.glob("*.building-*"):
        pid = staging.name.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(staging, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


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

    from sparseloom.core.registry import get_registry
    from sparseloom.zoo.evaluate import SubgraphRunner, evaluate_stitched
    from sparseloom.zoo.extract import declared_signature
    from sparseloom.zoo.graph import topological_sort
    from sparseloom.zoo.partition import partition_model
    from sparseloom.zoo.tensors import iter_batches, take_batch

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
        from sparseloom.zoo.tensors import ort_session, run_session

        for position, dense_piece in enumerate(partition.pieces):
            dense_signature = declared_signature(dense_piece)
            for variant_id, spec in enumerate(specs):
                bar.set_postfix_str(f"p{position} {spec.name}")
                piece = dense_piece
                skipped: list[str] = []
                for name, level in spec.steps:
                    compressor = create_compressor(
                        name, config["compressors"][name].get("options"))
                    prunable = getattr(compressor, "prunable", None)
                    if prunable is not None and not prunable(piece):
                        # Nothing this pruner can shrink here (say a DFT front end alone):
                        # the step is the identity at this position, and the manifest says so.
                        skipped.append(name)
                        continue
                    try:
                        piece = compressor.compress(piece, level, calibration)
                    except Exception as error:
                        # A third-party compressor's own exception becomes one line too.
                        detail = error if isinstance(error, SparseloomError) else (
                            f"{type(error).__name__}: {error} (compressor of distribution "
                            f"{registry.get_compressor(name).distribution or '?'})")
                        where = (f"task {task.name!r}, position {position}, variant "
                                 f"{variant_id} ({spec.name})")
                        if isinstance(error, PluginCallError):  # it names the plugin already
                            raise ZooError(f"{where}: {error}") from error
                        raise ZooError(f"{where}: compressor {name!r} failed: {detail}"
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
                calibration = [run_session(session, batch) for batch in calibration]
        manifest = build_manifest(task, config, key, partition, specs, subgraph_entries)
        zoo = Zoo(directory, manifest)
        bar.set_postfix_str("measuring the variants' metrics")
        with SubgraphRunner(processor=config["evaluation_processor"]) as runner:
            report = evaluate_stitched(
                zoo, task, [(v,) * subgraphs for v in range(len(specs))], runner=runner,
                progress=progress,
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
            lambda op, domain="", b=backend, p=processor: bool(b.supports(op, p, domain))
        )
    return functions


