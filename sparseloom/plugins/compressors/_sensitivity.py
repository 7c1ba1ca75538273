"""Which layers of a subgraph stay float32 when compressing them costs too much accuracy.

Written for INT8 (below); ``lowrank`` uses the same search with its own per-layer probe.

Quantizing every Conv/Gemm/MatMul of a subgraph can wreck it where one layer is fragile: the
``speech`` task's front end (a DFT written as a strided Conv, then a mel MatMul, then a log)
took the whole model from 0.98 to 0.46 in INT8, and 0.98 again with those two layers left in
float32 (2026-12-03, AMD EPYC). :func:`keep_float` finds such layers from calibration data
alone: it measures the quantized subgraph's output error against float32 on the calibration
batches and, when that error is above a bound, each layer's error quantized alone (the float
model with that one layer's INT8 ranges and weights from the quantized one, no quantizer run:
:func:`only_layer`), then leaves the fewest of the most sensitive layers in float32 that bring
the error under the bound (a bisection over how many, at most a share of the layers). No labels,
no training: the same batches that set the INT8 ranges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.plugins.compressors._common import note

if TYPE_CHECKING:
    import onnx

__all__ = ["Mixed", "keep_float", "only_layer", "output_error", "within_error"]

Quantize = Callable[[Sequence[str], bool], "onnx.ModelProto"]


@attrs.frozen
class Mixed:
    """The compressed subgraph chosen, the layers left float32 (uncompressed), its output error
    and the error with every layer compressed."""

    model: onnx.ModelProto
    float_nodes: tuple[str, ...]
    error: float
    error_all_compressed: float


def _outputs(model: onnx.ModelProto, batches: Sequence[Mapping[str, np.ndarray]]
             ) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3  # not the unused-initializer notes of a probe model
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    out: list[np.ndarray] = []
    for batch in batches:
        values = session.run(names, dict(batch))
        out.extend(np.asarray(v, dtype=np.float64).ravel() for v in values
                   if np.asarray(v).dtype.kind == "f")
    return out


def output_error(reference: Sequence[np.ndarray], model: onnx.ModelProto,
                 batches: Sequence[Mapping[str, np.ndarray]]) -> float:
    """Relative L2 error of ``model``'s float outputs on ``batches`` against ``reference``
    (the float32 subgraph's outputs on the same batches, from :func:`_outputs`)."""
    got = _outputs(model, batches)
    scale = math.sqrt(sum(float(np.dot(r, r)) for r in reference)) or 1.0
    diff = math.sqrt(sum(float(np.dot(g - r, g - r)) for g, r in zip(got, reference,
                                                                     strict=True)))
    return diff / scale


def only_layer(dense: onnx.ModelProto, quantized: onnx.ModelProto, name: str
               ) -> onnx.ModelProto:
    """``dense`` with only layer ``name`` in INT8, with the ranges and weights it has in the
    QDQ model ``quantized``: each of its inputs that ``quantized`` dequantizes is quantized
    and dequantized the same way in a copy of ``dense`` (no quantizer run)."""
    from onnx import helper

    model = type(dense)()
    model.CopyFrom(dense)
    q_inits = {i.name: i for i in quantized.graph.initializer}
    producers = {o: n for n in quantized.graph.node for o in n.output}
    q_node = next((n for n in quantized.graph.node if n.name == name), None)
    node = next((n for n in model.graph.node if n.name == name), None)
    if q_node is None or node is None:
        return model
    have = {i.name for i in model.graph.initializer}

    def copy_initializer(init_name: str) -> None:
        if init_name and init_name not in have:
            model.graph.initializer.append(q_inits[init_name])
            have.add(init_name)

    added = []
    for index, tensor in enumerate(q_node.input[: len(node.input)]):
        dq = producers.get(tensor)
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        source = dq.input[0]
        for extra in dq.input[1:]:
            copy_initializer(extra)
        target = f"{name}__int8_in{index}"
        if source in q_inits:  # a weight: its int8 copy, dequantized
            copy_initializer(source)
            added.append(helper.make_node("DequantizeLinear", list(dq.input), [target],
                                          name=f"{target}_dq", **_attributes(dq)))
        else:
            q = producers.get(source)
            if q is None or q.op_type != "QuantizeLinear":
                continue
            for extra in q.input[1:]:
                copy_initializer(extra)
            quantized_name = f"{target}_q"
            added.append(helper.make_node("QuantizeLinear", [q.input[0], *q.input[1:]],
                                          [quantized_name], name=f"{target}_ql",
                                          **_attributes(q)))
            added.append(helper.make_node("DequantizeLinear", [quantized_name, *dq.input[1:]],
                                          [target], name=f"{target}_dq", **_attributes(dq)))
        node.input[index] = target
    position = list(model.graph.node).index(node)
    for offset, extra_node in enumerate(added):
        model.graph.node.insert(position + offset, extra_node)
    return model


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def keep_float(dense: onnx.ModelProto, quantize: Quantize, nodes: Sequence[str],
               batches: Sequence[Mapping[str, np.ndarray]], max_error: float,
               max_float_share: float,
               alone: Callable[[str], onnx.ModelProto] | None = None) -> Mixed:
    """The INT8 subgraph with the fewest float32 layers whose output error is at most
    ``max_error``, leaving at most ``max_float_share`` of ``nodes`` in float32 (the most
    accurate one found, when no such share is enough).

    :param quantize: ``quantize(exclude, probe)`` → the subgraph quantized with the
        ``exclude`` layers left in float32; ``probe``: ranges from a few calibration batches
        (a search step, not the model returned).
    :param nodes: the names of the layers ``quantize`` would quantize.
    :param batches: the calibration batches the errors are measured on.
    :param alone: ``alone(name)`` → the subgraph with only layer ``name`` compressed, to rank
        the layers; default: that layer's INT8 weights and ranges from the quantized
        subgraph (:func:`only_layer`). Other compressors (``lowrank``) pass their own.
    """
    reference = _outputs(dense, batches)
    every = quantize((), False)
    first = output_error(reference, every, batches)
    if first <= max_error or not nodes:
        return Mixed(every, (), first, first)
    one = alone or (lambda name: only_layer(dense, every, name))
    own = {name: output_error(reference, one(name), batches) for name in nodes}
    order = sorted(nodes, key=lambda name: -own[name])
    cap = max(1, math.floor(max_float_share * len(nodes)))
    # The error falls as more of the most sensitive layers stay float: bisect the fewest.
    tried: dict[int, float] = {}

    def error_with(count: int) -> float:
        if count not in tried:
            model = quantize(tuple(order[:count]), True)
            tried[count] = output_error(reference, model, batches)
        return tried[count]

    low, high = 0, cap
    if error_with(high) > max_error:
        low = high
    while high - low > 1:
        middle = (low + high) // 2
        if error_with(middle) <= max_error:
            high = middle
        else:
            low = middle
    count = min(tried, key=lambda c: (tried[c] > max_error, c if tried[c] <= max_error
                                      else tried[c]))
    chosen = tuple(order[:count])
    if not chosen:
        return Mixed(every, (), first, first)
    model = quantize(chosen, False)
    return Mixed(model, chosen, output_error(reference, model, batches), first)


def within_error(dense: onnx.ModelProto, compress: Quantize, layers: Sequence[str],
                 batches: Sequence[Mapping[str, np.ndarray]], max_error: float | None,
                 max_share: float, *, label: str, kept: str = "float32 layers",
                 alone: Callable[[str], onnx.ModelProto] | None = None) -> onnx.ModelProto:
    """``dense`` compressed with every layer compressed where ``max_error`` is ``None`` or no
    ``batches`` are given, else with the fewest of its most sensitive layers left as they
    were (:func:`keep_float`), those named in the model's doc string.

    :param compress: ``compress(exclude, probe)`` → ``dense`` compressed but ``exclude``.
    :param label: what compressed it, in the note (``"INT8"``, ``"lowrank-0.5"``).
    :param kept: what the layers left alone are called in the note.
    """
    if max_error is None or not batches:
        return compress((), False)
    mixed = keep_float(dense, compress, layers, batches, max_error, max_share, alone=alone)
    if mixed.float_nodes:
        note(mixed.model, f"{kept} ({label} output error {mixed.error_all_compressed:.3g} → "
                          f"{mixed.error:.3g}): {', '.join(mixed.float_nodes)}")
    return mixed.model
