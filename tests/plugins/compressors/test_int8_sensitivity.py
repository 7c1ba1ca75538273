"""INT8 that leaves its most sensitive layers in float32, against plain ONNX Runtime runs of
the float model: a front end that INT8 wrecks (a wide-range input, then a log) stays float,
benign models are quantized whole."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from sparseloom.plugins.compressors import Int8Quantizer, boundary_signature
from sparseloom.plugins.compressors._sensitivity import _outputs, only_layer, output_error
from tests.plugins.compressors.models import graph_model as _model
from tests.plugins.compressors.models import initializer as _init
from tests.plugins.compressors.models import run_chain


def _front_end() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """x (a power spectrum: half its bins ~1e-3, half ~1e2) → MatMul summing bands of two bins
    (a mel filter bank) → log → MatMul → y. In INT8 the quiet bands round to zero."""
    rng = np.random.default_rng(0)
    bands = np.zeros((32, 16))
    bands[np.arange(32), np.arange(32) // 2] = 1.0
    inits = [_init("mel", bands),
             _init("eps", np.float32(1e-6)),
             _init("w2", rng.normal(size=(16, 8)) / 4)]
    nodes = [helper.make_node("MatMul", ["x", "mel"], ["m"], name="mel_mix"),
             helper.make_node("Add", ["m", "eps"], ["m_eps"]),
             helper.make_node("Log", ["m_eps"], ["logm"]),
             helper.make_node("MatMul", ["logm", "w2"], ["y"], name="project")]
    model = _model(nodes, inits, (32,), (8,))
    return model, [_spectrum(rng, 16) for _ in range(8)]


def _spectrum(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    scale = np.where(np.arange(32) < 16, 1e-3, 1e2)
    return {"x": (scale * rng.uniform(0.5, 1.5, size=(rows, 32))).astype(np.float32)}


def _error(model: onnx.ModelProto, dense: onnx.ModelProto, feed: dict[str, np.ndarray]) -> float:
    got, want = run_chain([model], feed)["y"], run_chain([dense], feed)["y"]
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def test_the_fragile_layer_stays_float_and_the_error_falls_under_the_bound() -> None:
    dense, batches = _front_end()
    whole = Int8Quantizer(max_error=None).compress(dense, 0.0, batches)
    mixed = Int8Quantizer(max_error=0.05, max_float_share=0.5).compress(dense, 0.0, batches)
    held_out = _spectrum(np.random.default_rng(9), 64)
    assert _error(whole, dense, held_out) > 0.05       # every layer INT8: wrecked
    assert _error(mixed, dense, held_out) < 0.05       # the mixing layer left float32
    assert "mel_mix" in mixed.doc_string and "project" not in mixed.doc_string.split(":")[-1]
    assert boundary_signature(mixed) == boundary_signature(dense)
    quantized_inputs = {n.input[0] for n in mixed.graph.node if n.op_type == "DequantizeLinear"}
    assert quantized_inputs  # the other layer is still INT8


def test_a_benign_model_is_quantized_whole(cnn) -> None:
    part, calibration = cnn.parts[0], cnn.calibration[0]
    plain = Int8Quantizer(max_error=None).compress(part, 0.0, calibration)
    checked = Int8Quantizer().compress(part, 0.0, calibration)
    assert not checked.doc_string  # nothing left float
    assert checked.SerializeToString() == plain.SerializeToString()


def test_only_layer_quantizes_that_layer_with_the_quantized_models_ranges() -> None:
    dense, batches = _front_end()
    every = Int8Quantizer(max_error=None).compress(dense, 0.0, batches)
    reference = _outputs(dense, batches[:2])
    alone = {name: output_error(reference, only_layer(dense, every, name), batches[:2])
             for name in ("mel_mix", "project")}
    assert alone["mel_mix"] > 10 * alone["project"] > 0
    ops = [n.op_type for n in only_layer(dense, every, "project").graph.node]
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 2
