"""Shared helpers for the zoo, stitching and evaluation tests.

``tiny_task()`` is the bundled ``tiny`` task (digits + small ResNet, trained once and cached).
``ensure_compressors()`` registers simple reference compressors for any of ``unstructured``,
``structured``, ``int8`` and ``fp16`` that the registry does not provide (the real ones come
from ``sparseloom.plugins.compressors``); each keeps the boundary tensors of its subgraph.
``transformer_model()`` exports a small attention model with an attention mask (random
weights: used for graph-equivalence checks only).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.registry import get_registry

TINY_WORKLOAD = "tiny"


@functools.cache
def tiny_task() -> Any:
    """The ``tiny`` workload's only task (built once, then cached)."""
    from sparseloom.core.workload import load_workload

    return load_workload(TINY_WORKLOAD, progress=False).task("tiny")


@functools.cache
def tiny_zoo(subgraphs: int) -> Any:
    """The default ten-variant zoo of the tiny task with ``subgraphs`` positions."""
    from sparseloom.core.zoo import build_zoo

    ensure_compressors()
    return build_zoo(tiny_task(), subgraphs, progress=False)


def chain_with_onnxruntime(
    zoo_dir: Path, choices: Sequence[int], inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run a stitched variant with plain ONNX Runtime, reading only ``manifest.json``."""
    import json

    import onnxruntime

    manifest = json.loads((zoo_dir / "manifest.json").read_text())
    by_key = {(e["position"], e["variant"]): e for e in manifest["subgraphs"]}
    carried = dict(inputs)
    for position, variant in enumerate(choices):
        entry = by_key[(position, variant)]
        session = onnxruntime.InferenceSession(
            str(zoo_dir / entry["path"]), providers=["CPUExecutionProvider"]
        )
        outputs = session.run(entry["outputs"], {n: carried[n] for n in entry["inputs"]})
        carried = dict(zip(entry["outputs"], outputs, strict=True))
    return carried


# -- reference compressors -------------------------------------------------------------------


def _weights(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    used = {n.input[1] for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")
            and len(n.input) > 1}
    return [i for i in model.graph.initializer
            if i.name in used and i.data_type == onnx.TensorProto.FLOAT and len(i.dims) >= 2]


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


class MagnitudePruner:
    """Zero the smallest ``level`` fraction of each weight (reference ``unstructured``)."""

    kind = "unstructured"
    default_levels = (0.3, 0.5, 0.7, 0.9)

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        if not 0 < level < 1:
            raise ValueError(f"level {level} out of range")
        model = _copy(subgraph)
        for init in _weights(model):
            array = numpy_helper.to_array(init).copy()
            threshold = np.quantile(np.abs(array), level)
            array[np.abs(array) < threshold] = 0
            init.CopyFrom(numpy_helper.from_array(array, init.name))
        return model


class RowPruner:
    """Zero the ``level`` fraction of output rows with the smallest L1 norm (``structured``)."""

    kind = "structured"
    default_levels = (0.25, 0.5)

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        model = _copy(subgraph)
        for init in _weights(model):
            array = numpy_helper.to_array(init).copy()
            rows = array.reshape(array.shape[0], -1)
            drop = np.argsort(np.abs(rows).sum(1))[: int(level * rows.shape[0])]
            rows[drop] = 0
            init.CopyFrom(numpy_helper.from_array(rows.reshape(array.shape), init.name))
        return model


class WeightRounder:
    """Round weights to a coarser grid: int8 (per-tensor symmetric) or fp16 precision."""

    default_levels: tuple[float, ...] = ()

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def compress(self, subgraph: onnx.ModelProto, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> onnx.ModelProto:
        if level != 0.0:
            raise ValueError(f"{self.kind} has no levels")
        if self.kind == "int8" and not calibration:
            raise ValueError("int8 needs calibration batches")
        model = _copy(subgraph)
        for init in _weights(model):
            array = numpy_helper.to_array(init)
            if self.kind == "fp16":
                rounded = array.astype(np.float16).astype(np.float32)
            else:
                scale = float(np.abs(array).max()) / 127 or 1.0
                rounded = (np.round(array / scale).clip(-127, 127) * scale).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(rounded, init.name))
        return model


class ReferenceCompressors:
    """A plugin registering the reference compressors the registry lacks."""

    def __init__(self, missing: Sequence[str]) -> None:
        self.missing = tuple(missing)

    @hookimpl
    def sparseloom_register_compressors(self, register: Any) -> None:
        factories = {
            "unstructured": MagnitudePruner,
            "structured": RowPruner,
            "int8": lambda: WeightRounder("int8"),
            "fp16": lambda: WeightRounder("fp16"),
        }
        for name in self.missing:
            register(name, factories[name], description=f"test reference {name}")


def ensure_compressors() -> str | None:
    """Register reference compressors for the default kinds the registry lacks.

    Returns the plugin name to unregister afterwards, or ``None`` when nothing was missing.
    """
    registry = get_registry()
    known = {r.name for r in registry.compressors()}
    missing = [n for n in ("unstructured", "structured", "int8", "fp16") if n not in known]
    if not missing:
        return None
    return registry.register_plugin(
        ReferenceCompressors(missing), "zoo-test-compressors", distribution="test", version="0"
    )


# -- a small transformer with an attention mask ----------------------------------------------


def transformer_model(path: Path, *, dynamo: bool = False) -> dict[str, np.ndarray]:
    """Export a 3-layer attention model (inputs ``input_ids``, ``attention_mask``) to ``path``.

    Returns sample inputs (4 rows, one with padding).
    """
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, dim: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)
            self.norm1 = nn.LayerNorm(dim)
            self.ff = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))
            self.norm2 = nn.LayerNorm(dim)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            batch, length, dim = x.shape
            qkv = self.qkv(x).reshape(batch, length, 3, self.heads, dim // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (dim // self.heads) ** 0.5 + mask
            mixed = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, dim)
            x = self.norm1(x + self.out(mixed))
            return self.norm2(x + self.ff(x))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.position = nn.Parameter(torch.randn(1, 12, 16))
            self.layers = nn.ModuleList([Layer() for _ in range(3)])
            self.head = nn.Linear(16, 2)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            x = self.embed(input_ids) + self.position[:, : input_ids.shape[1]]
            additive = (1.0 - attention_mask[:, None, None, :].float()) * -1e4
            for layer in self.layers:
                x = layer(x, additive)
            weights = attention_mask.float().unsqueeze(-1)
            return self.head((x * weights).sum(1) / weights.sum(1))

    torch.manual_seed(0)
    model = Encoder().eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (4, 12)).astype(np.int64)
    mask = np.ones((4, 12), np.int64)
    mask[1, 8:] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(ids), torch.from_numpy(mask)), str(path),
            input_names=["input_ids", "attention_mask"], output_names=["logits"],
            dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                          "logits": {0: "batch"}},
            dynamo=dynamo, opset_version=17 if not dynamo else 18,
        )
    return {"input_ids": ids, "attention_mask": mask}
