"""Shared helpers for the zoo, stitching and evaluation tests.

``tiny_task()`` is the bundled ``tiny`` task (digits + small ResNet, trained once and cached).
``require_real_compressors()`` fails unless ``unstructured``, ``structured``, ``int8`` and
``fp16`` are the built-in compressors of ``sparseloom.plugins.compressors`` (no stand-ins).
``chain_with_onnxruntime()`` and ``chain_metrics_with_onnxruntime()`` run stitched variants
with plain ONNX Runtime sessions from ``manifest.json`` alone: the tests' independent reference.
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

from sparseloom.core.registry import get_registry
from sparseloom.plugins.compressors import (
    Fp16Converter,
    Int8Quantizer,
    StructuredPruner,
    UnstructuredPruner,
)

TINY_WORKLOAD = "tiny"


@functools.cache
def tiny_task() -> Any:
    """The ``tiny`` workload's only task (built once, then cached)."""
    from sparseloom.workload.load import load_workload

    return load_workload(TINY_WORKLOAD, progress=False).task("tiny")


@functools.cache
def tiny_zoo(subgraphs: int) -> Any:
    """The default ten-variant zoo of the tiny task with ``subgraphs`` positions."""
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions

    require_real_compressors()
    return build_zoo(tiny_task(), ZooOptions(subgraphs=subgraphs), progress=False)


def _plain_session(path: str) -> Any:
    return _cached_session(path, Path(path).stat().st_mtime_ns)


@functools.lru_cache(maxsize=128)
def _cached_session(path: str, mtime_ns: int) -> Any:
    import onnxruntime

    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def chain_with_onnxruntime(
    zoo_dir: Path, choices: Sequence[int], inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run a stitched variant with plain ONNX Runtime, reading only ``manifest.json``."""
    import json

    manifest = json.loads((zoo_dir / "manifest.json").read_text())
    by_key = {(e["position"], e["variant"]): e for e in manifest["subgraphs"]}
    carried = dict(inputs)
    for position, variant in enumerate(choices):
        entry = by_key[(position, variant)]
        session = _plain_session(str(zoo_dir / entry["path"]))
        outputs = session.run(entry["outputs"], {n: carried[n] for n in entry["inputs"]})
        carried = dict(zip(entry["outputs"], outputs, strict=True))
    return carried


def chain_metrics_with_onnxruntime(
    zoo_dir: Path, choices: Sequence[Sequence[int]], task: Any
) -> list[float]:
    """``task.score`` of each stitched variant by plain ONNX Runtime chains on the eval set.

    Like :func:`chain_with_onnxruntime`, but each distinct prefix runs once.
    """
    import json

    manifest = json.loads((zoo_dir / "manifest.json").read_text())
    by_key = {(e["position"], e["variant"]): e for e in manifest["subgraphs"]}
    prefixes: dict[tuple[int, ...], dict[str, np.ndarray]] = {(): dict(task.eval_inputs)}

    def outputs(prefix: tuple[int, ...]) -> dict[str, np.ndarray]:
        if prefix not in prefixes:
            carried = outputs(prefix[:-1])
            entry = by_key[(len(prefix) - 1, prefix[-1])]
            session = _plain_session(str(zoo_dir / entry["path"]))
            ran = session.run(entry["outputs"], {n: carried[n] for n in entry["inputs"]})
            prefixes[prefix] = dict(zip(entry["outputs"], ran, strict=True))
        return prefixes[prefix]

    return [task.score(outputs(tuple(c))) for c in choices]


# -- the real compressors -------------------------------------------------------------------

#: The default zoo's compressor kinds and the built-in classes that must provide them.
REAL_COMPRESSORS: dict[str, type] = {
    "unstructured": UnstructuredPruner,
    "structured": StructuredPruner,
    "int8": Int8Quantizer,
    "fp16": Fp16Converter,
}
COMPRESSORS_PLUGIN = "sparseloom.plugins.compressors"


def require_real_compressors() -> None:
    """Fail unless the registry's default compressors are the built-in ones.

    The registry records a plugin that fails to import instead of raising, so a broken
    built-in compressor module would otherwise leave the zoo tests without compressors (or,
    with a stand-in registered, passing on the stand-in). This names what is missing and the
    registry's recorded failures.
    """
    registry = get_registry()
    found = {r.name: r for r in registry.compressors()}
    wrong = [
        f"{name}: {found[name].factory!r} from plugin {found[name].plugin!r}"
        if name in found else f"{name}: not registered"
        for name, factory in REAL_COMPRESSORS.items()
        if name not in found
        or found[name].factory is not factory
        or found[name].plugin != COMPRESSORS_PLUGIN
    ]
    if wrong:
        failures = "; ".join(f"{f.plugin}: {f.error}" for f in registry.failures) or "none"
        raise AssertionError(
            f"the built-in compressors are not the registered ones ({'; '.join(wrong)}); "
            f"plugin failures recorded by the registry: {failures}"
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
