"""Quantization compressors: static INT8 in QDQ form, and FP16 weights and compute.

Both keep the subgraph's boundary tensors float32, so a quantized subgraph stitches with any
other variant: INT8 places QuantizeLinear/DequantizeLinear pairs inside the graph only, FP16
casts float32 boundaries to float16 on the way in and back on the way out. Both load on ONNX
Runtime and OpenVINO (OpenVINO cannot read ORT's QOperator form; QDQ is the portable one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import attrs
import numpy as np

from sparseloom.core.errors import CompressionError
from sparseloom.core.types import as_tuple
from sparseloom.plugins.compressors._common import (
    check_boundaries,
    check_calibration,
    check_no_level,
    model_copy,
    name_layers,
    note,
    quiet_quantizer,
    restore_boundary_names,
)
from sparseloom.plugins.compressors._embedding import quantize_embeddings
from sparseloom.plugins.compressors._sensitivity import within_error
from sparseloom.workload.arguments import number_field

if TYPE_CHECKING:
    import onnx

    from sparseloom.core.protocols import Arrays

CalibrationMethodName = Literal["minmax", "entropy", "percentile"]


#: The output error (relative L2 against float32 on calibration batches) above which INT8 leaves
#: a subgraph's most sensitive layers in float32. See docs/compressors.md for how it was chosen.
MAX_INT8_ERROR = 0.1
#: Raised whenever :class:`Int8Quantizer` gives another output for the same options (part of
#: the zoo's cache key). 2: sensitive layers stay float32. 3: large embedding tables in int8.
INT8_REVISION = 3


@attrs.define(eq=False, kw_only=True)
class Int8Weights:
    """What both INT8 compressors share: the weights' width, the sensitive-layer search's
    share and batches, int8 embedding tables, and how a quantized subgraph is finished.

    :param reduce_range: 7-bit weights to avoid int16 saturation on CPUs without VNNI and AMX
        (see :class:`Int8Quantizer`); ``None``: on where the CPU has neither.
    :param max_float_share: at most this share of the layers stays float32.
    :param error_batches: calibration batches the output error is measured on.
    :param embeddings: store large embedding tables in int8 (one scale per row).
    """

    #: Raised whenever the compressor gives another output for the same options (part of the
    #: zoo's cache key).
    revision: ClassVar[int] = 0

    reduce_range: bool | None = None
    max_float_share: float = attrs.field(
        default=0.25, validator=number_field(low=0, low_open=True, high=1))
    error_batches: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    embeddings: bool = True

    @property
    def seven_bit(self) -> bool:
        """Whether weights are stored in 7 bits on this machine (``reduce_range`` resolved)."""
        if self.reduce_range is not None:
            return self.reduce_range
        from sparseloom.core.processors.cores import has_int8_dot_product

        return not has_int8_dot_product()

    def cache_key(self) -> dict[str, object]:
        """What its output depends on beyond its options: the resolved weight width (a zoo
        built on a CPU without VNNI is not reused on one with it)."""
        return {"seven_bit_weights": self.seven_bit, "revision": self.revision,
                "embeddings": self.embeddings}

    def finish(self, kind: str, subgraph: onnx.ModelProto,
               quantized: onnx.ModelProto) -> onnx.ModelProto:
        """``quantized`` with its large embedding tables in int8 (when ``embeddings``) and
        ``subgraph``'s boundary names, checked against ``subgraph``'s boundaries."""
        tables = quantize_embeddings(quantized) if self.embeddings else []
        if tables:
            note(quantized, f"int8 embedding tables, one scale per row: {', '.join(tables)}")
        restore_boundary_names(subgraph, quantized)
        check_boundaries(kind, subgraph, quantized)
        return quantized


@attrs.define(eq=False)
class Int8Quantizer(Int8Weights):
    """Static INT8 quantization in QDQ form with ONNX Runtime's quantizer.

    Weights: int8, symmetric, per output channel. Activations: uint8 (U8S8, the fast path of
    both ORT and OpenVINO on x86), ranges calibrated on the given batches. Only Conv, Gemm and
    MatMul with a constant weight are quantized; Softmax, normalisations, attention masks and
    every other op stay float32, which keeps masks with ±1e4 offsets exact. A large embedding
    table (a Gather from a float32 table of at least 1,024 rows) is stored in int8 with a
    scale per row (:mod:`~sparseloom.plugins.compressors._embedding`).

    ``reduce_range`` stores weights in 7 bits. On x86 CPUs without VNNI the u8×s8 kernels of
    ORT (and OpenVINO/oneDNN) add products pairwise in int16 and saturate; with full 8-bit
    weights the tiny test transformer's output error grew 10× (see docs/compressors.md). On a
    CPU with VNNI or AMX the products are added in int32 and 7 bits only halve the weights'
    resolution, so by default (``None``) it is on only where the CPU has neither
    (:func:`sparseloom.core.processors.cores.has_int8_dot_product`).

    ``level`` is meaningless here: ``default_levels`` is empty and ``compress`` takes
    ``level=0.0``. ``calibration`` is required.

    :param calibrate_method: ``minmax`` (default), ``entropy`` or ``percentile``; percentile
        and entropy fail on constant inputs (an all-ones mask) and measured no better.
    :param reduce_range: 7-bit weights to avoid int16 saturation (see above); ``None``: on
        where the CPU lacks VNNI and AMX.
    :param op_types: the op types to quantize.
    :param max_calibration_batches: calibration batches used.
    :param max_error: the relative L2 error of the subgraph's outputs against float32, on the
        first ``error_batches`` calibration batches, above which its most sensitive layers stay
        float32 (:mod:`~sparseloom.plugins.compressors._sensitivity`); ``None``: every
        layer INT8.
    :param max_float_share: at most this share of the layers stays float32.
    :param error_batches: calibration batches the output error is measured on (and the INT8
        ranges of the search's trial models come from).
    :param embeddings: store large embedding tables in int8 (one scale per row).
    """

    revision: ClassVar[int] = INT8_REVISION

    calibrate_method: CalibrationMethodName = attrs.field(
        default="minmax", validator=attrs.validators.in_(("minmax", "entropy", "percentile"))
    )
    op_types: tuple[str, ...] = attrs.field(default=("Conv", "Gemm", "MatMul"), converter=as_tuple)
    max_calibration_batches: int = attrs.field(default=32, validator=attrs.validators.ge(1))
    max_error: float | None = attrs.field(
        default=MAX_INT8_ERROR, validator=number_field(low=0, low_open=True, optional=True))
    kind: str = attrs.field(default="int8", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(), init=False)

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays]
    ) -> onnx.ModelProto:
        """Return the QDQ-quantized copy of ``subgraph``; boundaries stay float32.

        :raises CompressionError: if ``level`` is not 0.0, ``calibration`` is empty or lacks a
            subgraph input, or the quantizer fails (the message says on which subgraph).
        """
        import tempfile
        from pathlib import Path

        import onnx
        from onnxruntime.quantization import (
            CalibrationDataReader,
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        check_no_level(self.kind, level)
        batches = check_calibration(self.kind, subgraph, calibration)
        batches = batches[: self.max_calibration_batches]

        class _Reader(CalibrationDataReader):
            def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
                self._feeds = iter(list(feeds))

            def get_next(self) -> Mapping[str, np.ndarray] | None:
                return next(self._feeds, None)

        method = {
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }[self.calibrate_method]
        named = model_copy(subgraph)
        layers = name_layers(named, self.op_types)
        # The quantizer wants file paths (given a ModelProto it rewrites it in place).
        with tempfile.TemporaryDirectory(prefix="sparseloom-int8-") as workdir:
            source, target = Path(workdir) / "dense.onnx", Path(workdir) / "int8.onnx"
            onnx.save(named, str(source))

            def quantize(exclude: Sequence[str], probe: bool) -> onnx.ModelProto:
                feeds = batches[: self.error_batches] if probe else batches
                try:
                    with quiet_quantizer():
                        quantize_static(
                            str(source), str(target), _Reader(feeds),
                            quant_format=QuantFormat.QDQ,
                            op_types_to_quantize=list(self.op_types),
                            per_channel=True,
                            reduce_range=self.seven_bit,
                            activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8,
                            calibrate_method=method,
                            nodes_to_exclude=list(exclude),
                            extra_options={"MatMulConstBOnly": True},
                        )
                except Exception as error:
                    raise CompressionError(
                        f"compressor {self.kind!r}: onnxruntime's quantize_static failed on "
                        f"subgraph {subgraph.graph.name!r} ({type(error).__name__}: {error}); "
                        f"check that the calibration batches are finite and that the subgraph "
                        f"runs on ORT CPU") from error
                return onnx.load(str(target))

            quantized = within_error(named, quantize, layers, batches[: self.error_batches],
                                     self.max_error, self.max_float_share, label="INT8")
        return self.finish(self.kind, subgraph, quantized)


@attrs.define(eq=False)
class Fp16Converter:
    """FP16 weights and compute inside, float32 boundaries (Casts at the edges).

    Uses ``onnxruntime.transformers.float16.convert_float_to_float16`` with
    ``keep_io_types=True``. Ops in ORT's default block list (and ``keep_float32_ops``) stay
    float32 with Casts around them. Constants beyond the float16 range (±65504) are clamped,
    which the converter warns about. On ORT CPU most float16 kernels are missing, so ORT
    inserts Casts back to float32 (no speed-up there); OpenVINO CPU runs its own inference
    precision. The variant matters on GPUs and NPUs. ``level`` must be 0.0; calibration is not
    used.

    :param keep_float32_ops: extra op types to keep in float32 (e.g. ``("LayerNormalization",)``).
    """

    keep_float32_ops: tuple[str, ...] = attrs.field(default=(), converter=as_tuple)
    kind: str = attrs.field(default="fp16", init=False)
    default_levels: tuple[float, ...] = attrs.field(default=(), init=False)

    def compress(
        self, subgraph: onnx.ModelProto, level: float, calibration: Sequence[Arrays] = ()
    ) -> onnx.ModelProto:
        """Return the float16 copy of ``subgraph``; boundaries stay float32.

        :raises CompressionError: if ``level`` is not 0.0 or the conversion fails.
        """
        import warnings

        from onnxruntime.transformers.float16 import (
            DEFAULT_OP_BLOCK_LIST,
            convert_float_to_float16,
        )

        check_no_level(self.kind, level)
        source = model_copy(subgraph)  # the converter edits its argument in place
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # clamping notices
                converted = convert_float_to_float16(
                    source,
                    keep_io_types=True,
                    op_block_list=[*DEFAULT_OP_BLOCK_LIST, *self.keep_float32_ops],
                )
        except Exception as error:
            raise CompressionError(
                f"compressor {self.kind!r}: float16 conversion failed on subgraph "
                f"{subgraph.graph.name!r} ({type(error).__name__}: {error}); try keeping the "
                f"failing op type in float32 with keep_float32_ops"
            ) from error
        restore_boundary_names(subgraph, converted)
        check_boundaries(self.kind, subgraph, converted)
        return converted
