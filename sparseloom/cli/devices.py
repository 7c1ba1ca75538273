"""``sparseloom devices`` (what can run models here) and ``sparseloom infer`` (run one)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.output import echo_json, echo_table, ensure_output_file
from sparseloom.cli.parsing import CALLS
from sparseloom.core.errors import BackendError, ConfigError, DataError


@click.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def devices_command(as_json: bool) -> None:
    """List the processors every backend discovered: available ones and why others are not.

    A processor is one backend on one device with its own threads and core set; by default the
    CPU processors get one thread each on distinct cores.
    """
    from sparseloom.core.processors import discover_processors

    rows: list[dict[str, Any]] = [
        {
            "name": p.name,
            "backend": p.backend,
            "device": p.device,
            "full_name": p.full_name,
            "threads": p.threads,
            "streams": p.streams,
            "cores": list(p.cores),
            "available": p.available,
            "reason": p.reason,
        }
        for p in discover_processors()
    ]
    if as_json:
        echo_json(rows)
        return
    echo_table(
        ["name", "device", "full name", "threads", "cores", "available"],
        [[r["name"], r["device"], r["full_name"], r["threads"],
          ",".join(map(str, r["cores"])) or "any",
          "yes" if r["available"] else f"no: {r['reason']}"] for r in rows],
    )


def _declared_ranks(model: Path) -> dict[str, int]:
    """The rank the model declares for each input (none when the model is unreadable: the
    backend says so in its own words)."""
    from sparseloom.workload.build import describe_model

    try:
        return {name: len(shape) for name, (_, shape) in describe_model(model)["inputs"].items()}
    except ConfigError:
        return {}


def _read_inputs(path: Path, ranks: dict[str, int]) -> dict[str, Any]:
    """The arrays of an ``--input`` .npz; refuses empty batches, warns about NaN and Inf.

    An array has rows to run when it has a first dimension above 0; an input the model declares
    with rank 0 (a scalar, such as a sample rate) is run as given.
    """
    from sparseloom.runtime.admission import count_non_finite
    from sparseloom.workload.build import read_npz

    arrays = read_npz(path, "--input")
    for name, array in arrays.items():
        if ranks.get(name) == 0 and array.ndim == 0:
            continue
        if array.ndim == 0 or array.shape[0] == 0:
            raise DataError(f"--input {path}: array {name!r} has shape {list(array.shape)}, no "
                            "rows to run; give at least one row (batch first)")
        bad = count_non_finite(array)  # the check Server.submit makes too
        if bad:
            click.echo(f"Warning: --input {path}: array {name!r} holds {bad} NaN or Inf "
                       f"value(s) of {array.size}; the outputs will not mean much", err=True)
    return arrays


def _check_input_size(model: Path, free_dim: int = 1) -> None:
    """Refuse a model whose declared inputs are too large to allocate (half the machine's
    memory), before the backend allocates random ones to warm it up."""
    import math
    import os

    from sparseloom.workload.build import describe_model

    try:
        inputs = describe_model(model)["inputs"]
    except ConfigError:  # not a readable model: the backend says so in its own words
        return
    total = 0
    for dtype, declared in inputs.values():
        shape = [d if d else free_dim for d in declared]
        total += math.prod(shape) * max(dtype.itemsize, 8)  # random draws are float64 first
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB
        memory = 16 << 30
    if total > memory // 2:
        shapes = ", ".join(f"{name} {list(shape)}" for name, (_, shape) in inputs.items())
        raise DataError(
            f"model {model} declares inputs ({shapes}) of {total / 2**30:,.1f} GiB, more than "
            f"half of this machine's {memory / 2**30:.0f} GiB, so one request cannot be "
            "allocated; export it with smaller static shapes or a free batch dimension"
        )


def _percentile(samples: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(samples), q))


@click.command("infer")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--processor", "-p", "processor_spec", default="ort:CPU", show_default=True,
              help="Processor name or spec, e.g. ov:CPU or 'ort:CPU?threads=2'.")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="A .npz file with one array per input name (random inputs when absent).")
@click.option("--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the outputs to this .npz file, one array per output name.")
@click.option("--repeat", type=CALLS, default=10, show_default=True,
              help="Timed runs after one warm-up run.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
def infer_command(model: Path, processor_spec: str, input_path: Path | None,
                  output_path: Path | None, repeat: int, as_json: bool) -> None:
    """Run MODEL (an .onnx file) on one processor and report output shapes and latency.

    Inputs come from --input, or are random of the declared shapes and dtypes (free
    dimensions set to 1). Latency is per request, measured around the backend's infer call.
    """
    import numpy as np

    from sparseloom.core.processors import get_backend, get_processor
    from sparseloom.core.protocols import executed_by
    from sparseloom.plugins.backends._common import example_inputs
    from sparseloom.workload.inference import model_tensors

    if output_path is not None:
        ensure_output_file(output_path, "--output")
    processor = get_processor(processor_spec)
    if not model.is_file():
        raise BackendError(f"model file {str(model)!r} not found; check the path")
    inputs = _read_inputs(input_path, _declared_ranks(model)) if input_path is not None else None
    _check_input_size(model)
    backend = get_backend(processor.backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # runtimes' own provider chatter
        loaded = backend.load(backend.compile(model, processor), processor)
    try:
        if inputs is None:
            inputs = example_inputs(model_tensors(loaded, model)[0])
        outputs = backend.infer(loaded, inputs)
        samples_ms: list[float] = []
        for _ in range(repeat):
            start = time.perf_counter()
            backend.infer(loaded, inputs)
            samples_ms.append((time.perf_counter() - start) * 1e3)
    finally:
        backend.unload(loaded)
    if output_path is not None:
        np.savez(output_path, **outputs)
    report = {
        "model": str(model),
        "processor": loaded.processor.name,
        "executed_by": list(executed_by(loaded)),
        "memory_bytes": loaded.memory_bytes,
        "outputs": {name: {"shape": list(a.shape), "dtype": a.dtype.name}
                    for name, a in outputs.items()},
        "latency_ms": {"median": _percentile(samples_ms, 50), "p90": _percentile(samples_ms, 90),
                       "count": len(samples_ms)},
        "output_file": str(output_path) if output_path is not None else None,
    }
    if as_json:
        echo_json(report)
        return
    click.echo(f"{model.name} on {loaded.processor.name} "
               f"(runs on {', '.join(executed_by(loaded))}; "
               f"{loaded.memory_bytes / 2**20:.1f} MiB measured)")
    echo_table(["output", "shape", "dtype"],
               [[name, "x".join(map(str, a.shape)) or "scalar", a.dtype.name]
                for name, a in outputs.items()])
    latency = report["latency_ms"]
    click.echo(f"latency over {repeat} runs: median {latency['median']:.3f} ms, "
               f"p90 {latency['p90']:.3f} ms")
    if output_path is not None:
        click.echo(f"outputs written to {output_path}")


COMMANDS = (devices_command, infer_command)
