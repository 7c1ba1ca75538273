"""Tiny real ONNX models for the backend, processor, inference and CLI tests (onnx.helper only).

* :func:`conv_net`: Conv-Relu-MaxPool-Conv-Relu-GlobalAveragePool-Flatten-Gemm, dynamic batch.
* :func:`transformer_block`: a pre-norm transformer block on ``[N, 8, 16]``: LayerNormalization,
  2-head self-attention (MatMul, Softmax, Transpose, Reshape), residual, LayerNormalization,
  FFN with GELU, residual; dynamic batch.
* :func:`linear_model`: ``y = x @ W + b``, so results can be checked against numpy exactly.
* :func:`contrib_op_model`: a ``com.microsoft`` op that ONNX Runtime runs and OpenVINO cannot.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as helper
import onnx.numpy_helper as numpy_helper

FLOAT = onnx.TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers, opset: int = 20, extra_opsets=()):
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def conv_net(channels: int = 8, size: int = 16, classes: int = 10, seed: int = 0,
             batch: int | str = "N") -> onnx.ModelProto:
    """A small conv classifier on ``[batch, 3, size, size]`` → ``[batch, classes]``."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", rng.standard_normal((channels, 3, 3, 3)) * 0.3),
        _init("b1", rng.standard_normal(channels) * 0.1),
        _init("w2", rng.standard_normal((channels, channels, 3, 3)) * 0.2),
        _init("b2", rng.standard_normal(channels) * 0.1),
        _init("fc_w", rng.standard_normal((classes, channels)) * 0.3),
        _init("fc_b", rng.standard_normal(classes) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    return _model(nodes, [helper.make_tensor_value_info("image", FLOAT, [batch, 3, size, size])],
                  [helper.make_tensor_value_info("logits", FLOAT, [batch, classes])], inits)


def transformer_block(tokens: int = 8, dim: int = 16, heads: int = 2, seed: int = 0
                      ) -> onnx.ModelProto:
    """A pre-norm transformer block on ``[N, tokens, dim]`` (attention, LayerNorm, GELU)."""
    rng = np.random.default_rng(seed)
    head_dim = dim // heads

    def weight(name: str, rows: int, cols: int) -> onnx.TensorProto:
        return _init(name, rng.standard_normal((rows, cols)) / np.sqrt(rows))

    inits = [
        _init("ln1_g", 1 + 0.1 * rng.standard_normal(dim)),
        _init("ln1_b", 0.1 * rng.standard_normal(dim)),
        _init("ln2_g", 1 + 0.1 * rng.standard_normal(dim)),
        _init("ln2_b", 0.1 * rng.standard_normal(dim)),
        weight("wq", dim, dim), weight("wk", dim, dim), weight("wv", dim, dim),
        weight("wo", dim, dim), weight("w_up", dim, 4 * dim), weight("w_down", 4 * dim, dim),
        numpy_helper.from_array(np.array([0, 0, heads, head_dim], np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([0, 0, dim], np.int64), "merge_shape"),
        _init("scale", np.array(np.sqrt(head_dim))),
    ]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["h"], axis=-1, epsilon=1e-5),
        *[n("MatMul", ["h", f"w{p}"], [f"{p}_flat"]) for p in "qkv"],
        *[n("Reshape", [f"{p}_flat", "heads_shape"], [f"{p}_heads"]) for p in "qkv"],
        n("Transpose", ["q_heads"], ["q"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k_heads"], ["k_t"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v_heads"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "k_t"], ["scores_raw"]),
        n("Div", ["scores_raw", "scale"], ["scores"]),
        n("Softmax", ["scores"], ["attn"], axis=-1),
        n("MatMul", ["attn", "v"], ["context_heads"]),
        n("Transpose", ["context_heads"], ["context_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["context_t", "merge_shape"], ["context"]),
        n("MatMul", ["context", "wo"], ["attn_out"]),
        n("Add", ["x", "attn_out"], ["x1"]),
        n("LayerNormalization", ["x1", "ln2_g", "ln2_b"], ["h2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h2", "w_up"], ["up"]),
        n("Gelu", ["up"], ["act"]),
        n("MatMul", ["act", "w_down"], ["down"]),
        n("Add", ["x1", "down"], ["hidden"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, ["N", tokens, dim])],
                  [helper.make_tensor_value_info("hidden", FLOAT, ["N", tokens, dim])], inits)


def linear_weights(features: int = 6, outputs: int = 3, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The weights :func:`linear_model` uses."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((features, outputs)).astype(np.float32),
            rng.standard_normal(outputs).astype(np.float32))


def linear_model(features: int = 6, outputs: int = 3, batch: int | str = "N", seed: int = 0
                 ) -> onnx.ModelProto:
    """``y = x @ W + b`` with ``W, b = linear_weights(...)``."""
    weight, bias = linear_weights(features, outputs, seed)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [batch, features])],
                  [helper.make_tensor_value_info("y", FLOAT, [batch, outputs])],
                  [_init("W", weight), _init("b", bias)])


def contrib_op_model() -> onnx.ModelProto:
    """ONNX Runtime's ``com.microsoft`` Inverse on ``[N, 3, 3]``: OpenVINO has no converter."""
    node = helper.make_node("Inverse", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "contrib",
                              [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 3])],
                              [helper.make_tensor_value_info("y", FLOAT, ["N", 3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def save(model: onnx.ModelProto, path) -> str:
    """Save ``model`` to ``path`` and return the path as a string."""
    onnx.save(model, str(path))
    return str(path)


def big_matmul_model() -> onnx.ModelProto:
    """``y = x @ W`` with 4096 × 1024 float32 weights: 16 MiB that a load must hold."""
    weight = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    return _model([helper.make_node("MatMul", ["x", "W"], ["y"])],
                  [helper.make_tensor_value_info("x", 1, ["N", 4096])],
                  [helper.make_tensor_value_info("y", 1, ["N", 1024])],
                  [_init("W", weight)], opset=17)


def loaded_memory_in_fresh_process(path: str, spec: str) -> int:
    """``memory_bytes`` of ``path`` loaded on ``spec`` in a new Python process.

    The figure is RSS growth, a lower bound: in a long-lived process the allocator may hand the
    load pages that earlier work freed (seen here after ``bench backends`` ran ONNX Runtime on
    the same worker: 4 MiB read for 16 MiB of weights). A fresh process checks that the
    measurement counts the weights, free of other tests' allocator history.
    """
    import os
    import subprocess
    import sys

    code = ("from sparseloom.core.processors import get_backend, get_processor\n"
            f"p = get_processor({spec!r})\nb = get_backend(p.backend)\n"
            f"loaded = b.load(b.compile({path!r}, p), p)\nprint(loaded.memory_bytes)\n"
            "b.unload(loaded)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])
