"""An ONNX model on disk and its boundary signature: what a backend compiles, what callers feed.

:func:`resolve_model` puts a model on disk (a ``ModelProto`` is saved once, by digest) and
reads its inputs and outputs as :class:`TensorSpec` records. The built-in backends compile
from it, and :func:`sparseloom.workload.inference.model_tensors` reads a loaded model's
signature from it when its backend does not report one. :mod:`onnx` is imported inside the
functions, so importing this module stays light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from sparseloom.core.errors import BackendError
from sparseloom.core.types import as_tuple

if TYPE_CHECKING:
    import onnx


@attrs.frozen
class TensorSpec:
    """A model input or output: its name, numpy dtype name and shape (``None``/str = dynamic)."""

    name: str
    dtype: str
    shape: tuple[int | str | None, ...] = attrs.field(converter=as_tuple)

    def describe(self) -> str:
        """``float32[N,3,32,32]``: dtype and shape with dynamic dims by their symbol."""
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


@attrs.frozen
class ModelSource:
    """An ONNX model on disk, with its content digest and its boundary signature."""

    path: Path
    digest: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


def _value_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    import onnx

    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        raise BackendError(f"model boundary value {value.name!r} is not a tensor; only tensors "
                           "are supported as model inputs and outputs")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
    dims: list[int | str | None] = []
    if tensor.HasField("shape"):
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            else:
                dims.append(dim.dim_param or None)
    return TensorSpec(value.name, dtype, tuple(dims))


def model_signature(
    model: onnx.ModelProto,
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The model's real inputs (initializers excluded) and outputs."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(_value_spec(v) for v in model.graph.input if v.name not in initializers)
    outputs = tuple(_value_spec(v) for v in model.graph.output)
    return inputs, outputs


def _check_model(model: onnx.ModelProto, where: str) -> None:
    # Protobuf parses many non-ONNX byte strings into an empty message: insist on a graph.
    if model.ir_version <= 0 or not model.opset_import or not model.graph.output:
        raise BackendError(
            f"{where} is not an ONNX model (no IR version, opset or graph outputs); "
            "pass a .onnx file exported by torch.onnx, onnx.save or a converter"
        )


def resolve_model(model: onnx.ModelProto | str | os.PathLike[str]) -> ModelSource:
    """Put ``model`` on disk (a ModelProto is saved once, by digest) and read its signature.

    :raises BackendError: the file is missing, unreadable or not an ONNX model.
    """
    import onnx

    from sparseloom.core.cache import cache_dir, file_hash

    if isinstance(model, onnx.ModelProto):
        _check_model(model, "the given ModelProto")
        import hashlib

        data = model.SerializeToString()
        digest = hashlib.sha256(data).hexdigest()
        path = cache_dir() / "models" / f"{digest[:24]}.onnx"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        inputs, outputs = model_signature(model)
        return ModelSource(path, digest, inputs, outputs)
    if not isinstance(model, str | os.PathLike):
        raise BackendError(f"a model must be an onnx.ModelProto or a path, got {type(model)!r}")
    path = Path(model).expanduser()
    if not path.is_file():
        raise BackendError(f"model file {str(path)!r} not found; check the path")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as error:
        raise BackendError(
            f"{str(path)!r} is not a readable ONNX model ({type(error).__name__}: {error}); "
            "pass a .onnx file exported by torch.onnx, onnx.save or a converter"
        ) from None
    _check_model(proto, repr(str(path)))
    inputs, outputs = model_signature(proto)
    return ModelSource(path.resolve(), file_hash(path), inputs, outputs)
