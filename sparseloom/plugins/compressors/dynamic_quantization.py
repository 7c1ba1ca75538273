"""Dynamic INT8: int8 weights, activations quantized per call by the range they have then.

ONNX Runtime's ``quantize_dynamic`` turns each MatMul/Gemm with a constant weight into
``DynamicQuantizeLinear → MatMulInteger`` (fused into ``DynamicQuantizeMatMul`` when a session
is built): weights int8 per output channel, fixed; activations uint8 with the scale of *this*
call's tensor. Nothing is calibrated, so an activation outlier seen in calibration cannot
squeeze every later call's range — what costs static INT8 its accuracy on transformers.
ONNX Runtime runs it with its integer GEMM kernels (VNNI where the CPU has it); OpenVINO reads
the graph but computes it slower than dense (measured in docs/compressors.md), so it is a
variant for the processors that serve it well, and the profile says which those are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import attrs

from sparseloom.core.errors import CompressionError
from sparseloom.core.types import as_tuple
from sparseloom.plugins.compressors._common import (
    check_calibration,
    check_no_level,
    model_copy,
    name_layers,
    quiet_quantizer,
)
from sparseloom.plugins.compressors._sensitivity import within_error
from sparseloom.plugins.compressors.quantization import Int8Weights
from sparseloom.workload.arguments import number_field

if TYPE_CHECKING:
    import onnx

    from sparseloom.core.protocols import Arrays

#: Raised whenever :class:`Int8DynamicQuantizer` gives another output for the same options
#: (part of the zoo's cache key).
INT8_DYNAMIC_REVISION = 1


@attrs.define(eq=False)
class Int8DynamicQuantizer(Int8Weights):
    """Dynamic INT8 quantization of MatMul and Gemm weights with ONNX Runtime's quantizer.

    Weights int8, symmetric, per output channel; activations uint8 quantized at run time by
    each call's own range (``DynamicQuantizeLinear``). Convolutions stay float32 by default
    (ONNX Runtime's ``ConvInteger`` is slower than its float convolution on x86), as do
    Softmax, normalisations and attention masks. Large embedding tables are stored in int8
    with a scale per row, as :class:`~sparseloom.plugins.compressors.quantization.Int8Quantizer`
    does.

    ``level`` must be 0.0. By default every matching layer is quantized and calibration is not
    used. With ``max_error`` set and calibration given, the subgraph's output error against
    float32 on its first ``error_batches`` batches decides whether its most sensitive layers
    stay float32 (the search static INT8 runs). It is off by default: on ``sentiment`` it kept
    9 of 36 MatMuls float32 for an error of 0.12 and cost the variant a third of its speed-up
    (docs/compressors.md).

    :param reduce_range: 7-bit weights (for CPUs without VNNI or AMX, whose u8×s8 kernels
        saturate in int16); ``None``: on where the CPU has neither.
    :param op_types: the op types to quantize.
    :param max_error: the relative L2 output error above which sensitive layers stay float32
        (calibration needed); ``None`` (default): every layer INT8.
    :param max_float_share: at most this share of the layers stays float32.
    :param error_batches: calibration batches the output error is measured on.
    :param embeddings: store large embedding tables in int8 (one scale per row).
    """

    revision: ClassVar[int] = INT8_DYNAMIC_REVISION

    op_types: tuple[str, ...] = attrs.field(default=("Gemm", "MatMul"), converter=as_tuple)
    max_error: float | None = attrs.field(
        default=None, validator=number_field(low=0, low_open=True, optional=True))
    kind: str = attrs.field(default="int8dyn", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(), init=False)

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays] = ()
    ) -> onnx.ModelProto:
        """Return the dynamically quantized copy of ``subgraph``; boundaries stay float32.

        :raises CompressionError: if ``level`` is not 0.0, a calibration batch lacks a
            subgraph input, or the quantizer fails (the message says on which subgraph).
        """
        import tempfile
        from pathlib import Path

        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        check_no_level(self.kind, level)
        batches = check_calibration(self.kind, subgraph, calibration) if calibration else []
        named = model_copy(subgraph)
        layers = name_layers(named, self.op_types)
        with tempfile.TemporaryDirectory(prefix="sparseloom-int8dyn-") as workdir:
            source, target = Path(workdir) / "dense.onnx", Path(workdir) / "int8dyn.onnx"
            onnx.save(named, str(source))

            def quantize(exclude: Sequence[str], probe: bool = False) -> onnx.ModelProto:
                try:
                    with quiet_quantizer():
                        quantize_dynamic(
                            str(source), str(target),
                            op_types_to_quantize=list(self.op_types),
                            per_channel=True,
                            reduce_range=self.seven_bit,
                            weight_type=QuantType.QInt8,
                            nodes_to_exclude=list(exclude),
                            extra_options={"MatMulConstBOnly": True},
                        )
                except Exception as error:
                    raise CompressionError(
                        f"compressor {self.kind!r}: onnxruntime's quantize_dynamic failed on "
                        f"subgraph {subgraph.graph.name!r} ({type(error).__name__}: {error}); "
                        f"check that the subgraph runs on ORT CPU") from error
                return onnx.load(str(target))

            quantized = within_error(
                named, quantize, layers, batches[: self.error_batches], self.max_error,
                self.max_float_share, label="INT8",
                alone=lambda name: quantize([n for n in layers if n != name]))
        return self.finish(self.kind, subgraph, quantized)
