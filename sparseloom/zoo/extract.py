"""Cut consecutive nodes out of a prepared model as a standalone piece, and join pieces back.

* :func:`extract_segment` cuts one consecutive run of nodes out as a standalone ONNX model whose
  inputs and outputs are the boundary tensors;
* :func:`merge_chain` joins pieces back into one model with :func:`onnx.compose.merge_models`.

Boundary tensors keep their original names, except a tensor that a piece merely passes on
(a graph input such as an attention mask, consumed again further down): the piece forwards it
through an ``Identity`` to ``<name>__cut<c>`` so that every piece stays a valid SSA graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import helper

from sparseloom.core.errors import ZooError
from sparseloom.zoo.graph import PRODUCER, as_tuple, node_inputs, topological_sort


@attrs.frozen
class BoundaryTensor:
    """One tensor crossing a cut between two consecutive pieces.

    Attributes:
        name: the name both pieces use for it (the output of one, the input of the next).
        source: the tensor's name in the dense model.
        dtype: numpy dtype name.
        shape: dimensions (``int`` fixed, ``str`` symbolic such as ``batch``).
    """

    name: str
    source: str
    dtype: str
    shape: tuple[int | str, ...] = attrs.field(converter=as_tuple)

    def signature(self) -> dict[str, Any]:
        """The JSON form stored in the zoo manifest."""
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def value_info(tensor: BoundaryTensor) -> onnx.ValueInfoProto:
    """The ``ValueInfoProto`` that declares ``tensor`` as a graph input or output."""
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
    return helper.make_tensor_value_info(tensor.name, elem_type, list(tensor.shape))


def extract_segment(
    prepared: onnx.ModelProto,
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[BoundaryTensor],
    outputs: Sequence[BoundaryTensor],
    *,
    name: str,
) -> onnx.ModelProto:
    """Cut ``nodes`` (consecutive, topologically ordered) out of ``prepared`` as a model.

    ``inputs`` and ``outputs`` are the boundary tensors; an input's ``source`` is renamed to
    its boundary ``name`` inside the piece, and an output that no node of the piece produces
    is forwarded from the matching input through an ``Identity``.
    """
    rename = {t.source: t.name for t in inputs}
    produced: set[str] = set()
    body: list[onnx.NodeProto] = []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for index, tensor in enumerate(copy.input):
            if tensor in rename:
                copy.input[index] = rename[tensor]
        _rename_outer_scope(copy, rename)
        body.append(copy)
        produced.update(o for o in node.output if o)
    for tensor in outputs:
        if tensor.source in produced:
            if tensor.name != tensor.source:
                body.append(helper.make_node(
                    "Identity", [tensor.source], [tensor.name], name=f"{tensor.name}/forward"
                ))
        elif tensor.source in rename:
            body.append(helper.make_node(
                "Identity", [rename[tensor.source]], [tensor.name], name=f"{tensor.name}/forward"
            ))
        else:
            raise ZooError(
                f"piece {name}: boundary tensor {tensor.source!r} is neither produced by the "
                f"piece nor one of its inputs ({sorted(rename)})"
            )
    used = {n for node in body for n in node_inputs(node)}
    initializers = [i for i in prepared.graph.initializer if i.name in used]
    internal = produced - {t.name for t in outputs}
    infos = [v for v in prepared.graph.value_info if v.name in internal]
    graph = helper.make_graph(
        body, name, [value_info(t) for t in inputs], [value_info(t) for t in outputs],
        initializer=initializers, value_info=infos,
    )
    piece = helper.make_model(
        graph, opset_imports=list(prepared.opset_import), producer_name=PRODUCER,
        ir_version=prepared.ir_version,
    )
    piece.functions.extend(prepared.functions)
    return piece


def _rename_outer_scope(node: onnx.NodeProto, rename: Mapping[str, str]) -> None:
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.HasField("g") else []
        graphs += list(attribute.graphs)
        for graph in graphs:
            local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            for inner in graph.node:
                for index, tensor in enumerate(inner.input):
                    if tensor not in local and tensor in rename:
                        inner.input[index] = rename[tensor]
                _rename_outer_scope(inner, rename)
                local.update(inner.output)


def boundary_names(model: onnx.ModelProto) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The graph input names (initializers excluded) and output names of ``model``."""
    initializers = {i.name for i in model.graph.initializer}
    return (
        tuple(i.name for i in model.graph.input if i.name not in initializers),
        tuple(o.name for o in model.graph.output),
    )


def declared_signature(model: onnx.ModelProto) -> dict[str, list[dict[str, Any]]]:
    """The declared inputs and outputs of ``model`` as name/dtype/shape dicts."""
    initializers = {i.name for i in model.graph.initializer}

    def describe(info: onnx.ValueInfoProto) -> dict[str, Any]:
        tensor_type = info.type.tensor_type
        dtype = (str(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
                 if tensor_type.elem_type else "undefined")
        shape: list[int | str | None] | None = None
        if tensor_type.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in tensor_type.shape.dim]
        return {"name": info.name, "dtype": dtype, "shape": shape}

    return {
        "inputs": [describe(i) for i in model.graph.input if i.name not in initializers],
        "outputs": [describe(o) for o in model.graph.output],
    }


def merge_chain(pieces: Sequence[onnx.ModelProto], *, name: str = "stitched") -> onnx.ModelProto:
    """Merge consecutive pieces into one model, connecting equal boundary names.

    Internal names are prefixed per position (``p0/``, ``p1/`` ...) first, so that pieces
    compressed independently (whose tools may have picked the same helper names) never clash.
    """
    if not pieces:
        raise ZooError("cannot merge an empty chain of subgraphs")
    ir_version = max(p.ir_version for p in pieces)
    merged: onnx.ModelProto | None = None
    for position, piece in enumerate(pieces):
        prefixed = _prefix_internal(piece, f"p{position}/")
        prefixed.ir_version = ir_version
        topological_sort(prefixed.graph)
        if merged is None:
            merged = prefixed
            continue
        _, previous_outputs = boundary_names(merged)
        inputs, _ = boundary_names(prefixed)
        missing = [n for n in inputs if n not in previous_outputs]
        if missing:
            raise ZooError(
                f"cannot merge position {position}: its inputs {missing} are not outputs of the "
                f"previous positions (outputs: {list(previous_outputs)})"
            )
        merged, prefixed = _align_opsets(merged, prefixed)
        merged = onnx.compose.merge_models(
            merged, prefixed, io_map=[(n, n) for n in inputs], name=name,
            producer_name=PRODUCER,
        )
    assert merged is not None
    merged.graph.name = name
    return merged


def _prefix_internal(piece: onnx.ModelProto, prefix: str) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(piece)
    inputs, outputs = boundary_names(copy)
    keep = set(inputs) | set(outputs)
    infos = [v for v in copy.graph.value_info if v.name not in keep]
    del copy.graph.value_info[:]
    copy.graph.value_info.extend(infos)
    onnx.compose.add_prefix_graph(
        copy.graph, prefix, rename_inputs=False, rename_outputs=False, inplace=True
    )
    return copy


def _align_opsets(
    first: onnx.ModelProto, second: onnx.ModelProto
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    versions_first = {o.domain: o.version for o in first.opset_import}
    versions_second = {o.domain: o.version for o in second.opset_import}
    default_first, default_second = versions_first.get("", 0), versions_second.get("", 0)
    if default_first and default_second and default_first != default_second:
        from onnx import version_converter

        target = max(default_first, default_second)
        if default_first < target:
            first = version_converter.convert_version(first, target)
        else:
            second = version_converter.convert_version(second, target)
    return first, second


