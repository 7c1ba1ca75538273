"""The dense sentiment model of ``default`` on one and two threads: OpenVINO f32 and bf16 against
ONNX Runtime f32, in interleaved rounds, with its accuracy on the whole eval set per precision.

The figures behind docs/results.md, *Kernel times: sentiment in f32 and bf16*:

    .venv/bin/python benchmarks/sentiment_precision.py --rounds 5

Run it on a quiet machine (1-minute load <= 0.5); it prints each configuration's p50 per round,
their median [min-max], and the ratio to OpenVINO f32 on one thread per round.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=150, help="timed calls per round")
    args = parser.parse_args()

    import onnxruntime as ort
    import openvino as ov
    from _rounds import interleaved, sentiment_row

    from sparseloom.workload.evaluate import evaluate

    task, row = sentiment_row()
    core = ov.Core()
    calls = {}
    for precision in ("f32", "bf16"):
        for threads in (1, 2):
            compiled = core.compile_model(str(task.model_path), "CPU", {
                "INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False})
            request = compiled.create_infer_request()
            calls[f"ov {precision} {threads}t"] = lambda r=request: r.infer(row)
    for threads in (1, 2):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(task.model_path), options,
                                       providers=["CPUExecutionProvider"])
        calls[f"ort f32 {threads}t"] = lambda s=session: s.run(None, row)

    print(f"1-minute load before: {os.getloadavg()[0]:.2f}")
    for spec in ("ort:CPU", "ov:CPU", "ov:CPU?INFERENCE_PRECISION_HINT=bf16"):
        print(f"accuracy on the whole eval set ({task.num_eval} rows), {spec}: "
              f"{evaluate(task, processor=spec):.4f}")
    p50 = interleaved(calls, args.rounds, args.calls, 50)
    base = np.asarray(p50["ov f32 1t"])
    for name in calls:
        values = np.asarray(p50[name])
        ratio = base / values
        print(f"{name:12s} p50 {np.median(values):.2f} ms [{values.min():.2f}-{values.max():.2f}]"
              f"   speed-up over ov f32 1t: {np.median(ratio):.2f}x "
              f"[{ratio.min():.2f}-{ratio.max():.2f}]")


if __name__ == "__main__":
    main()
