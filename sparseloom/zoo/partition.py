"""Cut a dense ONNX model into S consecutive, layer-aligned subgraphs.

The rule (see ``docs/zoo.md``):

1. The prepared model (:func:`sparseloom.zoo.graph.prepare_model`) is a sequence of nodes in
   depth-first topological order. A *cut* ``k`` splits it into nodes ``[0, k)`` and ``[k, n)``;
   the tensors *crossing* it are those produced before ``k`` (or graph inputs) and read at or
   after ``k`` (or graph outputs). Initializers never cross: each piece holds its own weights.
2. Every tensor carries the set of graph inputs its *values* depend on (``Shape``/``Size``
   outputs depend on none: they only see a shape). A graph input is *auxiliary* when the
   computation that depends on it alone is negligible (under 1% of the model's cost: an
   attention mask is cast and scaled, then joins the main path); the others are *primary*.
   A tensor is *main* when it depends on a primary input, and *side* otherwise (a mask, the
   mask's additive form, a shape-derived count).
3. A cut is **valid** when exactly one main tensor crosses it, and every crossing tensor is
   numeric. Inside a residual block both the skip and the branch are main; inside an attention
   block Q, K, V and the residual are; so neither is ever cut. Between transformer layers the
   crossing set is {hidden state, mask}: one main, one side.
4. Among valid cuts, ``S - 1`` are chosen by dynamic programming to minimise the largest piece's
   cost (FLOPs, or ONNX Runtime's per-node profile with ``cost="latency"``), breaking ties by
   fewer crossing tensors. The ADMS-style mode (``mode="adms"``) first minimises the number of
   pieces that no processor supports entirely (each processor's ``supports(op_type, domain)``), and
   refuses pieces under ``min_fraction`` of the total cost (scheduling granularity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import attrs
import numpy as np
import onnx

from sparseloom.core.errors import ConfigError, ZooError
from sparseloom.zoo.cost import CostKind, node_costs
from sparseloom.zoo.extract import BoundaryTensor, extract_segment
from sparseloom.zoo.graph import SHAPE_OPS, TensorFact, as_tuple, node_inputs, prepare_model
from sparseloom.zoo.tensors import check_chain, tensor_facts

PartitionMode = Literal["balanced", "adms"]
#: A processor's answer to "can you run this ONNX op natively?": ``fn(op_type, domain)``,
#: the domain as the node gives it (``""`` for the default ONNX domain, ``com.microsoft`` …).
SupportFn = Callable[[str, str], bool]

_NUMERIC_KINDS = frozenset("biuf")


@attrs.frozen
class CutPoint:
    """A valid cut: before node ``index`` of the prepared model's node order.

    Attributes:
        index: number of nodes before the cut.
        crossing: dense names of the tensors crossing it, the main tensor first.
        crossing_bytes: their size at batch 1.
    """

    index: int
    crossing: tuple[str, ...] = attrs.field(converter=as_tuple)
    crossing_bytes: int


@attrs.define(eq=False)
class Partition:
    """The result of partitioning: ``S`` pieces and the boundaries between them.

    Attributes:
        pieces: one ONNX model per position, in order.
        inputs: the boundary tensors each piece reads (position 0: the model's inputs).
        outputs: the boundary tensors each piece writes (last position: the model's outputs).
        cuts: the node indices of the chosen cuts (``S - 1`` of them).
        costs: each piece's cost, in the unit of ``cost_kind``.
        cost_kind: ``flops`` or ``latency`` (milliseconds).
        valid_cuts: every valid cut point the model has (what limits ``S``).
        supported_by: per piece, the processors that support all its ops (ADMS mode only).
        max_abs_diff: largest difference between the chained pieces and the dense model on
            the check inputs.
    """

    pieces: list[onnx.ModelProto]
    inputs: list[tuple[BoundaryTensor, ...]]
    outputs: list[tuple[BoundaryTensor, ...]]
    cuts: tuple[int, ...]
    costs: tuple[float, ...]
    cost_kind: str
    valid_cuts: tuple[CutPoint, ...]
    supported_by: list[tuple[str, ...]] = attrs.field(factory=list)
    max_abs_diff: float = 0.0

    @property
    def subgraphs(self) -> int:
        """The number of pieces, ``S``."""
        return len(self.pieces)


def find_cut_points(
    prepared: onnx.ModelProto,
    facts: Mapping[str, TensorFact],
    costs: Sequence[float],
    *,
    auxiliary_fraction: float = 0.01,
) -> list[CutPoint]:
    """Every valid cut of ``prepared`` (see the module docstring for the rule).

    :param facts: dtype/shape/size of every tensor (:func:`~sparseloom.zoo.graph.tensor_facts`).
    :param costs: each node's cost, to tell primary from auxiliary graph inputs.
    :param auxiliary_fraction: an input whose own computation costs less than this fraction
        of the total is auxiliary.
    """
    nodes = list(prepared.graph.node)
    initializers = {i.name for i in prepared.graph.initializer}
    graph_inputs = [i.name for i in prepared.graph.input if i.name not in initializers]
    dependency = _value_dependencies(prepared, graph_inputs, initializers)
    primary = primary_inputs_mask(prepared, graph_inputs, dependency, costs, auxiliary_fraction)

    producer: dict[str, int] = dict.fromkeys(graph_inputs, -1)
    last_use: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for name in node_inputs(node):
            if name not in initializers:
                last_use[name] = index
        for name in node.output:
            if name:
                producer[name] = index
    for output in prepared.graph.output:
        last_use[output.name] = len(nodes)

    # Sweep: live = tensors produced before the cut and used at or after it.
    ends_at: dict[int, list[str]] = {}
    starts_after: dict[int, list[str]] = {}
    for name, index in producer.items():
        if name in last_use and last_use[name] > index:
            starts_after.setdefault(index, []).append(name)
            ends_at.setdefault(last_use[name], []).append(name)
    live: dict[str, None] = dict.fromkeys(starts_after.get(-1, []))
    cuts: list[CutPoint] = []
    for cut in range(1, len(nodes)):
        live.update(dict.fromkeys(starts_after.get(cut - 1, [])))
        for name in ends_at.get(cut - 1, []):
            live.pop(name, None)
        crossing = list(live)
        main = [n for n in crossing if dependency.get(n, 0) & primary]
        if len(main) != 1 or any(
            n not in facts or np.dtype(facts[n].dtype).kind not in _NUMERIC_KINDS
            for n in crossing
        ):
            continue
        ordered = main + [n for n in crossing if n != main[0]]
        cuts.append(CutPoint(cut, ordered, sum(facts[n].nbytes for n in crossing)))
    return cuts


def primary_inputs_mask(
    prepared: onnx.ModelProto,
    graph_inputs: Sequence[str],
    dependency: Mapping[str, int],
    costs: Sequence[float],
    auxiliary_fraction: float = 0.01,
) -> int:
    """Bit mask (over ``graph_inputs``) of the primary inputs; the costliest is always one."""
    total = float(sum(costs)) or 1.0
    own = [0.0] * len(graph_inputs)
    for node, cost in zip(prepared.graph.node, costs, strict=True):
        outputs = [o for o in node.output if o]
        mask = dependency.get(outputs[0], 0) if outputs else 0
        for bit in range(len(graph_inputs)):
            if mask == 1 << bit:
                own[bit] += cost
    if not graph_inputs:
        return 0
    primary = 1 << int(np.argmax(own))
    for bit, cost in enumerate(own):
        if cost >= auxiliary_fraction * total:
            primary |= 1 << bit
    return primary


def _value_dependencies(
    prepared: onnx.ModelProto, graph_inputs: Sequence[str], initializers: set[str]
) -> dict[str, int]:
    bits = {name: 1 << i for i, name in enumerate(graph_inputs)}
    dependency: dict[str, int] = dict(bits)
    for node in prepared.graph.node:
        mask = 0
        if node.op_type not in SHAPE_OPS:
            for name in node_inputs(node):
                mask |= dependency.get(name, 0)
        for name in node.output:
            if name:
                dependency[name] = mask
    return dependency


def choose_cuts(
    valid: Sequence[CutPoint],
    costs: Sequence[float],
    subgraphs: int,
    *,
    min_fraction: float = 0.0,
    unsupported: Callable[[int, int], bool] | None = None,
) -> tuple[int, ...]:
    """Pick ``subgraphs - 1`` of the ``valid`` cuts that balance the pieces' ``costs``.

    Minimises, in order: the number of pieces for which ``unsupported(start, stop)`` is true,
    the largest piece cost, and the number of crossing tensors. Pieces cheaper than
    ``min_fraction`` of the total are not allowed. Raises :class:`ZooError` when no choice fits.
    """
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, dtype=float))])
    total = float(prefix[-1]) or 1.0
    points = [0, *[c.index for c in valid], n]
    crossing = [0, *[len(c.crossing) for c in valid], 0]
    if subgraphs - 1 > len(valid):
        raise ZooError(
            f"cannot cut the model into {subgraphs} subgraphs: it has only {len(valid)} valid "
            f"cut points (between residual/attention blocks), so at most {len(valid) + 1} "
            f"subgraphs; use --subgraphs {len(valid) + 1} or fewer"
        )

    def piece(a: int, b: int) -> tuple[int, float] | None:
        cost = float(prefix[points[b]] - prefix[points[a]])
        if cost < min_fraction * total:
            return None
        bad = int(unsupported(points[a], points[b])) if unsupported else 0
        return bad, cost

    m = len(points)
    inf = (float("inf"), float("inf"), float("inf"))
    best: list[list[tuple[float, float, float]]] = [[inf] * m for _ in range(subgraphs + 1)]
    back: list[list[int]] = [[-1] * m for _ in range(subgraphs + 1)]
    best[0][0] = (0, 0.0, 0)
    for s in range(1, subgraphs + 1):
        for b in range(1, m):
            if s == subgraphs and b != m - 1:
                continue
            for a in range(b):
                previous = best[s - 1][a]
                if previous[0] == float("inf"):
                    continue
                this = piece(a, b)
                if this is None:
                    continue
                candidate = (previous[0] + this[0], max(previous[1], this[1]),
                             previous[2] + crossing[b])
                if candidate < best[s][b]:
                    best[s][b], back[s][b] = candidate, a
    if best[subgraphs][m - 1][0] == float("inf"):
        raise ZooError(
            f"cannot cut the model into {subgraphs} subgraphs of at least {min_fraction:.0%} of "
            f"its cost each; {len(valid)} valid cut points exist. Lower min_fraction or S."
        )
    chosen: list[int] = []
    b = m - 1
    for s in range(subgraphs, 0, -1):
        a = back[s][b]
        if a > 0:
            chosen.append(points[a])
        b = a
    return tuple(sorted(chosen))


def partition_model(
    model: onnx.ModelProto | str,
    subgraphs: int,
    sample_inputs: Mapping[str, np.ndarray],
    *,
    cost: CostKind = "flops",
    mode: PartitionMode = "balanced",
    supports: Mapping[str, SupportFn] | None = None,
    min_fraction: float = 0.05,
    tolerance: float = 1e-4,
) -> Partition:
    """Partition ``model`` into ``subgraphs`` pieces; check the chain reproduces the model.

    :param model: the dense ONNX model (path or proto), batch dimension dynamic.
    :param subgraphs: ``S``, the number of pieces (1 returns the whole model as one piece).
    :param sample_inputs: at least two rows of real inputs (shapes, costs and the check).
    :param cost: what to balance: ``flops`` (estimated at batch 1) or ``latency`` (ONNX
        Runtime per-node profile, single thread).
    :param mode: ``balanced`` or ``adms`` (also weighs the processors' op support).
    :param supports: ``{processor name: supports(op_type, domain)}``, used in ``adms`` mode.
    :param min_fraction: in ``adms`` mode, the smallest piece as a fraction of the total cost.
    :param tolerance: largest allowed abs difference between the chain and the dense model.
    :raises ConfigError: for a bad ``subgraphs``, ``mode`` or missing ``supports``.
    :raises ZooError: when the model has too few valid cuts or the chain does not reproduce it.
    """
    if not isinstance(subgraphs, int) or subgraphs < 1:
        raise ConfigError(f"the number of subgraphs must be a positive integer, got {subgraphs!r}")
    if mode not in ("balanced", "adms"):
        raise ConfigError(f"unknown partition mode {mode!r}; use 'balanced' or 'adms'")
    if mode == "adms" and not supports:
        raise ConfigError("partition mode 'adms' needs the processors' supports(op) answers")
    prepared = prepare_model(model)
    facts, values = tensor_facts(prepared, sample_inputs)
    costs = node_costs(prepared, facts, values, cost=cost, sample_inputs=sample_inputs)
    valid = find_cut_points(prepared, facts, costs)
    nodes = list(prepared.graph.node)

    unsupported = None
    if mode == "adms":
        assert supports is not None
        table = {
            processor: np.array([bool(fn(node.op_type, node.domain)) for node in nodes])
            for processor, fn in supports.items()
        }

        def unsupported(start: int, stop: int) -> bool:
            return not any(bool(t[start:stop].all()) for t in table.values())

    cuts = choose_cuts(
        valid, costs, subgraphs, min_fraction=min_fraction if mode == "adms" else 0.0,
        unsupported=unsupported,
    )
    by_index = {c.index: c for c in valid}
    initializers = {i.name for i in prepared.graph.initializer}
    model_inputs = tuple(
        BoundaryTensor(i.name, i.name, facts[i.name].dtype, facts[i.name].shape)
        for i in prepared.graph.input if i.name not in initializers
    )
    model_outputs = tuple(
        BoundaryTensor(o.name, o.name, facts[o.name].dtype, facts[o.name].shape)
        for o in prepared.graph.output
    )
    boundaries: list[tuple[BoundaryTensor, ...]] = [model_inputs]
    bounds = [0, *cuts, len(nodes)]
    for position, cut in enumerate(cuts, start=1):
        previous = {t.source for t in boundaries[-1]}
        produced = {o for n in nodes[bounds[position - 1]:cut] for o in n.output}
        tensors = []
        for source in by_index[cut].crossing:
            # A tensor the piece only forwards gets a fresh name (SSA); one it computes keeps
            # its own.
            produced_here = source in produced
            name = source if produced_here else f"{source}__cut{position}"
            if not produced_here and source not in previous:
                raise ZooError(f"cut {position}: tensor {source!r} crosses but is not available")
            fact = facts[source]
            tensors.append(BoundaryTensor(name, source, fact.dtype, fact.shape))
        boundaries.append(tuple(tensors))
    boundaries.append(model_outputs)

    pieces = [
        extract_segment(
            prepared, nodes[bounds[j]:bounds[j + 1]], boundaries[j], boundaries[j + 1],
            name=f"{prepared.graph.name or 'model'}_p{j}",
        )
        for j in range(len(bounds) - 1)
    ]
    piece_costs = tuple(float(sum(costs[bounds[j]:bounds[j + 1]])) for j in range(len(pieces)))
    supported_by: list[tuple[str, ...]] = []
    if mode == "adms" and supports:
        supported_by = [
            tuple(p for p, fn in supports.items()
                  if all(fn(n.op_type, n.domain) for n in nodes[bounds[j]:bounds[j + 1]]))
            for j in range(len(pieces))
        ]
    partition = Partition(
        pieces=pieces, inputs=boundaries[:-1], outputs=boundaries[1:], cuts=cuts,
        costs=piece_costs, cost_kind=cost, valid_cuts=tuple(valid), supported_by=supported_by,
    )
    partition.max_abs_diff = check_chain(model, partition.pieces, sample_inputs, tolerance)
    return partition
