"""Channel-group analysis for structured pruning, on a raw ONNX graph.

A *channel group* starts at a producer (Conv with ``group=1``, Gemm, or MatMul with a constant
2-D weight) and follows its output through channel-preserving ops (activations, elementwise ops
with constants, BatchNormalization, pooling, depthwise Conv, Flatten) to *sinks* that contract
the channels away (the next Conv's input channels, the next Gemm/MatMul's weight rows). A group
is prunable only if every path ends in a sink: a tensor that is a subgraph output, feeds a
residual Add, a Reshape (attention heads), a LayerNorm, a Softmax or any other op keeps all its
channels, and the reason is reported.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    import onnx

#: Elementwise ops whose first input carries the channels straight through.
_UNARY = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu", "Elu", "Selu", "Celu", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Neg", "Abs", "Exp", "Log",
    "Sqrt", "Reciprocal", "Identity", "Dropout", "Cast", "Clip", "Floor", "Ceil", "Round",
})
#: Broadcasting elementwise ops; every operand must be in the group or a constant.
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu"})
#: Ops on NCHW tensors that keep the channel axis (axis 1).
_POOLS = frozenset({
    "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
})
_NORMS = {"BatchNormalization": 5, "InstanceNormalization": 3}
_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


class Blocked(Exception):
    """Raised inside the group analysis with the reason a group cannot be pruned."""


@dataclass(frozen=True)
class Sink:
    """A node that contracts a group's channels away: the next layer's weight rows.

    Attributes:
        node: index of the node in the graph.
        tensor: its input that carries the group's channels.
        weight: its weight initializer.
        weight_axis: the weight axis matching the channels.
        axis: the channel axis of ``tensor``, counted from the end (-1 = last).
        block: features per channel on that axis (> 1 after a Flatten of C×H×W).
    """

    node: int
    tensor: str
    weight: str
    weight_axis: int
    axis: int
    block: int


@dataclass
class Group:
    """What removing channels of one producer touches."""

    producer: str
    channels: int
    #: (initializer, axis, block): remove entries ``c*block .. c*block+block-1`` on ``axis``.
    #: The first edit is always the producer's weight, sliced on its output-channel axis.
    edits: list[tuple[str, int, int]] = field(default_factory=list)
    #: depthwise Conv nodes whose ``group`` attribute becomes the kept channel count.
    depthwise: list[int] = field(default_factory=list)
    sinks: list[Sink] = field(default_factory=list)


def attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """Attribute ``name`` of ``node`` (an int, float, string, tensor or list, by its ONNX type),
    or ``default`` when the node does not set it."""
    import onnx

    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _known(dims: tuple[int | None, ...]) -> tuple[int, ...] | None:
    """``dims`` if every dimension is known, else ``None``."""
    known = tuple(d for d in dims if d is not None)
    return known if len(known) == len(dims) else None


def constants_to_initializers(model: onnx.ModelProto) -> None:
    """Turn ``Constant`` nodes into initializers so every constant is sliceable in one place."""
    from onnx import helper, numpy_helper

    keep = []
    for node in model.graph.node:
        value = None
        if node.op_type == "Constant" and len(node.attribute) == 1:
            attribute = node.attribute[0]
            raw = helper.get_attribute_value(attribute)
            if attribute.name == "value":
                value = numpy_helper.to_array(raw)
            elif attribute.name in ("value_float", "value_floats"):
                value = np.asarray(raw, dtype=np.float32)
            elif attribute.name in ("value_int", "value_ints"):
                value = np.asarray(raw, dtype=np.int64)
        if value is None:
            keep.append(node)
        else:
            model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
    del model.graph.node[:]
    model.graph.node.extend(keep)


@attrs.define(eq=False)
class ChannelGraph:
    """Indexes over one model for the channel-group analysis."""

    model: onnx.ModelProto
    arrays: dict[str, np.ndarray] = attrs.field(init=False)
    consumers: dict[str, list[tuple[int, int]]] = attrs.field(init=False)
    uses: dict[str, int] = attrs.field(init=False)
    dims: dict[str, tuple[int | None, ...]] = attrs.field(init=False)
    outputs: set[str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        import onnx
        from onnx import numpy_helper

        graph = self.model.graph
        inputs = {i.name for i in graph.input}
        self.arrays = {
            init.name: numpy_helper.to_array(init)
            for init in graph.initializer if init.name not in inputs
        }
        self.consumers = defaultdict(list)
        self.uses = defaultdict(int)
        for index, node in enumerate(graph.node):
            for position, name in enumerate(node.input):
                self.consumers[name].append((index, position))
                self.uses[name] += 1
        bare = onnx.ModelProto()
        bare.CopyFrom(self.model)
        del bare.graph.value_info[:]  # stale after earlier groups were sliced
        inferred = onnx.shape_inference.infer_shapes(bare)
        self.dims = {}
        for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            shape = value.type.tensor_type.shape
            self.dims[value.name] = tuple(
                d.dim_value if d.HasField("dim_value") else None for d in shape.dim
            )
        self.outputs = {o.name for o in graph.output}

    def const(self, name: str) -> np.ndarray | None:
        """The value of constant ``name``, or ``None`` if it is computed or a graph input."""
        return self.arrays.get(name)

    def sliceable(self, name: str, why: str) -> str:
        """``name`` if only one node reads it (so slicing it changes nothing else)."""
        if self.uses[name] != 1:
            raise Blocked(f"{why} {name!r} is shared by {self.uses[name]} nodes")
        return name

    def producer_group(self, index: int) -> Group | None:
        """The group started by node ``index``, or ``None`` if it is no producer."""
        node = self.model.graph.node[index]
        if len(node.input) < 2 or self.const(node.input[0]) is not None:
            return None
        weight = self.const(node.input[1])
        if weight is None:
            return None
        if node.op_type == "Conv" and attr(node, "group", 1) == 1:
            axis_neg, weight_axis, has_bias = 1 - weight.ndim, 0, True
        elif node.op_type == "Gemm" and weight.ndim == 2:
            axis_neg, weight_axis, has_bias = -1, 0 if attr(node, "transB", 0) else 1, True
        elif node.op_type == "MatMul" and weight.ndim == 2:
            axis_neg, weight_axis, has_bias = -1, 1, False  # its bias is a following Add
        else:
            return None
        channels = int(weight.shape[weight_axis])
        group = Group(node.name or node.output[0], channels)
        group.edits.append((self.sliceable(node.input[1], "weight"), weight_axis, 1))
        if has_bias and len(node.input) > 2 and node.input[2]:
            bias = self.const(node.input[2])
            if bias is None:
                raise Blocked(f"bias {node.input[2]!r} is not a constant")
            if bias.ndim and bias.shape[-1] == channels:
                group.edits.append((self.sliceable(node.input[2], "bias"), bias.ndim - 1, 1))
            elif bias.size != 1:
                raise Blocked(f"bias {node.input[2]!r} of shape {bias.shape} is not per channel")
        self._follow(group, node.output[0], axis_neg)
        return group

    def _follow(self, group: Group, start: str, axis_neg: int) -> None:
        """Walk every consumer of the producer's output; raise :class:`Blocked` if one fails."""
        nodes = self.model.graph.node
        carried: dict[str, tuple[int, int]] = {start: (axis_neg, 1)}  # tensor -> (axis, block)
        required: dict[str, tuple[int, int]] = {}
        queue, visited = [start], set()
        while queue:
            tensor = queue.pop()
            axis, block = carried[tensor]
            if tensor in self.outputs:
                raise Blocked(f"tensor {tensor!r} is a subgraph output")
            for index, position in self.consumers.get(tensor, []):
                if index in visited:
                    continue
                visited.add(index)
                node = nodes[index]
                for name, state in self._step(group, node, index, position, axis, block).items():
                    if name.startswith("?"):
                        required[name[1:]] = state
                    elif name not in carried:
                        carried[name] = state
                        queue.append(name)
        for name, state in required.items():
            if carried.get(name) != state:
                raise Blocked(f"tensor {name!r} mixes channels with another input "
                               f"(a residual or a second branch)")

    def _step(self, group: Group, node: onnx.NodeProto, index: int, position: int,
              axis: int, block: int) -> dict[str, tuple[int, int]]:
        """Handle one consumer; return the tensors it carries on (``?name``: must be carried)."""
        op = node.op_type
        rank = len(self.dims.get(node.input[position], ()))
        channel_axis = rank + axis if rank else None
        extra_outputs = [o for o in node.output[1:] if o and self.consumers.get(o)]
        if extra_outputs:
            raise Blocked(f"{op} node {node.name!r} uses its extra outputs {extra_outputs}")
        state = (axis, block)
        if op in _UNARY and position == 0:
            if op == "Cast" and attr(node, "to", 1) not in _FLOAT_TYPES:
                raise Blocked(f"Cast node {node.name!r} leaves floating point")
            for name in node.input[1:]:
                if name and ((value := self.const(name)) is None or value.size != 1):
                    raise Blocked(f"{op} node {node.name!r} has a non-scalar operand {name!r}")
            return {node.output[0]: state}
        if op in _BROADCAST:
            carried = {node.output[0]: state}
            for name in node.input:
                value = self.const(name)
                if value is None:
                    carried["?" + name] = state
                elif value.ndim >= -axis and value.shape[value.ndim + axis] != 1:
                    if value.shape[value.ndim + axis] != group.channels * block:
                        raise Blocked(f"constant {name!r} of {node.name!r} does not broadcast")
                    group.edits.append((self.sliceable(name, "constant"), value.ndim + axis,
                                        block))
            return carried
        if channel_axis == 1 and block == 1 and position == 0:
            if op in _POOLS:
                return {node.output[0]: state}
            if op in _NORMS:
                for name in node.input[1:_NORMS[op]]:
                    group.edits.append((self.sliceable(name, f"{op} parameter"), 0, 1))
                return {node.output[0]: state}
            weight = self.const(node.input[1]) if op == "Conv" else None
            if weight is not None and attr(node, "group", 1) == 1:
                return self._sink(group, index, node, 1, axis, block)
            if (weight is not None and attr(node, "group", 1) == group.channels
                    and weight.shape[:2] == (group.channels, 1)):
                group.edits.append((self.sliceable(node.input[1], "weight"), 0, 1))
                if len(node.input) > 2 and node.input[2]:
                    group.edits.append((self.sliceable(node.input[2], "bias"), 0, 1))
                group.depthwise.append(index)
                return {node.output[0]: state}
        gemm_sink = op == "Gemm" and position == 0 and axis == -1
        if gemm_sink and not attr(node, "transA", 0) and self.const(node.input[1]) is not None:
            return self._sink(group, index, node, 1 if attr(node, "transB", 0) else 0, axis, block)
        if op == "MatMul" and position == 0 and axis == -1:
            weight = self.const(node.input[1])
            if weight is not None and weight.ndim == 2:
                return self._sink(group, index, node, 0, axis, block)
        if op == "Flatten" and channel_axis is not None:
            shape = self.dims[node.input[position]]
            flatten_axis = int(attr(node, "axis", 1)) % rank
            inner = _known(shape[channel_axis + 1 :])
            between = _known(shape[flatten_axis:channel_axis])
            if (flatten_axis <= channel_axis and inner is not None
                    and between is not None and int(np.prod(between)) == 1):
                return {node.output[0]: (-1, block * int(np.prod(inner)))}
        raise Blocked(f"its channels reach {op} node {node.name!r}, which must keep them")

    def _sink(self, group: Group, index: int, node: onnx.NodeProto, weight_axis: int,
              axis: int, block: int) -> dict[str, tuple[int, int]]:
        weight = self.sliceable(node.input[1], "weight")
        group.edits.append((weight, weight_axis, block))
        group.sinks.append(Sink(index, node.input[0], weight, weight_axis, axis, block))
        return {}
