"""Helpers shared by the compressors: level checks, boundary signatures, weight lookup.

Only ``onnx`` and ``numpy`` are imported here; runtimes are imported inside the compressors
that need them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sparseloom.core.errors import CompressionError

if TYPE_CHECKING:
    import onnx
    import onnxruntime

    from sparseloom.core.protocols import Arrays

#: The level passed to compressors that have no levels (``int8``, ``fp16``).
NO_LEVEL = 0.0

Signature = tuple[tuple[str, int, tuple[int | str | None, ...]], ...]


def check_fraction_level(compressor: str, level: float) -> float:
    """Return ``level`` as a float if it lies strictly between 0 and 1, else raise.

    :raises CompressionError: naming the compressor, the level and the valid range.
    """
    try:
        value = float(level)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise CompressionError(
            f"compressor {compressor!r}: level {level!r} is out of range; a level is the "
            f"fraction to remove and must satisfy 0 < level < 1 (e.g. 0.25, 0.5)"
        )
    return value


def check_no_level(compressor: str, level: float) -> None:
    """Accept only :data:`NO_LEVEL` for a level-less compressor, else raise.

    :raises CompressionError: naming the compressor and the one accepted level.
    """
    if level != NO_LEVEL:
        raise CompressionError(
            f"compressor {compressor!r} has no levels (default_levels is empty) and got "
            f"level {level!r}; pass level={NO_LEVEL}"
        )


def check_calibration(compressor: str, subgraph: onnx.ModelProto,
                      calibration: Sequence[Arrays]) -> list[dict[str, np.ndarray]]:
    """``calibration`` as batches of exactly the subgraph's inputs in their dtypes.

    :raises CompressionError: when there is no batch, or a batch lacks an input.
    """
    from onnx.helper import tensor_dtype_to_np_dtype

    initializers = {init.name for init in subgraph.graph.initializer}
    dtypes = {
        i.name: tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        for i in subgraph.graph.input if i.name not in initializers
    }
    names = list(dtypes)
    if not calibration:
        raise CompressionError(
            f"compressor {compressor!r} needs calibration batches (inputs {names} of this "
            f"subgraph, computed by the dense prefix) and got none; pass at least one batch"
        )
    batches = []
    for number, batch in enumerate(calibration):
        missing = [n for n in names if n not in batch]
        if missing:
            raise CompressionError(
                f"compressor {compressor!r}: calibration batch {number} lacks subgraph inputs "
                f"{missing} (it has {sorted(batch)}); pass batches of this subgraph's inputs"
            )
        # Boundaries are mostly float32, but token ids and masks stay integer tensors.
        batches.append({n: np.ascontiguousarray(batch[n], dtype=dtypes[n]) for n in names})
    return batches


def _value_signature(values: Iterable[onnx.ValueInfoProto]) -> Signature:
    entries = []
    for value in values:
        tensor_type = value.type.tensor_type
        dims: tuple[int | str | None, ...] = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor_type.shape.dim
        )
        entries.append((value.name, tensor_type.elem_type, dims))
    return tuple(entries)


def boundary_signature(model: onnx.ModelProto) -> tuple[Signature, Signature]:
    """The (inputs, outputs) of ``model``: names, element types and shapes, in order.

    Initializers that are also listed as graph inputs (old exporters) are not boundaries.
    """
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    return _value_signature(inputs), _value_signature(model.graph.output)


def check_boundaries(
    compressor: str, original: onnx.ModelProto, compressed: onnx.ModelProto
) -> None:
    """Raise if ``compressed`` does not keep the boundary tensors of ``original``.

    Only element types and names are compared strictly; a dimension that was symbolic may be
    renamed by a tool (``batch`` → ``unk__0``), a static one must stay the same.
    """
    for side, before, after in zip(
        ("input", "output"), boundary_signature(original), boundary_signature(compressed),
        strict=True,
    ):
        names_before = [entry[0] for entry in before]
        names_after = [entry[0] for entry in after]
        if names_before != names_after:
            raise CompressionError(
                f"compressor {compressor!r} changed the subgraph {side}s from {names_before} "
                f"to {names_after}; this is a bug in the compressor, please report it"
            )
        for (name, type_before, dims_before), (_, type_after, dims_after) in zip(
            before, after, strict=True
        ):
            static_changed = len(dims_before) != len(dims_after) or any(
                isinstance(b, int) and b != a for b, a in zip(dims_before, dims_after, strict=True)
            )
            if type_before != type_after or static_changed:
                raise CompressionError(
                    f"compressor {compressor!r} changed boundary {side} {name!r} from type "
                    f"{type_before} shape {dims_before} to type {type_after} shape {dims_after}; "
                    f"this is a bug in the compressor, please report it"
                )


def weight_initializers(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """The float32 weight initializers of Conv, ConvTranspose, Gemm and MatMul nodes, once each.

    A weight is the kernel operand: ``W`` of Conv/ConvTranspose, ``B`` of Gemm, and the
    constant operand (rank ≥ 2) of MatMul. Biases, norms, embeddings (Gather tables) and
    every other initializer are not weights here.
    """
    import onnx

    by_name = {init.name: init for init in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input}
    seen: set[str] = set()
    for node in model.graph.node:
        if node.op_type in ("Conv", "ConvTranspose", "Gemm"):
            candidates = list(node.input[1:2])
        elif node.op_type == "MatMul":
            candidates = list(node.input[:2])
        else:
            continue
        for name in candidates:
            init = by_name.get(name)
            if (
                init is None
                or name in seen
                or name in graph_inputs
                or init.data_type != onnx.TensorProto.FLOAT
                or len(init.dims) < 2
            ):
                continue
            seen.add(name)
            yield init


def replace_initializer(init: onnx.TensorProto, array: np.ndarray) -> None:
    """Overwrite ``init`` in place with ``array`` (same name)."""
    from onnx import numpy_helper

    init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array), init.name))


def model_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy of ``model`` (the input subgraph is never modified)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def note(model: onnx.ModelProto, text: str) -> None:
    """Append ``text`` to the model's doc string (what the zoo's ``show`` prints of it)."""
    model.doc_string = f"{model.doc_string}\n{text}".strip()


def probe_session(model: onnx.ModelProto, tensors: Iterable[str]
                  ) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session of a copy of ``model`` that also outputs the float
    ``tensors`` (intermediate activations), graph optimizations off so every tensor is
    computed as the graph writes it; stale ``value_info`` (shapes before a slice) dropped."""
    import onnx
    import onnxruntime as ort

    probe = model_copy(model)
    del probe.graph.value_info[:]
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(
        onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        for name in tensors if name not in known)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(probe.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def quiet_quantizer() -> Iterator[None]:
    """Silence the quantizer's root-logger advice ("consider pre-processing ...")."""
    root = logging.getLogger()
    previous = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(previous)


def rename_tensor(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` wherever a node of ``graph`` reads or writes it."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]


def restore_boundary_names(original: onnx.ModelProto, quantized: onnx.ModelProto) -> None:
    """Give boundary tensors back the names they had, if the quantizer renamed any."""
    for side in ("input", "output"):
        before = [v.name for v in getattr(original.graph, side)]
        after = getattr(quantized.graph, side)
        if len(after) != len(before):
            continue  # check_boundaries reports it
        for value, name in zip(after, before, strict=True):
            if value.name != name:
                rename_tensor(quantized.graph, value.name, name)
                value.name = name


def name_layers(model: onnx.ModelProto, op_types: Sequence[str]) -> list[str]:
    """The names of the layers the quantizer quantizes: ``op_types`` with a constant operand
    (input 0 or 1), naming the unnamed ones (in place)."""
    constants = {init.name for init in model.graph.initializer} | {
        out for node in model.graph.node if node.op_type == "Constant" for out in node.output}
    names = []
    for index, node in enumerate(model.graph.node):
        if node.op_type in op_types and any(i in constants for i in node.input[:2]):
            if not node.name:
                node.name = f"sparseloom_int8_{index}"
            names.append(node.name)
    return names
