"""Tensors of ONNX models run on plain ONNX Runtime CPU sessions: values, facts, batches.

The zoo's own plumbing (partitioning, calibration, checks) runs models here, outside the
backends, on an unpinned ONNX Runtime CPU session; serving goes through the backends.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from sparseloom.core.errors import ZooError
from sparseloom.zoo.graph import TensorFact, load_model

if TYPE_CHECKING:
    import onnxruntime

    from sparseloom.zoo.types import Zoo

def ort_session(
    model: onnx.ModelProto | bytes | str, *, optimize: bool = True, threads: int = 0
) -> onnxruntime.InferenceSession:
    """An ONNX Runtime CPU session for ``model`` (bytes, path or ``ModelProto``)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def all_tensor_values(
    prepared: onnx.ModelProto, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run ``prepared`` on ``inputs`` and return every tensor it computes, inputs included."""
    instrumented = onnx.ModelProto()
    instrumented.CopyFrom(prepared)
    declared = {o.name for o in instrumented.graph.output}
    for node in instrumented.graph.node:
        for name in node.output:
            if name and name not in declared:
                instrumented.graph.output.append(helper.make_empty_tensor_value_info(name))
                declared.add(name)
    session = ort_session(instrumented, optimize=False)
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(names, dict(inputs)), strict=True))
    values.update({k: np.asarray(v) for k, v in inputs.items()})
    return values


def take_batch(inputs: Mapping[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
    """Rows ``start:stop`` of every array in ``inputs``."""
    return {name: np.asarray(array)[start:stop] for name, array in inputs.items()}


def batch_size_of(inputs: Mapping[str, np.ndarray]) -> int:
    """The common leading dimension of ``inputs``; :class:`ZooError` if they disagree."""
    sizes = {name: int(np.asarray(a).shape[0]) for name, a in inputs.items()}
    if len(set(sizes.values())) != 1:
        raise ZooError(f"inputs disagree on the batch size: {sizes}")
    return next(iter(sizes.values()))


def tensor_facts(
    prepared: onnx.ModelProto, sample_inputs: Mapping[str, np.ndarray]
) -> tuple[dict[str, TensorFact], dict[str, np.ndarray]]:
    """Dtype and shape of every tensor, from runs at batch 1 and batch 2 of ``sample_inputs``.

    Returns the facts and the batch-1 values (for cost estimates and checks). A dimension
    that changes between the two runs is the batch dimension and is named after the model's
    own batch symbol (``batch`` when the model has none).
    """
    if batch_size_of(sample_inputs) < 2:
        raise ZooError("tensor_facts needs at least two sample rows to tell the batch dimension")
    one = all_tensor_values(prepared, take_batch(sample_inputs, 0, 1))
    two = all_tensor_values(prepared, take_batch(sample_inputs, 0, 2))
    batch_symbol = _batch_symbol(prepared)
    declared = _declared_shapes(prepared)
    facts: dict[str, TensorFact] = {}
    for name, value in one.items():
        other = two.get(name)
        dims: list[int | str] = []
        symbolic = declared.get(name)
        for axis, size in enumerate(value.shape):
            if other is not None and other.ndim == value.ndim and other.shape[axis] != size:
                dims.append(batch_symbol)
            elif symbolic is not None and len(symbolic) == value.ndim and isinstance(
                named := symbolic[axis], str
            ) and named != batch_symbol:
                dims.append(named)
            else:
                dims.append(int(size))
        facts[name] = TensorFact(str(value.dtype), tuple(dims), int(value.nbytes))
    return facts, one


def _batch_symbol(model: onnx.ModelProto) -> str:
    for value_info in model.graph.input:
        dims = value_info.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            return dims[0].dim_param
    return "batch"


def _declared_shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    shapes: dict[str, list[int | str | None]] = {}
    for value_info in [*model.graph.input, *model.graph.output]:
        if value_info.type.tensor_type.HasField("shape"):
            shapes[value_info.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in value_info.type.tensor_type.shape.dim
            ]
    return shapes


def run_session(
    session: onnxruntime.InferenceSession, inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Run ``session`` on the inputs it declares (extra entries are ignored)."""
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def iter_batches(
    inputs: Mapping[str, np.ndarray], batch_size: int
) -> Iterable[dict[str, np.ndarray]]:
    """Split ``inputs`` into consecutive batches of at most ``batch_size`` rows."""
    total = batch_size_of(inputs)
    for start in range(0, total, batch_size):
        yield take_batch(inputs, start, min(total, start + batch_size))


#: Runs one subgraph file on feeds and returns its outputs by name.
SubgraphRun = Callable[[str | os.PathLike[str], Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def _run_plain(path: str | os.PathLike[str], feeds: Mapping[str, np.ndarray]
               ) -> dict[str, np.ndarray]:
    return run_session(ort_session(os.fspath(path)), feeds)


def dense_activations(
    zoo: Zoo, inputs: Mapping[str, np.ndarray], run: SubgraphRun | None = None
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """What every position reads and writes when the dense chain runs on ``inputs``.

    :param zoo: the zoo whose dense pieces (variant 0) run, in position order.
    :param inputs: the model's input arrays (e.g. a few eval or calibration rows).
    :param run: how a piece runs (``run(path, feeds) -> outputs``); default a plain ONNX
        Runtime CPU session.
    :returns: ``(reads, writes)``: ``reads[j]`` holds position ``j``'s boundary inputs,
        ``writes[j]`` its dense outputs.
    """
    run = run or _run_plain
    reads: list[dict[str, np.ndarray]] = []
    writes: list[dict[str, np.ndarray]] = []
    carried = dict(inputs)
    for position in range(zoo.positions):
        reads.append({n: carried[n] for n in zoo.boundary(position).input_names})
        writes.append(run(zoo.subgraph_path(position, 0), reads[position]))
        carried = writes[position]
    return reads, writes


def check_chain(
    model: onnx.ModelProto | str,
    pieces: Sequence[onnx.ModelProto],
    sample_inputs: Mapping[str, np.ndarray],
    tolerance: float = 1e-4,
) -> float:
    """Run ``pieces`` in sequence and the dense ``model``; return the largest abs difference.

    :raises ZooError: when it exceeds ``tolerance`` (relative to the output's magnitude); the
        message names the piece, and the boundary tensor, where the chain first departs from
        the dense model.
    """
    dense = run_session(ort_session(model), sample_inputs)
    carried: dict[str, np.ndarray] = dict(sample_inputs)
    stages: list[dict[str, np.ndarray]] = []
    for piece in pieces:
        carried = run_session(ort_session(piece), carried)
        stages.append(carried)
    worst = 0.0
    for name, expected in dense.items():
        problem = None
        if name not in carried:
            problem = f"the chained subgraphs do not produce model output {name!r}"
        elif carried[name].shape != expected.shape:
            problem = (f"output {name!r}: chain gives shape {carried[name].shape}, "
                       f"dense {expected.shape}")
        elif expected.size:
            difference, allowed = _difference(carried[name], expected, tolerance)
            if difference > allowed:
                problem = (f"output {name!r}: the chained subgraphs differ from the dense "
                           f"model by {difference:.3g} (tolerance {allowed:.3g})")
            worst = max(worst, difference)
        if problem is not None:
            where = _first_departure(model, stages, sample_inputs, tolerance)
            raise ZooError(f"{problem}; {where}")
    return worst


def _difference(got: np.ndarray, expected: np.ndarray, tolerance: float) -> tuple[float, float]:
    """The largest abs difference and the tolerance scaled by the expected magnitude."""
    difference = float(np.max(np.abs(got.astype(np.float64) - expected)))
    return difference, tolerance * max(1.0, float(np.max(np.abs(expected))))


def _first_departure(
    model: onnx.ModelProto | str,
    stages: Sequence[Mapping[str, np.ndarray]],
    sample_inputs: Mapping[str, np.ndarray],
    tolerance: float,
) -> str:
    """Which piece's outputs first differ from the same tensors of the dense model."""
    try:
        dense = all_tensor_values(load_model(model), sample_inputs)
    except Exception as error:  # only enriches the error being raised; never replaces it
        return f"where the pieces depart is unknown (dense tensors unreadable: {error})"
    for position, outputs in enumerate(stages[:-1]):
        for name, got in outputs.items():
            # a tensor a piece only forwards is renamed '<dense name>__cut<k>' by the partition
            source = re.sub(r"__cut\d+$", "", name)
            expected = dense.get(source)
            if expected is None or not expected.size:
                continue
            if got.shape != expected.shape:
                return (f"the difference first appears in piece {position}: its output "
                        f"{name!r} (boundary to piece {position + 1}) has shape {got.shape}, "
                        f"the dense model's {source!r} {expected.shape}")
            difference, allowed = _difference(got, expected, tolerance)
            if difference > allowed:
                return (f"the difference first appears in piece {position}: its output "
                        f"{name!r} (boundary to piece {position + 1}) differs from the dense "
                        f"model's {source!r} by {difference:.3g}")
    last = len(stages) - 1
    return (f"the difference first appears in piece {last}, the last (every boundary before "
            f"it matches the dense model)")
