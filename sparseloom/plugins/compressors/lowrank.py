"""Low-rank factorisation: a large Gemm/MatMul/Conv weight ``W`` becomes two thin ones.

``X @ W`` (W K×N) is replaced by ``(X @ A) @ B`` with ``A`` K×r and ``B`` r×N, from a
truncated SVD, so the layer's multiply-adds and parameters fall from K·N to r·(K+N) per row.
A Conv is the same product over its input patches (K = in-channels × kernel positions,
N = out-channels): it becomes a Conv of the same kernel to r channels, then a 1×1 Conv to N
that keeps the bias. ``level`` is the fraction removed: r = ⌊(1 − level)·K·N / (K + N)⌋. No
training: with calibration batches the SVD is *whitened* by the second moment of the layer's
inputs on them, so the rank-r factor pair is the one closest to ``W`` on the inputs the layer
actually sees (min ‖X·W − X·A·B‖, the closed form of SVD-LLM, Wang et al. 2024); without
calibration it is the plain truncated SVD of ``W`` (min ‖W − A·B‖).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors._channel_groups import attr
from sparseloom.plugins.compressors._common import (
    check_boundaries,
    check_calibration,
    check_fraction_level,
    model_copy,
    probe_session,
)
from sparseloom.plugins.compressors._sensitivity import within_error
from sparseloom.plugins.compressors._sink_fit import REFIT_ROWS, conv_patches, sink_matrix
from sparseloom.workload.arguments import number_field

if TYPE_CHECKING:
    import onnx

    from sparseloom.core.protocols import Arrays

#: The smallest K and N a weight needs to be factorised: below it a layer's two thin products
#: cost more in call overhead than the smaller one saves (a 10-class head, a 16-channel stem).
MIN_DIM = 32
#: A Conv's rank is rounded down to a multiple of this: ORT's and oneDNN's blocked Conv kernels
#: work on 8/16 channels, and a Conv to 36 channels ran slower than one to 48 (structured
#: pruning, docs/compressors.md).
CONV_RANK_MULTIPLE = 8
#: The default ``max_error``: the subgraph output error (relative L2 against dense, on
#: calibration batches) above which the most sensitive layers stay dense. Measured per piece of
#: the default tasks (S = 2, all layers factorised, 2026-12-04, AMD EPYC), error at 0.25 / 0.5
#: and held-out drop at 0.5: `speech` position 0 0.57 / 0.75, 48.6 points; `sentiment` position 1
#: 0.27 / 0.51, 6.0 points; `vision` position 1 0.03 / 0.12, 0.67 points; `sentiment` position
#: 0 0.001, 0 points. The same bound as INT8's.
MAX_ERROR = 0.1
#: Raised whenever :class:`LowRankFactoriser` gives another output for the same options (part
#: of the zoo's cache key, with the resolved ``max_error``). 1: Gemm/MatMul/Conv, whitened,
#: sensitive layers dense.
REVISION = 1
#: Ridge added to the inputs' second-moment matrix, relative to its mean diagonal, so the
#: whitening is defined where the calibration inputs never vary (a dead feature).
RIDGE = 1e-4


@attrs.frozen
class Target:
    """One factorisable layer: ``nodes[index]`` (``op``) multiplies input ``source`` by
    ``weight``; ``transposed``: a Gemm with transB = 1, whose initializer holds Wᵀ."""

    index: int
    op: str
    source: str
    weight: str
    transposed: bool = False


def _eligible(node: onnx.NodeProto, init: onnx.TensorProto | None, uses: int) -> bool:
    import onnx

    if init is None or init.data_type != onnx.TensorProto.FLOAT or uses != 1:
        return False
    dims = [int(d) for d in init.dims]
    if node.op_type == "Conv":
        return (len(dims) >= 3 and attr(node, "group", 1) == 1 and dims[0] >= MIN_DIM
                and math.prod(dims[1:]) >= MIN_DIM)
    return len(dims) == 2 and min(dims) >= MIN_DIM


def _targets(model: onnx.ModelProto) -> list[Target]:
    """The MatMul layers with a constant second operand, the Gemm layers (transA = 0) and the
    group-1 Conv layers whose float32 weight is at least :data:`MIN_DIM` in K and N and is
    used by that node alone."""
    by_name = {init.name: init for init in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    found = []
    for index, node in enumerate(model.graph.node):
        if (node.op_type not in ("Gemm", "MatMul", "Conv") or len(node.input) < 2
                or (node.op_type == "Gemm" and attr(node, "transA", 0))):
            continue
        if _eligible(node, by_name.get(node.input[1]), uses[node.input[1]]):
            found.append(Target(index, node.op_type, node.input[0], node.input[1],
                                node.op_type == "Gemm" and bool(attr(node, "transB", 0))))
    return found


def rank_for(rows: int, columns: int, level: float) -> int:
    """The rank that removes ``level`` of a ``rows``×``columns`` weight's parameters."""
    return int((1.0 - level) * rows * columns // (rows + columns))


def _matrix(target: Target, node: onnx.NodeProto, weight: np.ndarray) -> np.ndarray:
    """The layer's weight as the (K, N) matrix its inputs' rows are multiplied by."""
    if target.op == "Conv":
        return sink_matrix(node, weight, 0)
    return weight.T if target.transposed else weight


def _rows(target: Target, node: onnx.NodeProto, kernel: Sequence[int], value: np.ndarray,
          count: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of the layer's input as its weight matrix reads them: feature vectors (last axis)
    of a Gemm/MatMul input, about ``count`` sampled input patches of a Conv."""
    if target.op == "Conv":
        return conv_patches(node, kernel, value, count, rng)
    return np.asarray(value, dtype=np.float64).reshape(-1, value.shape[-1])


def _second_moments(model: onnx.ModelProto, targets: Sequence[Target],
                    batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per target (keyed by its weight): E[x xᵀ] over the rows its weight reads on
    ``batches`` (ONNX Runtime CPU, float64 sums; a Conv's patches sampled, about
    :data:`~sparseloom.plugins.compressors._sink_fit.REFIT_ROWS` in all)."""
    wanted = sorted({t.source for t in targets})
    session = probe_session(model, wanted)
    kernels = {init.name: [int(d) for d in init.dims[2:]] for init in model.graph.initializer}
    quota = -(-REFIT_ROWS // max(1, len(batches)))
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for batch_index, batch in enumerate(batches):
        values = dict(zip(wanted, session.run(wanted, batch), strict=True))
        for target in targets:
            rows = _rows(target, model.graph.node[target.index], kernels[target.weight],
                         values[target.source], quota,
                         np.random.default_rng([batch_index, target.index]))
            sums[target.weight] = sums.get(target.weight, 0.0) + rows.T @ rows
            counts[target.weight] = counts.get(target.weight, 0) + rows.shape[0]
    return {name: total / max(1, counts[name]) for name, total in sums.items()}


def factorise(weight: np.ndarray, rank: int, moment: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (K×rank) and ``B`` (rank×N) with ``A @ B`` the best rank-``rank`` stand-in for
    ``weight`` (K×N): on inputs of second moment ``moment`` (K×K) when given, else in the
    Frobenius norm."""
    w = weight.astype(np.float64)
    if moment is None:
        u, s, vt = np.linalg.svd(w, full_matrices=False)
        return ((u[:, :rank] * np.sqrt(s[:rank])).astype(np.float32),
                (np.sqrt(s[:rank])[:, None] * vt[:rank]).astype(np.float32))
    damped = moment + RIDGE * max(float(np.mean(np.diag(moment))), 1e-12) * np.eye(len(moment))
    lower = np.linalg.cholesky(damped)  # damped = L Lᵀ, so ‖X W‖ = ‖Lᵀ W‖ in expectation
    u, s, vt = np.linalg.svd(lower.T @ w, full_matrices=False)
    left = np.linalg.solve(lower.T, u[:, :rank] * s[:rank])
    return left.astype(np.float32), vt[:rank].astype(np.float32)


def _rank(target: Target, rows: int, columns: int, level: float) -> int:
    rank = max(1, rank_for(rows, columns, level))
    if target.op == "Conv" and rank >= CONV_RANK_MULTIPLE:
        rank -= rank % CONV_RANK_MULTIPLE
    return rank


def _factor_nodes(target: Target, node: onnx.NodeProto, weight_dims: Sequence[int],
                  left: np.ndarray, right: np.ndarray
                  ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The two nodes and two initializers that replace ``node``: the first reads the layer's
    input into ``rank`` features, the second (``node`` itself, rewired) maps them out."""
    from onnx import helper, numpy_helper

    rank = left.shape[1]
    names = (f"{target.weight}/lowrank_a", f"{target.weight}/lowrank_b")
    thin = f"{node.output[0]}/lowrank"
    second = _copy_node(node)
    second.input[0], second.input[1] = thin, names[1]
    if target.op == "Conv":
        # The first Conv keeps the kernel, strides, pads and dilations; the second is 1×1.
        first_weight = np.moveaxis(left.reshape(*weight_dims[1:], rank), -1, 0)
        second_weight = right.T.reshape(weight_dims[0], rank, *[1] * (len(weight_dims) - 2))
        first = _copy_node(node)
        first.input[:] = [target.source, names[0]]
        first.output[:] = [thin]
        del second.attribute[:]
        second.attribute.append(helper.make_attribute("kernel_shape",
                                                      [1] * (len(weight_dims) - 2)))
    else:
        first_weight, second_weight = left, right
        first = helper.make_node("MatMul", [target.source, names[0]], [thin])
        for attribute in second.attribute:
            if attribute.name == "transB":
                attribute.i = 0
    first.name = f"{node.name or target.weight}/lowrank_a"
    inits = [numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name)
             for array, name in zip((first_weight, second_weight), names, strict=True)]
    return [first, second], inits


@attrs.define(eq=False)
class LowRankFactoriser:
    """Truncated-SVD factorisation of Gemm, MatMul and Conv weights (the module docstring).

    Every layer found by :func:`_targets` is factorised at the same ``level``; depthwise and
    grouped Convs, embedding tables and a weight shared by two nodes are left as they are.
    Calibration batches are optional: they whiten the SVD and, with ``max_error``, keep the
    most sensitive layers dense (the search INT8 uses,
    :func:`~sparseloom.plugins.compressors._sensitivity.keep_float`): ``speech``'s DFT front
    end factorised lost 48 points at 0.5.

    :param max_error: the relative L2 error of the subgraph's outputs against dense, on the
        first ``error_batches`` calibration batches, above which its most sensitive layers
        stay dense; ``None``: every layer factorised.
    :param max_dense_share: at most this share of the layers stays dense.
    :param error_batches: calibration batches the output error is measured on.
    """

    max_error: float | None = attrs.field(
        default=MAX_ERROR, validator=number_field(low=0, low_open=True, optional=True))
    max_dense_share: float = attrs.field(
        default=0.5, validator=number_field(low=0, low_open=True, high=1))
    error_batches: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    kind: str = attrs.field(default="lowrank", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(0.25, 0.5), init=False)

    def cache_key(self) -> dict[str, object]:
        """What its output depends on beyond the options a workload file gives, for the zoo's
        cache key: :data:`REVISION` and the resolved sensitivity settings, so a zoo built
        under other defaults is rebuilt rather than reused."""
        return {"revision": REVISION, "max_error": self.max_error,
                "max_dense_share": self.max_dense_share, "error_batches": self.error_batches}

    def prunable(self, subgraph: onnx.ModelProto) -> bool:
        """Whether ``subgraph`` holds a Gemm/MatMul/Conv weight large enough to factorise."""
        return bool(_targets(subgraph))

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays] = ()
    ) -> onnx.ModelProto:
        """A copy of ``subgraph`` with each large Gemm/MatMul/Conv weight split in two factors
        (but the most sensitive ones, see ``max_error``).

        :raises CompressionError: if ``level`` is not in (0, 1), a calibration batch lacks an
            input of the subgraph, or no layer is large enough (see :meth:`prunable`).
        """
        from onnx import numpy_helper

        fraction = check_fraction_level(self.kind, level)
        targets = _targets(subgraph)
        if not targets:
            raise CompressionError(
                f"compressor {self.kind!r}: the subgraph {subgraph.graph.name!r} has no "
                f"Gemm/MatMul/Conv weight of at least {MIN_DIM} inputs and {MIN_DIM} outputs "
                f"to factorise; skip this position (see prunable())")
        batches = check_calibration(self.kind, subgraph, calibration) if calibration else []
        moments = _second_moments(subgraph, targets, batches) if batches else {}
        inits = {init.name: init for init in subgraph.graph.initializer}
        factors = {}
        for target in targets:
            matrix = _matrix(target, subgraph.graph.node[target.index],
                             numpy_helper.to_array(inits[target.weight]))
            factors[target.weight] = factorise(
                matrix, _rank(target, matrix.shape[0], matrix.shape[1], fraction),
                moments.get(target.weight))

        def factorised(dense: Sequence[str], probe: bool = False) -> onnx.ModelProto:
            """``subgraph`` with every target but those in ``dense`` factorised."""
            return _rewrite(subgraph, [t for t in targets if t.weight not in dense], factors)

        names = [t.weight for t in targets]
        model = within_error(
            subgraph, factorised, names, batches[: self.error_batches], self.max_error,
            self.max_dense_share, label=f"lowrank-{fraction:g}", kept="dense layers",
            alone=lambda name: factorised([n for n in names if n != name]))
        check_boundaries(self.kind, subgraph, model)
        return model


def _rewrite(subgraph: onnx.ModelProto, targets: Sequence[Target],
             factors: dict[str, tuple[np.ndarray, np.ndarray]]) -> onnx.ModelProto:
    """A copy of ``subgraph`` with each of ``targets`` replaced by its two ``factors``."""
    model = model_copy(subgraph)
    inits = {init.name: init for init in model.graph.initializer}
    nodes = list(model.graph.node)
    for target in sorted(targets, key=lambda t: -t.index):  # later first: indices stay valid
        init = inits[target.weight]
        replacement, pair = _factor_nodes(target, nodes[target.index],
                                          [int(d) for d in init.dims], *factors[target.weight])
        model.graph.initializer.remove(init)
        model.graph.initializer.extend(pair)
        nodes[target.index:target.index + 1] = replacement
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of ``node`` (its name, op, attributes and tensors)."""
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy
