"""Measure every built-in compressor level on the two test models; prints a markdown table.

Run from the repository root::

    .venv/bin/python -m tests.plugins.compressors.bench [--batch 64] [--runs 200]

Models: the bundled ``tiny`` workload (small ResNet on digits) cut into 3 parts by
``sparseloom.zoo.partition``, and the two test models of ``models.py``. For each model,
subgraph position and compressor level: top-1 accuracy of the dense chain with that one
position replaced, the position's weight bytes, and its latency on ONNX Runtime CPU and
OpenVINO CPU (one thread each, batch ``--batch``, variants interleaved, best of five medians).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import (
    NO_LEVEL,
    Fp16Converter,
    Int8Quantizer,
    StructuredPruner,
    UnstructuredPruner,
)
from tests.plugins.compressors.models import accuracy, load_or_train, run_chain, split


def ort_runner(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> Callable[[], object]:
    """One ORT CPU inference with one intra-op thread, as a callable."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feed)


def ov_runner(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> Callable[[], object]:
    """One OpenVINO CPU inference with one thread, as a callable."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  {"INFERENCE_NUM_THREADS": 1, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    return lambda: request.infer(feed)


def interleaved_ms(runners: Sequence[Callable[[], object]], runs: int, rounds: int = 5
                   ) -> list[float]:
    """Per runner, the best over ``rounds`` of the median of ``runs // rounds`` runs.

    The runners take turns every round, so a burst of load on a shared machine hits all of
    them alike instead of whichever happened to be measured then.
    """
    for run in runners:
        for _ in range(5):
            run()
    best = [float("inf")] * len(runners)
    for _ in range(rounds):
        for number, run in enumerate(runners):
            samples = []
            for _ in range(max(1, runs // rounds)):
                start = time.perf_counter()
                run()
                samples.append(time.perf_counter() - start)
            best[number] = min(best[number], float(np.median(samples)))
    return [b * 1e3 for b in best]


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of all initializers."""
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(init).nbytes for init in model.graph.initializer)


@dataclass
class Subject:
    """A model cut into parts, with a scorer for a chain and per-part calibration/feeds."""

    name: str
    parts: list[onnx.ModelProto]
    score: Callable[[list[onnx.ModelProto]], float]
    calibration: list[list[dict[str, np.ndarray]]]
    feeds: list[dict[str, np.ndarray]]


def _prefix_inputs(parts: Sequence[onnx.ModelProto], inputs: dict[str, np.ndarray]
                   ) -> list[dict[str, np.ndarray]]:
    tensors, per_part = dict(inputs), []
    for part in parts:
        feed = {i.name: tensors[i.name] for i in part.graph.input}
        per_part.append(feed)
        tensors.update(run_chain([part], feed))
    return per_part


def _subject(name: str, parts: list[onnx.ModelProto], score, calibration_inputs,
             test_inputs, batch: int) -> Subject:
    calibration = [
        [{k: v[i : i + 32] for k, v in feed.items()} for i in range(0, 256, 32)]
        for feed in _prefix_inputs(parts, calibration_inputs)
    ]
    feeds = [{k: np.ascontiguousarray(v[:batch]) for k, v in feed.items()}
             for feed in _prefix_inputs(parts, test_inputs)]
    return Subject(name, parts, score, calibration, feeds)


def subjects(batch: int) -> list[Subject]:
    """The bundled ``tiny`` workload (3 parts, when it builds) and the two test models."""
    found = []
    try:
        from sparseloom.workload.load import load_workload
        from sparseloom.zoo.partition import partition_model

        task = load_workload("tiny", progress=False).tasks[0]
        model = onnx.load(str(task.model_path))
        sample = {k: v[:4] for k, v in task.calibration_inputs.items()}
        parts = list(partition_model(model, 3, sample).pieces)
        found.append(_subject(
            "tiny", parts, lambda chain: task.score(run_chain(chain, task.eval_inputs)),
            task.calibration_inputs, task.eval_inputs, batch))
    except Exception as error:  # the workload is another stage's; the bench still runs
        print(f"(tiny workload skipped: {type(error).__name__}: {error})")
    for name in ("cnn", "transformer"):
        trained = load_or_train(name)
        found.append(_subject(
            name, split(trained.model, trained.cut_tensors),
            lambda chain, trained=trained: accuracy(chain, trained),
            trained.calibration, trained.test_inputs, batch))
    return found


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    variants = [("dense", None, None)]
    variants += [("unstructured", UnstructuredPruner(), lv) for lv in (0.3, 0.5, 0.7, 0.9)]
    variants += [("structured", StructuredPruner(), lv) for lv in (0.25, 0.5, 0.75)]
    variants += [("int8", Int8Quantizer(), NO_LEVEL), ("fp16", Fp16Converter(), NO_LEVEL)]
    print(f"batch {args.batch}; latency: ms, one thread, variants interleaved, best of 5 "
          f"medians of {args.runs // 5} runs\n")
    print("| model | pos | variant | level | top-1 | weights KiB | ORT ms | OV ms |")
    print("|---|---|---|---|---|---|---|---|")
    for subject in subjects(args.batch):
        for position, dense in enumerate(subject.parts):
            feed = subject.feeds[position]
            rows, built = [], []
            for kind, compressor, level in variants:
                shown = "" if level is None else f"{level:g}"
                try:
                    part = dense if compressor is None else compressor.compress(
                        dense, level, subject.calibration[position])
                except CompressionError:
                    rows.append(f"| {subject.name} | {position} | {kind} | {shown} | "
                                f"not prunable | | | |")
                    continue
                chain = list(subject.parts)
                chain[position] = part
                rows.append(f"| {subject.name} | {position} | {kind} | {shown} | "
                            f"{subject.score(chain):.3f} | {weight_bytes(part) / 1024:.1f} | "
                            "{ort:.3f} | {ov:.3f} |")
                built.append(part)
            ort_ms = interleaved_ms([ort_runner(p, feed) for p in built], args.runs)
            ov_ms = interleaved_ms([ov_runner(p, feed) for p in built], args.runs)
            timings = iter(zip(ort_ms, ov_ms, strict=True))
            for row in rows:
                if "{ort" in row:
                    ort, ov = next(timings)
                    row = row.format(ort=ort, ov=ov)
                print(row, flush=True)

if __name__ == "__main__":
    main()
