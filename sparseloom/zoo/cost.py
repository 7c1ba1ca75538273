"""The cost of each node of a prepared model: estimated FLOPs, or ONNX Runtime's profile.

The partitioner balances pieces by these costs (:mod:`sparseloom.zoo.partition`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Literal

import numpy as np
import onnx

from sparseloom.core.errors import ConfigError
from sparseloom.zoo.graph import TensorFact
from sparseloom.zoo.tensors import run_session, take_batch

CostKind = Literal["flops", "latency"]


def node_costs(
    prepared: onnx.ModelProto,
    facts: Mapping[str, TensorFact],
    values: Mapping[str, np.ndarray],
    *,
    cost: CostKind = "flops",
    sample_inputs: Mapping[str, np.ndarray] | None = None,
) -> list[float]:
    """Cost of each node of ``prepared``: FLOPs at batch 1, or measured ms with ``latency``."""
    if cost == "flops":
        shapes = {name: tuple(np.asarray(v).shape) for name, v in values.items()}
        shapes.update({i.name: tuple(i.dims) for i in prepared.graph.initializer})
        return [_node_flops(node, shapes) for node in prepared.graph.node]
    if cost == "latency":
        if sample_inputs is None:
            raise ConfigError("cost='latency' needs sample inputs to profile the model")
        return _profiled_node_ms(prepared, sample_inputs)
    raise ConfigError(f"unknown partition cost {cost!r}; use 'flops' or 'latency'")


def _node_flops(node: onnx.NodeProto, shapes: Mapping[str, tuple[int, ...]]) -> float:
    out_size = float(sum(np.prod(shapes[o]) for o in node.output if o in shapes))
    inputs = [shapes.get(i) for i in node.input]
    if node.op_type == "Conv" and len(inputs) > 1 and inputs[1] is not None:
        return 2.0 * out_size * float(np.prod(inputs[1][1:]))
    if node.op_type == "ConvTranspose" and len(inputs) > 1 and inputs[1] is not None:
        return 2.0 * float(np.prod(shapes.get(node.input[0], (1,)))) * float(
            np.prod(inputs[1][1:]))
    if node.op_type in ("MatMul", "Gemm", "MatMulInteger") and inputs and inputs[0]:
        first = inputs[0]
        transposed = any(a.name == "transA" and a.i for a in node.attribute)
        k = first[0] if (node.op_type == "Gemm" and transposed) else first[-1]
        return 2.0 * out_size * float(k)
    if node.op_type in ("LSTM", "GRU", "RNN") and len(inputs) > 2 and inputs[1] and inputs[2]:
        steps = float(inputs[0][0]) if inputs[0] else 1.0
        return 2.0 * float(np.prod(inputs[1]) + np.prod(inputs[2])) * steps
    return out_size


def _profiled_node_ms(
    prepared: onnx.ModelProto, sample_inputs: Mapping[str, np.ndarray], runs: int = 5
) -> list[float]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = os.path.join(folder, "partition")
        session = onnxruntime.InferenceSession(
            prepared.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        feeds = take_batch(sample_inputs, 0, 1)
        for _ in range(runs + 1):
            run_session(session, feeds)
        with open(session.end_profiling()) as handle:
            events = json.load(handle)
    totals: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            node_name = event["name"][: -len("_kernel_time")]
            totals[node_name] = totals.get(node_name, 0.0) + event.get("dur", 0) / 1000.0
    return [totals.get(node.name, 0.0) / runs for node in prepared.graph.node]
