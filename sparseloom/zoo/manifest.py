"""The zoo's ``manifest.json``: what it holds, and the alignment check run before writing it.

Format (``docs/zoo.md`` has a full example): ``task``, ``hash``, ``dense_model``, ``metric``,
``build_config``, ``partition`` (cuts, costs), ``positions`` (boundary tensors of each
position: name, dtype, shape, dense source name), ``variants`` (id, name, kind, compressor,
level, steps, metric, size) and ``subgraphs`` (for every position and variant: the ONNX path
relative to the zoo directory, SHA-256, size, boundary input and output names, and the
compressor steps skipped there because nothing was prunable).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sparseloom.core import __version__
from sparseloom.core.errors import ZooError
from sparseloom.zoo.types import VariantSpec, ZooTask

#: Bump when the on-disk layout or the manifest changes; old zoos are then rebuilt.
ZOO_FORMAT = 2


def check_alignment(
    task: str,
    position: int,
    variant: int,
    name: str,
    expected: Mapping[str, Sequence[Mapping[str, Any]]],
    got: Mapping[str, Sequence[Mapping[str, Any]]],
) -> None:
    """Refuse a variant whose boundary differs from the dense one at the same position.

    Names, order, dtypes, ranks and static dimensions must match; a symbolic dimension may be
    renamed (``batch`` → ``unk__0``) but must stay symbolic.

    :raises ZooError: naming task, position, variant, tensor, and expected vs got.
    """
    where = f"task {task!r}, position {position}, variant {variant} ({name})"
    for side in ("inputs", "outputs"):
        expected_names = [t["name"] for t in expected[side]]
        got_names = [t["name"] for t in got[side]]
        if expected_names != got_names:
            raise ZooError(f"misaligned zoo: {where}: boundary {side} are {got_names}, "
                           f"expected {expected_names} (as in the dense subgraph)")
        for want, have in zip(expected[side], got[side], strict=True):
            shapes_match = want["shape"] is None or (
                have["shape"] is not None and len(want["shape"]) == len(have["shape"]) and all(
                    (a == b) if isinstance(a, int) else not isinstance(b, int)
                    for a, b in zip(want["shape"], have["shape"], strict=True)
                )
            )
            if want["dtype"] != have["dtype"] or not shapes_match:
                raise ZooError(
                    f"misaligned zoo: {where}: boundary {side[:-1]} {want['name']!r} is "
                    f"{have['dtype']} {have['shape']}, expected {want['dtype']} {want['shape']} "
                    f"(as in the dense subgraph)"
                )


def subgraph_file(position: int, variant: int, name: str) -> str:
    """The file of (``position``, ``variant``) relative to the zoo directory."""
    return f"p{position}/v{variant}-{re.sub(r'[^A-Za-z0-9._+-]', '_', name)}.onnx"


def build_manifest(
    task: ZooTask,
    config: Mapping[str, Any],
    key: str,
    partition: Any,
    specs: Sequence[VariantSpec],
    subgraph_entries: list[dict[str, Any]],
) -> dict[str, Any]:
    """The manifest of a zoo whose files are written (metrics are filled in afterwards)."""

    def tensor(t: Any) -> dict[str, Any]:
        return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "source": t.source}

    from sparseloom.zoo.variants import create_compressor

    variants = []
    for variant_id, spec in enumerate(specs):
        kinds = [str(getattr(create_compressor(name, config["compressors"][name].get("options")),
                             "kind", name))
                 for name, _ in spec.steps]
        variants.append({
            "id": variant_id,
            "name": spec.name,
            "kind": "+".join(kinds) or "dense",
            "compressor": spec.compressor,
            "level": spec.level,
            "steps": [list(step) for step in spec.steps],
            "metric": None,
            "size_bytes": sum(e["size_bytes"] for e in subgraph_entries
                              if e["variant"] == variant_id),
        })
    return {
        "format": ZOO_FORMAT,
        "sparseloom_version": __version__,
        "task": task.name,
        "hash": key,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "dense_model": {"path": str(task.model_path), "sha256": config["dense_sha256"]},
        "metric": {"name": task.metric, "dense": None},
        "build_config": dict(config),
        "partition": {
            "cuts": list(partition.cuts),
            "costs": list(partition.costs),
            "cost_kind": partition.cost_kind,
            "valid_cut_points": len(partition.valid_cuts),
            "max_abs_diff": partition.max_abs_diff,
            "supported_by": [list(s) for s in partition.supported_by],
        },
        "positions": [
            {"position": j, "inputs": [tensor(t) for t in partition.inputs[j]],
             "outputs": [tensor(t) for t in partition.outputs[j]]}
            for j in range(partition.subgraphs)
        ],
        "variants": variants,
        "subgraphs": subgraph_entries,
    }
