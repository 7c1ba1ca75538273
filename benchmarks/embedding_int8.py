"""The dense sentiment model of ``default`` with its word embedding in float32 and in int8 (one
scale per row, as ``int8`` stores it: :mod:`sparseloom.plugins.compressors._embedding`): size,
accuracy on the eval set, and hot batch-1 latency on ONNX Runtime f32 and OpenVINO bf16, one
thread each, in interleaved rounds.

The figures behind docs/compressors.md (int8, large embedding tables):

    .venv/bin/python benchmarks/embedding_int8.py --rounds 5

Run it on a quiet machine (1-minute load <= 0.5); it prints each model's p25 per runtime, the
median [min-max] over the rounds, and the float32 ÷ int8 latency ratio per round.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per round")
    args = parser.parse_args()

    import onnx
    import onnxruntime as ort
    import openvino as ov
    from _rounds import interleaved, sentiment_row

    from sparseloom.core.processors import openvino_cpu_precision
    from sparseloom.plugins.compressors._embedding import quantize_embeddings
    from sparseloom.workload.evaluate import evaluate

    task, row = sentiment_row()
    workdir = Path(tempfile.mkdtemp(prefix="sparseloom-embedding-"))
    paths = {"float32 table": Path(task.model_path), "int8 table": workdir / "int8.onnx"}
    model = onnx.load(str(task.model_path))
    tables = quantize_embeddings(model)
    onnx.save(model, str(paths["int8 table"]))
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}; tables in int8: {tables}")
    ov_precision = openvino_cpu_precision()
    core = ov.Core()
    calls = {}
    for label, path in paths.items():
        print(f"{label}: {path.stat().st_size / 1e6:.1f} MB, accuracy on {task.num_eval} eval "
              f"rows (ONNX Runtime f32) {evaluate(task, path):.4f}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        calls[f"ort f32, {label}"] = lambda s=session: s.run(None, row)
        compiled = core.compile_model(str(path), "CPU", {
            "INFERENCE_PRECISION_HINT": ov_precision, "INFERENCE_NUM_THREADS": 1,
            "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False})
        request = compiled.create_infer_request()
        calls[f"ov {ov_precision}, {label}"] = lambda r=request: r.infer(row)
    p25 = interleaved(calls, args.rounds, args.calls, 25, warmup=20)
    for runtime in ("ort f32", f"ov {ov_precision}"):
        dense = np.asarray(p25[f"{runtime}, float32 table"])
        small = np.asarray(p25[f"{runtime}, int8 table"])
        ratio = dense / small
        for label, values in (("float32 table", dense), ("int8 table", small)):
            print(f"{runtime}, {label}: p25 {np.median(values):.3f} ms "
                  f"[{values.min():.3f}-{values.max():.3f}]")
        print(f"{runtime}: float32 ÷ int8 table {np.median(ratio):.2f}x "
              f"[{ratio.min():.2f}-{ratio.max():.2f}] (above 1: the int8 table is faster)")


if __name__ == "__main__":
    main()
