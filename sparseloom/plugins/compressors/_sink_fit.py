"""What happens to the consumers ("sinks") of a pruned channel group.

:mod:`sparseloom.plugins.compressors.structured` removes channels; each layer that read them
is compensated here: by default its kept weights and bias are re-fitted by ridge least squares
on calibration activations (:func:`refit_sink`, on input rows of a Gemm/MatMul or im2col
patches of a Conv), else the removed channels' mean contribution is folded into its bias
(:func:`fold_into_bias`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sparseloom.plugins.compressors._channel_groups import ChannelGraph, Sink, attr
from sparseloom.plugins.compressors._common import replace_initializer

if TYPE_CHECKING:
    import onnx


#: Per sink (keyed by its node's first output): sampled input rows, float64, one row per token
#: or output pixel, features in the order of the sink's weight matrix (see :func:`sink_matrix`).
Rows = dict[str, np.ndarray]

#: Calibration rows (tokens or output pixels) a sink's refit is solved on, spread evenly over
#: the calibration batches. A cap on memory and solve time (4096 rows of a 3×3 Conv over 256
#: channels are 75 MB in float64), well above the unknowns per output of common layers (576 for
#: a 3×3 Conv over 64 kept channels). 1024, 4096 and 16384 gave the same held-out accuracy
#: within one image on the test CNN/transformer and the tiny ResNet, at levels 0.25–0.75.
REFIT_ROWS = 4096
#: Ridge strength of the refit, relative to the mean diagonal of the kept inputs' centred Gram
#: matrix (scale-free). It pulls the weight change towards zero (towards the plain bias fold)
#: where the calibration data leaves a direction undetermined, e.g. a channel that never fires.
#: 1e-4 to 1e-2 measured alike on the models above; 1e-1 lost up to 1.3 points (transformer
#: part 0 at 0.75: 0.944 → 0.931).
REFIT_RIDGE = 1e-3


def feature_rows(array: np.ndarray, axis: int) -> np.ndarray:
    """``array`` as (samples, features) with the channel axis (counted from the end) last."""
    return np.moveaxis(array, array.ndim + axis, -1).reshape(-1, array.shape[axis])


def _pick(rng: np.random.Generator, total: int, count: int) -> np.ndarray:
    """``count`` of ``range(total)`` (all when ``total <= count``), sorted."""
    if total <= count:
        return np.arange(total)
    return np.sort(rng.choice(total, size=count, replace=False))


def draw_rows(model: onnx.ModelProto, sink: Sink, value: np.ndarray, count: int,
                 rng: np.random.Generator) -> np.ndarray:
    """``count`` rows of the sink's input as its weight matrix reads them (float64)."""
    node = model.graph.node[sink.node]
    if node.op_type == "Conv":
        weight = next(i for i in model.graph.initializer if i.name == sink.weight)
        return conv_patches(node, [int(k) for k in weight.dims[2:]], value, count, rng)
    rows = feature_rows(value, sink.axis)
    return rows[_pick(rng, rows.shape[0], count)].astype(np.float64)


def _conv_padding(node: onnx.NodeProto, spatial: Sequence[int], kernel: Sequence[int],
                  strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(begin, end) padding per spatial axis, from ``pads`` or ``auto_pad`` as ONNX defines."""
    auto_pad = attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    rank = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        padding = []
        for size, k, stride, dilation in zip(spatial, kernel, strides, dilations, strict=True):
            total = max(0, (-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size)
            small = total // 2
            padding.append((small, total - small) if auto_pad == "SAME_UPPER"
                           else (total - small, small))
        return padding
    if auto_pad == "VALID":
        return [(0, 0)] * rank
    pads = list(attr(node, "pads", [0] * 2 * rank))
    return list(zip(pads[:rank], pads[rank:], strict=True))


def conv_patches(node: onnx.NodeProto, kernel: Sequence[int], value: np.ndarray, count: int,
                  rng: np.random.Generator) -> np.ndarray:
    """im2col: ``count`` sampled output positions of a group=1 Conv with ``kernel`` reading
    ``value`` (N, C, *spatial), each as the (C·k₁·k₂·…) input patch its output is made from."""
    spatial = value.shape[2:]
    rank = len(kernel)
    strides = [int(x) for x in attr(node, "strides", [1] * rank)]
    dilations = [int(x) for x in attr(node, "dilations", [1] * rank)]
    padding = _conv_padding(node, spatial, kernel, strides, dilations)
    padded = np.pad(value, [(0, 0), (0, 0), *padding])
    out = [(padded.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
           for i in range(rank)]
    flat = _pick(rng, value.shape[0] * int(np.prod(out)), count)
    position = np.unravel_index(flat, (value.shape[0], *out))
    # One broadcast index per axis of the channels-last input: (rows, k₁, k₂, …) in all.
    index: list[np.ndarray] = [position[0].reshape(-1, *[1] * rank)]
    for i in range(rank):
        offsets = position[1 + i][:, None] * strides[i] + np.arange(kernel[i]) * dilations[i]
        shape = [-1] + [1] * rank
        shape[1 + i] = kernel[i]
        index.append(offsets.reshape(shape))
    patches = np.moveaxis(padded, 1, -1)[tuple(index)]  # (rows, k₁, …, C)
    return np.moveaxis(patches, -1, 1).reshape(len(flat), -1).astype(np.float64)


def sink_matrix(node: onnx.NodeProto, weight: np.ndarray, weight_axis: int) -> np.ndarray:
    """The sink's weight as a (input features, outputs) matrix; a Conv's input features are
    channel-major patches (channel · kernel positions), as :func:`conv_patches` orders them."""
    if node.op_type == "Conv":
        return np.moveaxis(weight, 0, -1).reshape(-1, weight.shape[0])
    return weight if weight_axis == 0 else weight.T


def _from_sink_matrix(node: onnx.NodeProto, matrix: np.ndarray, like: np.ndarray,
                      weight_axis: int) -> np.ndarray:
    """The inverse of :func:`sink_matrix`, back to the shape of ``like``."""
    if node.op_type == "Conv":
        return np.moveaxis(matrix.reshape(*like.shape[1:], like.shape[0]), -1, 0)
    return matrix if weight_axis == 0 else matrix.T


def refit_sink(model: onnx.ModelProto, graph: ChannelGraph, sink: Sink, keep: np.ndarray,
                rows: np.ndarray, dense_rows: np.ndarray | None) -> None:
    """Re-fit ``sink``'s kept weights and its bias to its dense output (ridge least squares).

    ``rows`` are the sink's inputs in the model pruned so far (all channels of this group still
    present), ``dense_rows`` the same positions in the dense subgraph. With ``X`` the kept
    columns of ``rows``, ``W`` the sink's weight matrix and ``R = dense_rows·W − X·W_kept`` what
    the kept channels miss, the weight change ``Δ`` and bias change ``d`` minimise
    ``‖X·Δ + d − R‖² + λ‖Δ‖²``. At Δ = 0 the best ``d`` is the mean bias fold (for a Conv
    without its padding-border error), so on the rows it is fitted on the refit never does worse
    than the fold; λ (:data:`REFIT_RIDGE`) pulls Δ towards that fold. Without a place for a
    bias (a MatMul with no single constant Add, a Gemm with ``beta = 0``, a shared bias) it is
    fitted without ``d``. The updated full-size weight goes into ``graph.arrays`` for
    :func:`_apply` to slice.
    """
    node = model.graph.node[sink.node]
    weight = graph.arrays[sink.weight]
    matrix = sink_matrix(node, weight.astype(np.float64), sink.weight_axis)
    # Features per channel: a Conv's kernel positions, else the sink's block (1, or H·W after a
    # Flatten).
    kept_rows = channel_rows(keep, int(np.prod(weight.shape[2:])) if node.op_type == "Conv"
                      else sink.block)
    kept = rows[:, kept_rows]
    target = (rows if dense_rows is None else dense_rows) @ matrix
    residual = target - kept @ matrix[kept_rows]
    with_bias = _bias_input(model, graph, sink) is not None
    kept_mean = kept.mean(0) if with_bias else np.zeros(kept.shape[1])
    residual_mean = residual.mean(0) if with_bias else np.zeros(residual.shape[1])
    centred = kept - kept_mean
    gram = centred.T @ centred
    ridge = max(REFIT_RIDGE * float(np.mean(np.diag(gram))), 1e-12)
    change = np.linalg.solve(gram + ridge * np.eye(gram.shape[0]),
                             centred.T @ (residual - residual_mean))
    updated = matrix.copy()
    updated[kept_rows] += change
    graph.arrays[sink.weight] = _from_sink_matrix(
        node, updated, weight, sink.weight_axis).astype(weight.dtype)
    if with_bias:
        _add_to_bias(model, graph, sink, residual_mean - kept_mean @ change)


def channel_rows(keep: np.ndarray, block: int) -> np.ndarray:
    return (keep[:, None] * block + np.arange(block)[None, :]).ravel()


def fold_into_bias(model: onnx.ModelProto, graph: ChannelGraph, sink: Sink,
                    removed_rows: np.ndarray, mean: np.ndarray) -> None:
    """Add the removed features' mean contribution to the sink's output bias, if it has one."""
    weight = graph.arrays[sink.weight].astype(np.float64)
    taken = np.moveaxis(np.take(weight, removed_rows, axis=sink.weight_axis), sink.weight_axis, 0)
    # Contract removed input features with their means; sum any kernel dims (Conv).
    delta = np.tensordot(mean[removed_rows], taken, axes=(0, 0))
    if delta.ndim > 1:
        delta = delta.reshape(delta.shape[0], -1).sum(1)
    _add_to_bias(model, graph, sink, delta)


def _bias_input(model: onnx.ModelProto, graph: ChannelGraph, sink: Sink) -> str | None:
    """Where a constant added to the sink's output goes: its bias initializer, ``""`` when a
    Conv/Gemm has none yet (one is created), ``None`` when there is nowhere to put it."""
    node = model.graph.node[sink.node]
    if node.op_type == "Gemm":
        if float(attr(node, "beta", 1.0)) == 0.0:
            return None
        bias_name = node.input[2] if len(node.input) > 2 else ""
    elif node.op_type == "Conv":
        bias_name = node.input[2] if len(node.input) > 2 else ""
    else:  # MatMul: its bias is a following Add with a constant, if there is exactly one
        consumers = graph.consumers.get(node.output[0], [])
        adds = [model.graph.node[i] for i, _ in consumers
                if model.graph.node[i].op_type == "Add"]
        constants = [n for a in adds for n in a.input if graph.const(n) is not None]
        if len(consumers) != 1 or len(constants) != 1:
            return None
        bias_name = constants[0]
    if bias_name and graph.uses[bias_name] != 1:
        return None
    return bias_name


def _add_to_bias(model: onnx.ModelProto, graph: ChannelGraph, sink: Sink,
                 delta: np.ndarray) -> None:
    """Add ``delta`` (per output, in units of the sink's input times weight) to its bias."""
    from onnx import numpy_helper

    bias_name = _bias_input(model, graph, sink)
    if bias_name is None:
        return
    node = model.graph.node[sink.node]
    if node.op_type == "Gemm":
        delta = delta * float(attr(node, "alpha", 1.0)) / float(attr(node, "beta", 1.0))
    if not bias_name:
        bias_name = f"{sink.weight}__pruned_bias"
        while len(node.input) < 2:
            node.input.append("")
        if len(node.input) == 2:
            node.input.append(bias_name)
        else:
            node.input[2] = bias_name
        model.graph.initializer.append(numpy_helper.from_array(
            delta.astype(np.float32), bias_name))
        graph.arrays[bias_name] = delta.astype(np.float32)
        graph.uses[bias_name] = 1
        return
    bias = graph.arrays[bias_name]
    updated = (bias.astype(np.float64) + delta).astype(np.float32)
    graph.arrays[bias_name] = updated
    init = next(i for i in model.graph.initializer if i.name == bias_name)
    replace_initializer(init, updated)
