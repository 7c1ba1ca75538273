"""ONNX graph plumbing for the subgraph zoo: prepare a dense model, extract and merge pieces.

The partitioner (:mod:`sparseloom.zoo.partition`) decides *where* to cut; this module does
the graph surgery:

* :func:`prepare_model` folds constants into initializers, names every node and reorders the
  nodes so that each is emitted right after its inputs (a depth-first topological order that
  keeps short-lived tensors short-lived, which is what makes clean cut points visible);
* :func:`sparseloom.zoo.tensors.tensor_facts` runs the prepared model once at batch 1 and once
  at batch 2 to learn the dtype and shape of every tensor (and which dimensions follow the
  batch); :mod:`sparseloom.zoo.tensors` also runs plain ONNX Runtime sessions in batches.

Cutting and joining pieces lives in :mod:`sparseloom.zoo.extract`.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
import onnx
from onnx import helper, numpy_helper

from sparseloom.core.errors import ZooError

if TYPE_CHECKING:
    pass

#: Ops whose output must never be folded even when every input is a constant.
_NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
     "Bernoulli", "Dropout"}
)
#: Ops whose output depends only on the *shape* of their input, never on its values.
SHAPE_OPS = frozenset({"Shape", "Size"})
PRODUCER = "sparseloom"


@attrs.frozen
class TensorFact:
    """What one run of the dense model showed about a tensor.

    Attributes:
        dtype: numpy dtype name (``float32``, ``int64``, ``bool``).
        shape: dimensions; an ``int`` for a fixed one, a ``str`` for one that follows the batch
            or that the model declares symbolic.
        nbytes: size in bytes at batch 1.
    """

    dtype: str
    shape: tuple[int | str, ...]
    nbytes: int


def as_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    """``tuple(values)``, typed for attrs converters."""
    return tuple(values)


def model_hash(model: onnx.ModelProto) -> str:
    """SHA-256 of a model's serialised bytes (stable for one protobuf build)."""
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def load_model(model: onnx.ModelProto | str | Any) -> onnx.ModelProto:
    """Load ``model`` from a path, or return it unchanged when it is already a ``ModelProto``."""
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        return onnx.load(str(model))
    except Exception as error:  # OSError, protobuf DecodeError and friends
        raise ZooError(f"cannot load ONNX model {model}: {error}") from error


def node_inputs(node: onnx.NodeProto) -> list[str]:
    """Every tensor ``node`` reads: its inputs plus outer-scope names its subgraphs use."""
    names = [name for name in node.input if name]
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.HasField("g") else []
        graphs += list(attribute.graphs)
        for graph in graphs:
            names.extend(_outer_scope_names(graph))
    return names


def _outer_scope_names(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    used: list[str] = []
    for node in graph.node:
        for name in node_inputs(node):
            if name not in local:
                used.append(name)
        local.update(node.output)
    return used


# -- preparation --------------------------------------------------------------------------------


def prepare_model(model: onnx.ModelProto | str) -> onnx.ModelProto:
    """A copy of ``model`` ready to partition: constants folded, nodes named, reordered.

    The result computes exactly what ``model`` computes: ``Constant`` nodes and nodes whose
    inputs are all constants become initializers (so that weights never cross a cut), every
    node gets a unique name, and nodes are emitted in a depth-first order from the outputs.
    """
    prepared = onnx.ModelProto()
    prepared.CopyFrom(load_model(model))
    opset = next((o.version for o in prepared.opset_import if o.domain in ("", "ai.onnx")), 17)
    _fold_constants(prepared.graph, opset)
    _name_nodes(prepared.graph)
    _reorder_depth_first(prepared.graph)
    # Inference only adds value_info for internal tensors; facts come from running the model.
    with contextlib.suppress(Exception):
        prepared = onnx.shape_inference.infer_shapes(prepared, strict_mode=False, data_prop=True)
    return prepared


def _fold_constants(graph: onnx.GraphProto, opset: int) -> None:
    constants: dict[str, np.ndarray] = {}
    initializer_names = {i.name for i in graph.initializer}
    graph_inputs = {i.name for i in graph.input} - initializer_names
    kept: list[onnx.NodeProto] = []
    for node in graph.node:
        inputs = node_inputs(node)
        value: list[np.ndarray] | None = None
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = [_constant_value(node)]
        elif (
            node.domain in ("", "ai.onnx")
            and node.op_type not in _NONDETERMINISTIC_OPS
            and inputs
            and all(n in initializer_names or n in constants for n in inputs)
            and not any(a.HasField("g") or a.graphs for a in node.attribute)
            and not graph_inputs.intersection(inputs)
        ):
            value = _evaluate_node(graph, node, constants, opset)
        if value is None or len(value) != len(node.output):
            kept.append(node)
            continue
        for name, array in zip(node.output, value, strict=True):
            if name:
                constants[name] = array
                graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
                initializer_names.add(name)
    del graph.node[:]
    graph.node.extend(kept)
    _drop_unused_initializers(graph)


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    attribute = node.attribute[0]
    if attribute.name == "value":
        return numpy_helper.to_array(attribute.t)
    scalar = helper.get_attribute_value(attribute)
    dtypes = {"value_float": np.float32, "value_int": np.int64, "value_floats": np.float32,
              "value_ints": np.int64}
    if attribute.name in dtypes:
        return np.asarray(scalar, dtype=dtypes[attribute.name])
    if attribute.name == "sparse_value":
        sparse = attribute.sparse_tensor
        dense = np.zeros(tuple(sparse.dims), dtype=numpy_helper.to_array(sparse.values).dtype)
        indices = numpy_helper.to_array(sparse.indices)
        values = numpy_helper.to_array(sparse.values)
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
        return dense
    return np.asarray(scalar)


def _evaluate_node(
    graph: onnx.GraphProto, node: onnx.NodeProto, constants: Mapping[str, np.ndarray], opset: int
) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    if node.op_type == "Identity":
        return [_initializer_value(graph, node.input[0], constants)]
    try:
        feeds = {name: _initializer_value(graph, name, constants) for name in node.input if name}
        if sum(a.size for a in feeds.values()) > 1 << 24:
            return None
        inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in feeds]
        outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                   for n in node.output]
        single = helper.make_graph([node], "fold", inputs, outputs)
        evaluator = ReferenceEvaluator(helper.make_model(
            single, opset_imports=[helper.make_opsetid("", opset)]
        ))
        return [np.asarray(v) for v in evaluator.run(None, feeds)]
    except Exception:
        return None


def _initializer_value(
    graph: onnx.GraphProto, name: str, constants: Mapping[str, np.ndarray]
) -> np.ndarray:
    if name in constants:
        return constants[name]
    for initializer in graph.initializer:
        if initializer.name == name:
            return numpy_helper.to_array(initializer)
    raise KeyError(name)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {name for node in graph.node for name in node_inputs(node)}
    used |= {o.name for o in graph.output}
    all_initializers = {i.name for i in graph.initializer}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    # Old-style models also list initializers as graph inputs; drop those that went unused.
    inputs = [i for i in graph.input if i.name not in all_initializers or i.name in used]
    del graph.input[:]
    graph.input.extend(inputs)


def _name_nodes(graph: onnx.GraphProto) -> None:
    seen: set[str] = set()
    for index, node in enumerate(graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{index}"
            while node.name in seen:
                node.name += "_"
        seen.add(node.name)


def topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder ``graph``'s nodes in place so every node follows its inputs' producers.

    Stable: an already sorted graph keeps its order. Tools such as float16 converters append
    nodes at the end; ONNX Runtime accepts that, ``onnx.checker`` and other tools do not.
    """
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output if name}
    waiting = [0] * len(nodes)
    consumers: dict[int, list[int]] = {}
    for index, node in enumerate(nodes):
        for dependency in {producer[n] for n in node_inputs(node) if n in producer}:
            if dependency != index:
                waiting[index] += 1
                consumers.setdefault(dependency, []).append(index)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for consumer in consumers.get(index, []):
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, consumer)
    if len(order) != len(nodes):
        raise ZooError(f"graph {graph.name!r} has a cycle; it cannot be ordered")
    if order == list(range(len(nodes))):
        return
    copies = [onnx.NodeProto() for _ in order]
    for copy, index in zip(copies, order, strict=True):
        copy.CopyFrom(nodes[index])
    del graph.node[:]
    graph.node.extend(copies)


def _reorder_depth_first(graph: onnx.GraphProto) -> None:
    producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
    order: list[int] = []
    state = [0] * len(graph.node)  # 0 unseen, 1 on stack, 2 emitted
    roots = [producer[o.name] for o in graph.output if o.name in producer]
    # Nodes that feed no output (dead ends) still run in the dense model; keep them.
    roots += list(range(len(graph.node)))
    for root in roots:
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            index, next_input = stack.pop()
            inputs = node_inputs(graph.node[index])
            while next_input < len(inputs):
                dependency = producer.get(inputs[next_input])
                next_input += 1
                if dependency is not None and state[dependency] == 0:
                    stack.append((index, next_input))
                    stack.append((dependency, 0))
                    state[dependency] = 1
                    break
            else:
                state[index] = 2
                order.append(index)
    nodes = [graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes, strict=True):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
