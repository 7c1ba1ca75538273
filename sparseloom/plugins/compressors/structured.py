"""Structured pruning: remove whole channels / FFN neurons inside a subgraph.

Which channels can go is decided by the channel-group analysis in
:mod:`sparseloom.plugins.compressors._channel_groups`: a producer's output channels are
prunable when every path from them ends in the next layer's weights (Conv → ReLU/BN/pool →
Conv, Gemm/MatMul → GELU/ReLU → Gemm/MatMul, Conv → pool → Flatten → Gemm). Anything that is a
subgraph output or feeds a residual Add, a Reshape, a normalisation or a Softmax keeps its
channels, so boundary tensors never change shape. Removing a channel deletes the producer's
output row, the matching bias/BN/constant entries and the next layer's input rows: real weight
shapes and FLOPs shrink, which is where CPU speed-ups come from.

Ranking, with calibration data (the normal case in the zoo): channel ``c`` scores
``Σ_sinks std(a_c) · ‖W_sink[:, c]‖₂`` — the size of the change its removal makes to the next
layer's output. Without calibration data channels are ranked by the L1 norm of the producer's
weights (Li et al., 2017) and the sinks are left as they are.

Compensation, with calibration data: by default (``refit=True``) every sink's kept weights and
its bias are re-fitted by ridge least squares so that, on calibration activations, the sink's
output from the kept channels of the model pruned so far matches its output in the dense
subgraph — the reconstruction step of channel pruning (He et al., 2017; ThiNet, Luo et al.,
2017), solved in closed form, no gradient steps. A kxk Conv sink is fitted on im2col patches
(padding, strides and dilations as the node has them), a Gemm/MatMul sink on its input rows.
With ``refit=False`` only the removed channels' mean contribution ``W_sink[:, c] · mean(a_c)``
is folded into the sink's bias (the refit with its weight change held at zero).

Attention heads are not pruned: the head count is baked into Reshape shape constants that
exporters compute in many different ways (Shape/Gather/Div chains), so head pruning on raw ONNX
is fragile; FFN neurons and convolution channels carry most of the compute.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors._channel_groups import (
    Blocked,
    ChannelGraph,
    Group,
    Sink,
    constants_to_initializers,
)
from sparseloom.plugins.compressors._common import (
    check_boundaries,
    check_calibration,
    check_fraction_level,
    model_copy,
    probe_session,
    replace_initializer,
)
from sparseloom.plugins.compressors._sink_fit import (
    REFIT_ROWS,
    Rows,
    channel_rows,
    draw_rows,
    feature_rows,
    fold_into_bias,
    refit_sink,
)

if TYPE_CHECKING:
    import onnx

    from sparseloom.core.protocols import Arrays

#: Per sink tensor: mean and standard deviation of each feature on the channel axis.
Stats = dict[str, tuple[np.ndarray, np.ndarray]]

#: Raised whenever :meth:`StructuredPruner.compress` gives another output for the same options
#: (it is part of the zoo's cache key). 2: least-squares refit of the sinks, on by default.
REVISION = 2


@attrs.define(eq=False)
class StructuredPruner:
    """Removes the least important channels / FFN neurons of every prunable group.

    ``level`` is the fraction of each prunable group's channels removed (0 < level < 1): a
    group of ``C`` channels loses about ``round(level * C)``, never all. Calibration batches (this
    subgraph's inputs) make the ranking data-aware and enable bias folding; they are optional.

    A subgraph with nothing prunable raises :class:`CompressionError`; call :meth:`prunable`
    first to skip such positions.

    ORT's and oneDNN's fast convolution kernels work on blocks of 8 (AVX2) or 16 (AVX-512)
    channels; a pruned layer with 36 channels ran *slower* than the dense 48 on ORT CPU. So the
    kept count is rounded to the nearest multiple of ``channel_multiple`` (ties keep more) when
    the group's size is such a multiple and the rounding still removes something; otherwise the
    exact count is used. ``channel_multiple=1`` gives exact fractions.

    With calibration batches, ``refit=True`` re-fits the weights and bias of each layer that
    reads a pruned group (its *sink*) by ridge least squares on at most :data:`REFIT_ROWS`
    calibration rows, so that its output from the kept channels matches its dense output (see
    the module docstring); ``refit=False`` folds the removed channels' mean into the sink's bias
    only, exactly as before the refit existed. Without calibration both do nothing.

    :param channel_multiple: round kept channel counts to multiples of this (see above).
    :param max_calibration_batches: calibration batches used for activation statistics.
    :param refit: re-fit the sinks by least squares (``True``) or only fold means into biases.
    """

    channel_multiple: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    max_calibration_batches: int = attrs.field(default=16, validator=attrs.validators.ge(1))
    refit: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    kind: str = attrs.field(default="structured", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(0.25, 0.5), init=False)

    def cache_key(self) -> dict[str, object]:
        """What its output depends on beyond the options a workload file gives, for the zoo's
        cache key (:func:`sparseloom.zoo.options.zoo_config`): the algorithm's
        :data:`REVISION` and the resolved ``refit``, so a zoo built before the refit existed (or
        under another default) is rebuilt rather than reused."""
        return {"revision": REVISION, "refit": self.refit}

    def groups(self, subgraph: onnx.ModelProto) -> tuple[list[Group], list[str]]:
        """The prunable channel groups of ``subgraph``, and why every other producer is not."""
        model = model_copy(subgraph)
        constants_to_initializers(model)
        graph = ChannelGraph(model)
        groups, reasons = [], []
        for index, node in enumerate(model.graph.node):
            try:
                group = graph.producer_group(index)
            except Blocked as blocked:
                reasons.append(f"{node.op_type} {node.name!r}: {blocked}")
                continue
            if group is not None and group.channels >= 2:
                groups.append(group)
        return groups, reasons

    def prunable(self, subgraph: onnx.ModelProto) -> bool:
        """Whether ``subgraph`` has at least one channel group this pruner can shrink."""
        return bool(self.groups(subgraph)[0])

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays] = ()
    ) -> onnx.ModelProto:
        """Return a copy of ``subgraph`` with ``level`` of each prunable group's channels removed.

        :raises CompressionError: if ``level`` is not in (0, 1), or nothing in the subgraph can
            be pruned at this level (the message lists why each producer keeps its channels).
        """
        import onnx

        fraction = check_fraction_level(self.kind, level)
        pruned = model_copy(subgraph)
        constants_to_initializers(pruned)
        initial_groups, reasons = self.groups(pruned)
        batches = (check_calibration(self.kind, subgraph,
                                     list(calibration)[: self.max_calibration_batches])
                   if calibration else [])
        refit_rows = REFIT_ROWS if self.refit and batches else 0
        # The refit's target: every sink's input in the dense subgraph, on the same rows.
        dense_rows = _calibrate(pruned, [s for g in initial_groups for s in g.sinks], batches,
                                refit_rows)[1] if refit_rows else {}
        removed_any = False
        graph = ChannelGraph(pruned)
        for index in range(len(pruned.graph.node)):
            try:
                group = graph.producer_group(index)
            except Blocked:
                continue  # already in ``reasons``
            if group is None:
                continue
            remove = channels_to_remove(group.channels, fraction, self.channel_multiple)
            if remove <= 0:
                reasons.append(f"{group.producer!r}: {group.channels} channels, "
                               f"{fraction:g} of them rounds to none")
                continue
            # Statistics of the model as pruned so far, so folded biases stay consistent.
            stats, rows = (_calibrate(pruned, group.sinks, batches, refit_rows) if batches
                           else ({}, {}))
            scores = _scores(graph, group, stats)
            keep = np.sort(np.argsort(scores, kind="stable")[remove:])
            if refit_rows:
                for sink in group.sinks:
                    key = _sink_key(pruned, sink)
                    refit_sink(pruned, graph, sink, keep, rows[key], dense_rows.get(key))
            _apply(pruned, graph, group, keep, {} if refit_rows else stats)
            removed_any = True
            graph = ChannelGraph(pruned)  # re-indexed: this group changed weight shapes
        if not removed_any:
            raise CompressionError(
                f"compressor {self.kind!r}: nothing in subgraph {subgraph.graph.name!r} can be "
                f"pruned at level {level}; every producer keeps its channels: "
                f"{'; '.join(reasons) or 'no Conv/Gemm/MatMul with a constant weight'}. "
                f"Skip this position for structured pruning (check prunable() first)"
            )
        del pruned.graph.value_info[:]
        pruned = onnx.shape_inference.infer_shapes(pruned)
        onnx.checker.check_model(pruned)
        check_boundaries(self.kind, subgraph, pruned)
        return pruned


def channels_to_remove(channels: int, fraction: float, multiple: int = 1) -> int:
    """How many of ``channels`` to remove at ``fraction`` (see :class:`StructuredPruner`)."""
    exact = min(channels - 1, round(fraction * channels))
    if multiple <= 1 or channels % multiple:
        return exact
    kept = multiple * int(np.floor((channels - exact) / multiple + 0.5))
    return channels - kept if multiple <= kept < channels else exact


def _sink_key(model: onnx.ModelProto, sink: Sink) -> str:
    """A name for ``sink`` that stays the same while the model is pruned: its first output."""
    return str(model.graph.node[sink.node].output[0])


def _calibrate(
    model: onnx.ModelProto, sinks: Sequence[Sink], calibration: Sequence[Arrays],
    sample_rows: int = 0,
) -> tuple[Stats, Rows]:
    """Mean and std of every sink input's features over the calibration batches (ORT CPU),
    and, when ``sample_rows`` > 0, about that many of each sink's input rows (:data:`Rows`).

    Rows are drawn per batch with a seed made of the batch's index and the sink's key, so two
    models with the same tensor shapes (dense and pruned) give the same positions.
    """
    wanted = sorted({s.tensor: s.axis for s in sinks}.items())
    session = probe_session(model, [name for name, _ in wanted])
    feed_names = [i.name for i in session.get_inputs()]
    sums: dict[str, list[np.ndarray]] = {}
    sampled: dict[str, list[np.ndarray]] = {_sink_key(model, s): [] for s in sinks}
    quota = -(-sample_rows // max(1, len(calibration)))
    for batch_index, batch in enumerate(calibration):
        values = session.run([n for n, _ in wanted], {n: batch[n] for n in feed_names})
        for (name, axis), value in zip(wanted, values, strict=True):
            rows = feature_rows(value.astype(np.float64), axis)
            total = sums.setdefault(name, [np.zeros(rows.shape[1]), np.zeros(rows.shape[1]),
                                           np.zeros(1)])
            total[0] += rows.sum(0)
            total[1] += (rows**2).sum(0)
            total[2] += rows.shape[0]
        if sample_rows:
            captured = dict(zip([n for n, _ in wanted], values, strict=True))
            for sink in sinks:
                key = _sink_key(model, sink)
                seed = np.random.default_rng([batch_index, zlib.crc32(key.encode())])
                sampled[key].append(draw_rows(model, sink, captured[sink.tensor], quota, seed))
    stats: Stats = {}
    for name, (linear, squares, count) in sums.items():
        mean = linear / count
        stats[name] = (mean, np.sqrt(np.maximum(squares / count - mean**2, 0.0)))
    return stats, {key: np.concatenate(parts) for key, parts in sampled.items() if parts}


def _scores(graph: ChannelGraph, group: Group, stats: Stats) -> np.ndarray:
    """Importance of each channel of ``group``: higher stays."""
    if not stats or any(s.tensor not in stats for s in group.sinks):
        weight_name, weight_axis, _ = group.edits[0]
        weight = np.abs(graph.arrays[weight_name])
        return weight.sum(axis=tuple(a for a in range(weight.ndim) if a != weight_axis))
    scores = np.zeros(group.channels)
    for sink in group.sinks:
        weight = graph.arrays[sink.weight]
        other_axes = tuple(a for a in range(weight.ndim) if a != sink.weight_axis)
        column_norms = np.sqrt((weight.astype(np.float64) ** 2).sum(axis=other_axes))
        impact = stats[sink.tensor][1] * column_norms
        scores += impact.reshape(group.channels, sink.block).sum(1)
    return scores


def _apply(model: onnx.ModelProto, graph: ChannelGraph, group: Group, keep: np.ndarray,
           stats: Stats) -> None:
    """Fold removed channels into the sinks' biases (means from ``stats``; pass none after a
    refit), then slice to the ``keep`` channels."""
    from onnx import helper

    by_name = {init.name: init for init in model.graph.initializer}
    removed = np.setdiff1d(np.arange(group.channels), keep)
    for sink in group.sinks:
        if sink.tensor in stats:
            fold_into_bias(model, graph, sink, channel_rows(removed, sink.block),
                           stats[sink.tensor][0])
            by_name = {init.name: init for init in model.graph.initializer}
    for name, axis, block in group.edits:
        replace_initializer(by_name[name],
                            np.take(graph.arrays[name], channel_rows(keep, block), axis))
    for index in group.depthwise:
        node = model.graph.node[index]
        kept = [a for a in node.attribute if a.name != "group"]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("group", len(keep))])


