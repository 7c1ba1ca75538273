"""Models specialised to batch 1: what the runtime serves and the profiler times.

Every request the runtime serves is one row of a task's inputs (batch 1), and the profiler
times every stage on one row. A model exported with a symbolic batch dimension (``batch`` in
the bundled tasks' inputs, and in every boundary tensor their zoos cut) makes the backend plan
for any batch: OpenVINO then keeps its shape sub-graphs (``Shape → Gather → Concat →
Reshape``) and dynamic-shape kernels at run time. Fixing the batch to 1 (ONNX Runtime's own
:func:`onnxruntime.tools.onnx_model_utils.make_dim_param_fixed`) lets it fold them when it
compiles. Measured on ``mix``'s ``review`` (the whole merged models, hot, one thread, p25 of
300 calls, three interleaved rounds; Intel Xeon with AMX; docs/results.md): bf16
OpenVINO 1.87 → 1.36 ms for the int8 pick, 1.65 → 1.37 ms for the dense model; ONNX Runtime
1.76–1.85 → 1.70–1.78 ms (int8), 3.52–3.71 → 3.47–3.61 ms (dense).

Which dimensions: the symbolic names (``dim_param``) of the first dimension of the task's
inputs. By ONNX's rules one name is one size wherever it appears, so every tensor carrying it
(the boundary tensors between subgraphs, the outputs) is batch 1 too; a batch dimension without
a name stays dynamic. Evaluating accuracy runs batches of many rows and keeps the models as
they are. Copies are cached under ``<cache>/batch1/``.

A copy holds its graph and small initializers; each initializer of at least
:data:`EXTERNAL_MIN_BYTES` is ONNX external data in a file named by its content,
``batch1/tensors/<sha256>.bin``, which every copy holding that tensor shares (the word
embedding of ``sentiment``, 66 MB, is the same in most of its variants and in the merged
chains built from them). So the copies cost the disk each distinct tensor once, and the
backends *map* the weights instead of reading them: ONNX Runtime leaves a weight it uses as it
is (the embedding) in the mapped file, paged in as requests touch it, and the pages of one
tensor are shared by every session that maps it. Measured on the dense ``sentiment`` model
(2-vCPU AMD EPYC Zen 4, 2026-12-03): an ONNX Runtime session grew the process by 89 MiB read
from the embedded file and by 44 MiB from the copy, and was built in 60 ms instead of 174 ms.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sparseloom.core.cache import cache_dir, file_hash, file_lock
from sparseloom.core.errors import ZooError
from sparseloom.isolation.guard import register_alternative

__all__ = ["batch_one_path", "batch_params", "weight_bytes"]

#: Initializers of at least this many bytes are stored once per content, as external data.
EXTERNAL_MIN_BYTES = 64 * 1024
#: The folder of ``<cache>/batch1`` that holds them.
TENSORS = "tensors"


def batch_params(inputs: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The symbolic batch names of a task: the named first dimensions of its ``inputs``
    (tensor dicts with a ``shape``, as :class:`~sparseloom.zoo.types.BoundaryInfo` has them)."""
    names = [shape[0] for spec in inputs
             if (shape := spec.get("shape")) and isinstance(shape[0], str) and shape[0]]
    return tuple(dict.fromkeys(names))


def batch_one_path(path: str | os.PathLike[str], params: Iterable[str]) -> Path:
    """``path`` with each of ``params`` fixed to 1 wherever the model names it.

    The copy is made once and cached (keyed by the file's digest and ``params``); ``path``
    itself is returned when the model names none of them.

    :raises ZooError: the model cannot be read or the copy cannot be written.
    """
    wanted = tuple(sorted(set(params)))
    source = Path(path)
    if not wanted:
        return source
    stat = source.stat()
    copy = _specialised(str(source.resolve()), stat.st_mtime_ns, stat.st_size, wanted)
    if copy is None:
        return source
    # Should a backend crash on the static batch (OpenVINO 2026.4's f32 one-thread compile of a
    # batch-1 residual MLP on an AMD EPYC Zen 4), the crash guard serves the original instead.
    register_alternative(copy, source, "the model with a dynamic batch",
                         f"the batch-1 copy of {source.parent.name}/{source.name}")
    return copy


@functools.lru_cache(maxsize=4096)
def _specialised(path: str, _mtime_ns: int, _size: int, params: tuple[str, ...]
                 ) -> Path | None:
    """The batch-1 copy of one version of one file, ``None`` when the model names none of
    ``params`` (memoised in the process)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

    digest = file_hash(path)[:16]
    folder = cache_dir() / "batch1"
    target = folder / f"{digest}-{'_'.join(params)}.ref.onnx"
    if target.is_file() and _complete(target):
        return target
    try:
        model = onnx.load(path)
    except Exception as error:  # onnx raises DecodeError, OSError ...
        raise ZooError(f"cannot read {path} to fix its batch dimension to 1: {error}") from error
    named = _dim_params(model.graph)
    present = [name for name in params if name in named]
    if not present:
        return None
    for name in present:
        make_dim_param_fixed(model.graph, name, 1)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".lock"):
        if not (target.is_file() and _complete(target)):
            _externalise(model, folder)
            temporary = target.with_suffix(f".{os.getpid()}.tmp")
            try:
                temporary.write_bytes(model.SerializeToString())
                os.replace(temporary, target)
            except (OSError, ValueError) as error:  # ValueError: over protobuf's 2 GiB
                temporary.unlink(missing_ok=True)
                raise ZooError(f"cannot write the batch-1 copy of {path} to {target}: "
                               f"{error}; check the cache folder ({folder})") from error
    return target


def _externalise(model: Any, folder: Path) -> None:
    """Move every large raw-data initializer of ``model`` to ``folder/tensors/<sha256>.bin``
    (written once per content) and reference it there as ONNX external data."""
    import hashlib

    import onnx

    tensors = folder / TENSORS
    tensors.mkdir(exist_ok=True)
    for tensor in model.graph.initializer:
        if not tensor.HasField("raw_data") or len(tensor.raw_data) < EXTERNAL_MIN_BYTES:
            continue
        data = tensor.raw_data
        name = f"{hashlib.sha256(data).hexdigest()[:32]}.bin"
        stored = tensors / name
        if stored.is_file() and stored.stat().st_size == len(data):
            os.utime(stored)  # as new as its newest user: `cache prune --older-than` keeps it
        else:
            temporary = stored.with_suffix(f".{os.getpid()}.tmp")
            try:
                temporary.write_bytes(data)
                os.replace(temporary, stored)
            except OSError as error:
                temporary.unlink(missing_ok=True)
                raise ZooError(f"cannot write a weight tensor to {stored}: {error}; check the "
                               f"cache folder ({folder})") from error
        del tensor.external_data[:]
        for key, value in (("location", f"{TENSORS}/{name}"), ("offset", "0"),
                           ("length", str(len(data)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.ClearField("raw_data")


def _complete(copy: Path) -> bool:
    """Whether every tensor file ``copy`` references is there, at its length (a pruned or
    damaged one is made again with the copy)."""
    import onnx

    try:
        model = onnx.load(str(copy), load_external_data=False)
    except Exception:  # onnx raises DecodeError, OSError ...
        return False
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        fields = {entry.key: entry.value for entry in tensor.external_data}
        stored = copy.parent / fields.get("location", "")
        try:
            if stored.stat().st_size < int(fields.get("offset", 0)) + int(fields.get("length", 0)):
                return False
        except (OSError, ValueError):
            return False
    return True


def weight_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of ``path``'s initializers, those held in the file and those it references
    (external data): what a model's memory is compared with."""
    source = Path(path)
    stat = source.stat()
    return _weight_bytes(str(source.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _weight_bytes(path: str, _mtime_ns: int, _size: int) -> int:
    import onnx

    model = onnx.load(path, load_external_data=False)
    total = 0
    for tensor in model.graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= int(dim)
        try:
            item = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        except (KeyError, ValueError):  # a type numpy has no dtype for: its stored bytes
            item = 0
        total += count * item if item else len(tensor.raw_data)
    return total


def _dim_params(graph: Any) -> set[str]:
    """Every ``dim_param`` the graph's inputs, outputs and value infos name."""
    values = [*graph.input, *graph.output, *graph.value_info]
    return {dim.dim_param for value in values if value.type.HasField("tensor_type")
            for dim in value.type.tensor_type.shape.dim if dim.dim_param}
