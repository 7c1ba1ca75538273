"""How much of a small model's batch-1 call no compressor that keeps its operators can remove.

Pruning channels, quantizing weights or factorising them keeps a model's operators: each call
still pays the runtime's fixed cost per call and per operator, however little each computes.
This benchmark measures the two on ONNX Runtime, the runtime that serves the light tasks
fastest (one thread, the process pinned to one core): a chain of k tiny MatMul operators
(``[1, 8] × [8, 8]``) for several k, timed hot in interleaved rounds, and a least-squares line
through (operators executed, latency) gives the cost per call (intercept) and per operator
(slope). It counts each task's operators as ONNX Runtime executes them (the graph it
optimised, written out), times each dense model on its first eval row, and prints per task

    dense ms | operators | floor ms = call + operators × per operator | ceiling = dense ÷ floor

beside the speed-up of a copy with 90 % of every prunable channel group removed (sparseloom's
structured pruner, uncalibrated; its accuracy is not the point: how fast the same operators run
on a tenth of the weights), timed in the same rounds.

The ceiling is the most a compressor that keeps the graph's operators could buy there (the
floor is a lower bound: a real operator costs more than a tiny MatMul's dispatch). A second
table takes ONNX Runtime's own profiler: the share of each call spent in operators that read a
weight (MatMul, Gemm, Conv: what pruning, quantization and factorisation shrink), and
1 ÷ (1 − share), the most such a compressor could buy were those operators free. OpenVINO is
left out: it fuses such a chain into one generated kernel (a ``Subgraph``), so a chain does not
measure its cost per operator. The figures
behind docs/results.md, *Compressors*:

    .venv/bin/python benchmarks/op_floor.py --rounds 5

Run it on a quiet machine (1-minute load <= 0.5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: The fraction of each prunable channel group the pruned copies lose.
PRUNE_LEVEL = 0.9
#: Operators in the synthetic chains the per-call and per-operator costs are fitted on.
CHAIN_LENGTHS = (1, 33, 65, 129, 257)


def chain_model(k: int, folder: Path) -> Path:
    """A model of ``k`` MatMul operators in a row on a ``[1, 8]`` float input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(k)
    weights = [numpy_helper.from_array((rng.standard_normal((8, 8)) / 8).astype(np.float32),
                                       f"w{i}") for i in range(k)]
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"],
                              ["y" if i == k - 1 else f"h{i}"]) for i in range(k)]
    graph = helper.make_graph(nodes, f"chain{k}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / f"chain{k}.onnx"
    onnx.save(model, path)
    return path


def one_thread_session(path: Path, folder: Path, profile: bool = False) -> tuple[Any, Any]:
    """A one-thread ONNX Runtime session of ``path`` (profiling when ``profile``), and the
    graph it optimised (written to ``folder``)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # (its warning that the written graph is machine-specific)
    optimised = folder / f"{path.stem}{'.profiled' if profile else ''}.optimised.onnx"
    options.optimized_model_filepath = str(optimised)
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = str(folder / path.stem)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session, onnx.load(str(optimised), load_external_data=False).graph


def ort_call(path: Path, feed: dict[str, np.ndarray], folder: Path) -> tuple[Any, int]:
    """A one-thread ONNX Runtime call of ``path`` on ``feed``, and how many operators its
    optimised graph runs."""
    session, graph = one_thread_session(path, folder)
    return (lambda: session.run(None, feed)), len(graph.node)


def weights_share(path: Path, feed: dict[str, np.ndarray], folder: Path,
                  calls: int) -> tuple[float, dict[str, float]]:
    """The share of a one-thread ONNX Runtime call of ``path`` spent in operators that read a
    weight (an initializer of the graph it optimised: the MatMul, Gemm and Conv a compressor
    shrinks), from ONNX Runtime's own profiler over ``calls`` calls; and the time per call
    (µs) by operator type."""
    import json

    session, graph = one_thread_session(path, folder, profile=True)
    weights = {i.name for i in graph.initializer}
    weighted = {n.name for n in graph.node if any(x in weights for x in n.input)}
    for _ in range(calls):
        session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    total = sum(e["dur"] for e in runs)
    used = sum(e["dur"] for e in nodes if e["name"][:-len("_kernel_time")] in weighted)
    by_type: dict[str, float] = {}
    for e in nodes:
        op = e.get("args", {}).get("op_name", "?")
        by_type[op] = by_type.get(op, 0.0) + e["dur"] / max(len(runs), 1)
    return used / total if total else float("nan"), by_type


def pruned_model(path: Path, level: float, folder: Path) -> Path | None:
    """``path`` with ``level`` of every prunable channel group removed (sparseloom's structured
    pruner, no calibration: accuracy aside, how fast the same operators run on far smaller
    weights); ``None`` where nothing can be pruned."""
    import onnx

    from sparseloom.core.errors import CompressionError
    from sparseloom.plugins.compressors.structured import StructuredPruner

    try:
        model = StructuredPruner(refit=False).compress(onnx.load(str(path)), level)
    except CompressionError:
        return None
    out = folder / f"{path.stem}.pruned.onnx"
    onnx.save(model, out)
    return out


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of latency on operators."""
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per slot")
    args = parser.parse_args()

    from _rounds import interleaved

    from sparseloom.workload.load import load_workload

    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}; pinned to core {cpu}; "
          f"{args.rounds} interleaved rounds of {args.calls} calls, p50")
    workload = load_workload(args.workload, progress=False)
    calls: dict[str, Any] = {}
    operators: dict[str, int] = {}
    feeds = {task.name: {name: array[:1] for name, array in task.eval_inputs.items()}
             for task in workload.tasks}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        x = {"x": np.ones((1, 8), dtype=np.float32)}
        for k in CHAIN_LENGTHS:
            path = chain_model(k, folder)
            calls[f"chain{k}"], operators[f"chain{k}"] = ort_call(path, x, folder)
        for task in workload.tasks:
            path, feed = Path(task.model_path), feeds[task.name]
            calls[task.name], operators[task.name] = ort_call(path, feed, folder)
            pruned = pruned_model(path, PRUNE_LEVEL, folder)
            if pruned is not None:
                calls[f"{task.name} pruned"], _ = ort_call(pruned, feed, folder)
        times = interleaved(calls, args.rounds, args.calls, 50)
    median = {name: statistics.median(values) for name, values in times.items()}
    points = [(operators[f"chain{k}"], median[f"chain{k}"]) for k in CHAIN_LENGTHS]
    call, per_op = fit(points)
    print(f"\nONNX Runtime, one thread: {call * 1e3:.1f} µs a call, {per_op * 1e3:.2f} µs an "
          "operator (chains, operators: ms: "
          + ", ".join(f"{n}: {ms:.4f}" for n, ms in points) + ")")
    print(f"\n| task | dense ms [min–max] | operators | floor ms | floor ÷ dense | ceiling | "
          f"pruned {PRUNE_LEVEL:g}: speed-up per round, median [min–max] |")
    print("|---|---|---|---|---|---|---|")
    for task in workload.tasks:
        floor = call + operators[task.name] * per_op
        ms = median[task.name]
        pruned = times.get(f"{task.name} pruned")
        ratios = [d / p for d, p in zip(times[task.name], pruned, strict=True)] if pruned else []
        speed = (f"×{statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}]"
                 if ratios else "nothing prunable")
        print(f"| {task.name} | {ms:.4f} [{min(times[task.name]):.4f}–"
              f"{max(times[task.name]):.4f}] | {operators[task.name]} | {floor:.4f} | "
              f"{floor / ms:.2f} | ×{ms / floor:.2f} | {speed} |")
    print("\nONNX Runtime's profiler: the share of each call in operators that read a weight, "
          f"over {args.calls} calls; ceiling = 1 ÷ (1 − share), the most a compressor that "
          "only shrinks weights could buy were those operators free")
    print("\n| task | weights' share | ceiling | µs per call by operator type (top 6) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for task in workload.tasks:
            share, by_type = weights_share(Path(task.model_path), feeds[task.name], Path(tmp),
                                           args.calls)
            top = sorted(by_type.items(), key=lambda item: -item[1])[:6]
            print(f"| {task.name} | {share:.2f} | ×{1 / (1 - share):.2f} | "
                  + ", ".join(f"{op} {us:.1f}" for op, us in top) + " |")


if __name__ == "__main__":
    main()
