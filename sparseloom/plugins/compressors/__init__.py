"""Built-in compressors: unstructured and structured pruning, low-rank factorisation, INT8
(static QDQ and dynamic) and FP16.

Each is applied per subgraph of an already partitioned dense model ("split first, then
compress") and returns a subgraph with the same boundary tensor names, shapes and dtypes.

==============  ==========================  ======================  ==========================
name / kind     what it does                default_levels          level means
==============  ==========================  ======================  ==========================
unstructured    zero smallest weights       (0.3, 0.5, 0.7, 0.9)    fraction of weights zeroed
structured      remove channels / neurons   (0.25, 0.5)             fraction of channels cut
lowrank         W → A·B by truncated SVD    (0.25, 0.5)             fraction of parameters cut
int8            static QDQ quantization     () — pass 0.0           nothing (needs calibration)
int8dyn         dynamic INT8 (MatMul/Gemm)  () — pass 0.0           nothing
fp16            float16 weights + compute   () — pass 0.0           nothing
==============  ==========================  ======================  ==========================

The pruners expose ``prunable(subgraph) -> bool`` so a zoo can skip positions with nothing to
prune; ``compress`` raises :class:`~sparseloom.core.errors.CompressionError` there instead of
returning the dense graph. See ``docs/compressors.md``.
"""

from __future__ import annotations

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.compressors._common import NO_LEVEL, boundary_signature
from sparseloom.plugins.compressors.dynamic_quantization import Int8DynamicQuantizer
from sparseloom.plugins.compressors.lowrank import LowRankFactoriser
from sparseloom.plugins.compressors.pruning import UnstructuredPruner, zero_fraction
from sparseloom.plugins.compressors.quantization import Fp16Converter, Int8Quantizer
from sparseloom.plugins.compressors.structured import StructuredPruner

__all__ = [
    "NO_LEVEL",
    "Fp16Converter",
    "Int8DynamicQuantizer",
    "Int8Quantizer",
    "LowRankFactoriser",
    "StructuredPruner",
    "UnstructuredPruner",
    "boundary_signature",
    "sparseloom_register_compressors",
    "zero_fraction",
]


@hookimpl
def sparseloom_register_compressors(register: RegisterFn) -> None:
    """Register the six built-in compressors under their kind names (each is its capability)."""
    for kind, factory, description in (
        ("unstructured", UnstructuredPruner,
         "magnitude pruning: zero the smallest Conv/Gemm/MatMul weights (global)"),
        ("structured", StructuredPruner,
         "remove conv channels / FFN neurons inside a subgraph (shapes shrink)"),
        ("lowrank", LowRankFactoriser,
         "factorise Gemm/MatMul/Conv weights in two by truncated SVD (whitened by calibration)"),
        ("int8", Int8Quantizer, "static INT8 QDQ quantization (per-channel weights, calibrated)"),
        ("int8dyn", Int8DynamicQuantizer,
         "dynamic INT8 of MatMul/Gemm (per-channel weights, activations ranged per call)"),
        ("fp16", Fp16Converter, "float16 weights and compute with float32 boundaries"),
    ):
        register(kind, factory, description=description, capabilities=(kind,))
