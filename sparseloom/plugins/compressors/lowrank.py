"""Low-rank factorisation: a large Gemm/MatMul weight ``W`` (K×N) becomes two thin ones.

``X @ W`` is replaced by ``(X @ A) @ B`` with ``A`` K×r and ``B`` r×N, from a truncated SVD,
so the layer's multiply-adds and parameters fall from K·N to r·(K+N) per row. ``level`` is
that fraction removed: r = ⌊(1 − level)·K·N / (K + N)⌋. No training: with calibration
batches the SVD is *whitened* by the second moment of the layer's inputs on them, so the rank-r
factor pair is the one closest to ``W`` on the inputs the layer actually sees
(min ‖X·W − X·A·B‖, the closed form of SVD-LLM, Wang et al. 2024); without calibration it is
the plain truncated SVD of ``W`` (min ‖W − A·B‖).
"""

from __future__ import annotations

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
)

if TYPE_CHECKING:
    import onnx

    from sparseloom.core.protocols import Arrays

#: The smallest K and N a weight needs to be factorised: below it a layer's two thin matrix
#: products cost more in call overhead than the smaller one saves (a 10-class head).
MIN_DIM = 32
#: Ridge added to the inputs' second-moment matrix, relative to its mean diagonal, so the
#: whitening is defined where the calibration inputs never vary (a dead feature).
RIDGE = 1e-4


@attrs.frozen
class Target:
    """One factorisable layer: ``nodes[index]`` multiplies input ``source`` by ``weight``."""

    index: int
    source: str
    weight: str
    transposed: bool  # a Gemm with transB = 1: the initializer holds Wᵀ (N×K)


def _targets(model: onnx.ModelProto) -> list[Target]:
    """The Gemm (transA = 0) and MatMul layers whose second operand is a float32 2-D
    initializer of at least :data:`MIN_DIM` rows and columns, used by that node alone."""
    import onnx

    by_name = {init.name: init for init in model.graph.initializer}
    uses: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    found = []
    for index, node in enumerate(model.graph.node):
        if node.op_type not in ("Gemm", "MatMul") or len(node.input) < 2:
            continue
        if node.op_type == "Gemm" and attr(node, "transA", 0):
            continue
        init = by_name.get(node.input[1])
        if (init is None or init.data_type != onnx.TensorProto.FLOAT or len(init.dims) != 2
                or min(init.dims) < MIN_DIM or uses[init.name] != 1):
            continue
        found.append(Target(index, node.input[0], init.name,
                            node.op_type == "Gemm" and bool(attr(node, "transB", 0))))
    return found


def rank_for(rows: int, columns: int, level: float) -> int:
    """The rank that removes ``level`` of a ``rows``×``columns`` weight's parameters."""
    return int((1.0 - level) * rows * columns // (rows + columns))


def _second_moments(model: onnx.ModelProto, sources: Sequence[str],
                    batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per tensor in ``sources``: E[x xᵀ] over its rows (last axis = features) on ``batches``
    (ONNX Runtime CPU, float64 sums)."""
    import onnx
    import onnxruntime as ort

    probe = model_copy(model)
    del probe.graph.value_info[:]
    known = {o.name for o in probe.graph.output}
    wanted = sorted(set(sources))
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                              for n in wanted if n not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for batch in batches:
        for name, value in zip(wanted, session.run(wanted, batch), strict=True):
            rows = np.asarray(value, dtype=np.float64).reshape(-1, value.shape[-1])
            sums[name] = sums.get(name, 0.0) + rows.T @ rows
            counts[name] = counts.get(name, 0) + rows.shape[0]
    return {name: sums[name] / max(1, counts[name]) for name in wanted}


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


@attrs.define(eq=False)
class LowRankFactoriser:
    """Truncated-SVD factorisation of Gemm and MatMul weights (see the module docstring).

    Every layer of the subgraph whose weight is at least :data:`MIN_DIM` × :data:`MIN_DIM`
    is factorised at the same ``level``; Conv layers, embedding tables and a weight shared by
    two nodes are left as they are. Calibration batches are optional (whitening).
    """

    kind: str = attrs.field(default="lowrank", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(0.25, 0.5), init=False)

    def prunable(self, subgraph: onnx.ModelProto) -> bool:
        """Whether ``subgraph`` holds a Gemm/MatMul weight large enough to factorise."""
        return bool(_targets(subgraph))

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays] = ()
    ) -> onnx.ModelProto:
        """A copy of ``subgraph`` with each large Gemm/MatMul weight split in two factors.

        :raises CompressionError: if ``level`` is not in (0, 1), a calibration batch lacks an
            input of the subgraph, or no layer is large enough (see :meth:`prunable`).
        """
        from onnx import helper, numpy_helper

        fraction = check_fraction_level(self.kind, level)
        targets = _targets(subgraph)
        if not targets:
            raise CompressionError(
                f"compressor {self.kind!r}: the subgraph {subgraph.graph.name!r} has no "
                f"Gemm/MatMul weight of at least {MIN_DIM}×{MIN_DIM} to factorise; skip this "
                f"position (see prunable())")
        moments = (_second_moments(subgraph, [t.source for t in targets],
                                   check_calibration(self.kind, subgraph, calibration))
                   if calibration else {})
        model = model_copy(subgraph)
        inits = {init.name: init for init in model.graph.initializer}
        nodes = list(model.graph.node)
        for target in reversed(targets):  # later indices first: insertions keep earlier ones
            node = nodes[target.index]
            weight = numpy_helper.to_array(inits[target.weight])
            weight = weight.T if target.transposed else weight
            rank = max(1, rank_for(weight.shape[0], weight.shape[1], fraction))
            left, right = factorise(weight, rank, moments.get(target.source))
            model.graph.initializer.remove(inits[target.weight])
            names = (f"{target.weight}/lowrank_a", f"{target.weight}/lowrank_b")
            model.graph.initializer.extend(numpy_helper.from_array(array, name)
                                           for array, name in zip((left, right), names,
                                                                  strict=True))
            thin = f"{node.output[0]}/lowrank"
            first = helper.make_node("MatMul", [target.source, names[0]], [thin],
                                     name=f"{node.name or target.weight}/lowrank_a")
            second = _copy_node(node)
            second.input[0], second.input[1] = thin, names[1]
            if target.transposed:
                for attribute in second.attribute:
                    if attribute.name == "transB":
                        attribute.i = 0
            nodes[target.index:target.index + 1] = [first, second]
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        check_boundaries(self.kind, subgraph, model)
        return model


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of ``node`` (its name, op, attributes and tensors)."""
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy
