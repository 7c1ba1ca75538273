"""Whole-model zoos: one position, each variant a complete model (dense, or a merged pick).

A stock runtime serves a task's model whole; so does a sparseloom plan that keeps a task on one
processor. :func:`whole_model_zoo` gives such models the shape of a zoo — S = 1, variant 0 the
task's dense model, variant ``k`` the stitched variant ``picks[k-1]`` of the task's subgraph zoo
merged into one model (:func:`~sparseloom.zoo.stitch.merge_stitched`) — so that the runtime
serves them exactly as it serves subgraphs: the same workers, the same load, the same scoring.

Merged models are cached under ``<cache>/whole/<zoo hash>/``, keyed by the choices.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparseloom.core.cache import cache_dir, file_hash, file_lock
from sparseloom.core.errors import ZooError
from sparseloom.zoo.types import Zoo


def _tensors(values: Any) -> list[dict[str, Any]]:
    import onnx

    out = []
    for value in values:
        tensor = value.type.tensor_type
        shape = [d.dim_param or d.dim_value for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        out.append({"name": value.name, "dtype": dtype, "shape": shape, "source": value.name})
    return out


def merged_path(zoo: Zoo, choices: Sequence[int]) -> Path:
    """The merged model of stitched variant ``choices`` of ``zoo`` (merged once, then cached)."""
    from sparseloom.zoo.stitch import merge_stitched

    checked = zoo.check_choices(choices)
    folder = cache_dir() / "whole" / zoo.hash
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{zoo.task}-{'_'.join(map(str, checked))}.onnx"
    with file_lock(folder / ".lock"):
        if not path.is_file():
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            merge_stitched(zoo, checked, temporary)
            os.replace(temporary, path)
    return path


def whole_model_zoo(task: Any, zoo: Zoo | None = None,
                    picks: Sequence[Sequence[int]] = ()) -> Zoo:
    """A one-position zoo of ``task``: variant 0 its dense model, then each pick merged.

    :param task: the workload task (its dense model, name and metric).
    :param zoo: the task's subgraph zoo; needed only for ``picks`` (its stitched variants).
    :param picks: stitched variants (one choice per position of ``zoo``) to serve whole.
    :raises ZooError: picks without a zoo or that do not fit it, or a dense model that cannot
        be read.
    """
    import onnx

    if picks and zoo is None:
        raise ZooError(f"picks {list(picks)} of task {task.name!r} need the task's zoo to "
                       f"merge them from")
    dense = Path(task.model_path)
    try:
        graph = onnx.load(str(dense), load_external_data=False).graph
    except Exception as error:  # onnx raises DecodeError, OSError ...
        raise ZooError(f"cannot read the dense model {dense} of task {task.name!r}: "
                       f"{error}") from error
    initializers = {t.name for t in graph.initializer}
    inputs = _tensors(v for v in graph.input if v.name not in initializers)
    outputs = _tensors(graph.output)
    files: list[tuple[Path, str, str, list[list[Any]]]] = [(dense, "dense", "dense", [])]
    for choices in picks:
        assert zoo is not None
        checked = zoo.check_choices(choices)
        names = [zoo.variants[c].name for c in checked]
        files.append((merged_path(zoo, checked), f"stitched-{'_'.join(map(str, checked))}",
                      "stitched", [[n, 0.0] for n in names]))
    variants, subgraphs = [], []
    for index, (path, name, kind, steps) in enumerate(files):
        size = path.stat().st_size
        variants.append({"id": index, "name": name, "kind": kind, "compressor": kind,
                         "level": 0.0, "steps": steps, "metric": None, "size_bytes": size})
        subgraphs.append({"position": 0, "variant": index, "path": str(path.resolve()),
                          "sha256": file_hash(path), "size_bytes": size,
                          "inputs": [t["name"] for t in inputs],
                          "outputs": [t["name"] for t in outputs]})
    manifest = {
        "format": 2, "task": task.name, "hash": f"{file_hash(dense)[:16]}-whole",
        "metric": {"name": task.metric},
        "partition": {"cuts": []},
        "positions": [{"position": 0, "inputs": inputs, "outputs": outputs}],
        "variants": variants, "subgraphs": subgraphs,
    }
    return Zoo(dense.parent, manifest)
