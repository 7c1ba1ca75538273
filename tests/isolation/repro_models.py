"""The two models that crash native code on an AMD EPYC Zen 4, generated the way the published
reproductions do (``shared/repro`` in the project's steering repository):

* :func:`residual_mlp`: a small residual Gemm MLP; with its batch fixed to 1 OpenVINO 2026.4's
  CPU plugin crashes compiling it at f32 with one inference thread.
* :func:`encoder_pair`: a 3-layer transformer encoder and its float16 copy made by ONNX
  Runtime's own converter; ONNX Runtime 1.32 crashes building a CPU session of the float16 copy
  at ``ORT_ENABLE_ALL``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def residual_mlp(batch: int | str, width: int = 48, hidden: int = 64, depth: int = 2,
                 classes: int = 10, seed: int = 0,
                 weights: list[np.ndarray] | None = None) -> onnx.ModelProto:
    """``x [batch, width]`` → ``y [batch, classes]``: ``depth`` residual blocks of
    Relu-Gemm-Relu-Gemm-Add, then Relu-Gemm. ``weights`` (W, b pairs in order) replace the
    random ones."""
    rng = np.random.default_rng(seed)
    given = iter(weights or [])
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def gemm(x: str, n_in: int, n_out: int, name: str) -> str:
        w = next(given, None)
        w = w if w is not None else rng.standard_normal((n_out, n_in)) * 0.1
        b = next(given, None)
        b = b if b is not None else rng.standard_normal(n_out) * 0.1
        inits.append(numpy_helper.from_array(np.asarray(w, np.float32), name + "_w"))
        inits.append(numpy_helper.from_array(np.asarray(b, np.float32), name + "_b"))
        nodes.append(helper.make_node("Gemm", [x, name + "_w", name + "_b"], [name], transB=1))
        return name

    current = "x"
    for i in range(depth):
        nodes.append(helper.make_node("Relu", [current], [f"relu{i}a"]))
        h = gemm(f"relu{i}a", width, hidden, f"g{i}a")
        nodes.append(helper.make_node("Relu", [h], [f"relu{i}b"]))
        h2 = gemm(f"relu{i}b", hidden, width, f"g{i}b")
        nodes.append(helper.make_node("Add", [current, h2], [f"add{i}"]))
        current = f"add{i}"
    nodes.append(helper.make_node("Relu", [current], ["relu_out"]))
    gemm("relu_out", width, classes, "y")
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def encoder_pair(folder: Path, d: int = 256, layers: int = 3) -> tuple[Path, Path]:
    """(f32 encoder, its float16 copy) on ``tokens [n, 64, 9]`` → ``hidden [n, 64, d]``,
    random weights (seed 0), written to ``folder``."""
    import torch
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from torch import nn

    torch.manual_seed(0)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(9, d)
            layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.enc(self.embed(x))

    f32, f16 = folder / "encoder.onnx", folder / "encoder_fp16.onnx"
    torch.onnx.export(Encoder().eval(), (torch.randn(1, 64, 9),), str(f32),
                      input_names=["tokens"], output_names=["hidden"],
                      dynamic_axes={"tokens": {0: "n"}, "hidden": {0: "n"}}, dynamo=False,
                      opset_version=17)
    onnx.save(convert_float_to_float16(onnx.load(str(f32)), keep_io_types=True), str(f16))
    return f32, f16
