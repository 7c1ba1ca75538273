"""Stitched variants: run one as a chain across processors, or merge it into one model.

A :class:`~sparseloom.core.types.StitchedVariant` is a task name and one source-variant id per
position; it is never written to disk unless asked (:func:`merge_stitched`). To run it,
:class:`StitchedModel` loads each chosen subgraph on its own processor (one processor per
position, through the backends) and passes the boundary tensors along::

    zoo = load_zoo(zoo_dir)
    with StitchedModel.load(zoo, zoo.stitched([0, 3, 5]), ["ov:CPU", "ort:CPU", "ov:CPU"]) as m:
        outputs = m.run(task.eval_inputs)

For non-partitioned execution, :func:`merge_stitched` joins the pieces with
:func:`onnx.compose.merge_models`, connecting equal boundary names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError, ZooError
from sparseloom.core.types import StitchedVariant

if TYPE_CHECKING:
    import onnx

    from sparseloom.zoo.types import Zoo


def stitched_paths(zoo: Zoo, stitched: StitchedVariant | Sequence[int]) -> list[Path]:
    """The subgraph files ``stitched`` runs, in position order."""
    choices = zoo.check_choices(stitched)
    return [zoo.subgraph_path(j, v) for j, v in enumerate(choices)]


def placement(processors: str | Sequence[str], positions: int) -> list[str]:
    """One processor per position: a single name is used everywhere; a list must have ``S``."""
    if isinstance(processors, str):
        return [processors] * positions
    order = list(processors)
    if len(order) != positions:
        raise ConfigError(
            f"a processor order needs one processor per position: got {len(order)} "
            f"({', '.join(order)}) for {positions} positions"
        )
    return order


@attrs.define(eq=False)
class StitchedModel:
    """A stitched variant loaded for execution, each position on its own processor.

    Build it with :meth:`load`; call :meth:`close` (or use ``with``) to unload.

    Attributes:
        stitched: the stitched variant.
        order: the processor of each position.
        stages: ``(backend, loaded model)`` per position.
    """

    stitched: StitchedVariant
    order: tuple[str, ...]
    stages: list[tuple[Any, Any]]

    @classmethod
    def load(
        cls,
        zoo: Zoo,
        stitched: StitchedVariant | Sequence[int],
        processors: str | Sequence[str] = "ort:CPU",
    ) -> StitchedModel:
        """Compile and load every chosen subgraph on its position's processor."""
        from sparseloom.workload.inference import load_model

        choices = zoo.check_choices(stitched)
        order = placement(processors, zoo.positions)
        stages: list[tuple[Any, Any]] = []
        try:
            for path, processor in zip(stitched_paths(zoo, choices), order, strict=True):
                stages.append(load_model(str(path), processor))
        except BaseException:
            for backend, loaded in stages:
                backend.unload(loaded)
            raise
        return cls(StitchedVariant(zoo.task, choices), tuple(order), stages)

    def __enter__(self) -> StitchedModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run_once(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request through every position, in order; returns the last position's outputs."""
        carried: Mapping[str, np.ndarray] = inputs
        for backend, loaded in self.stages:
            carried = backend.infer(loaded, {n: carried[n] for n in loaded.input_names})
        return dict(carried)

    def run(
        self, inputs: Mapping[str, np.ndarray], batch_size: int = 256
    ) -> dict[str, np.ndarray]:
        """Run every row of ``inputs`` in batches of ``batch_size``; outputs concatenated."""
        from sparseloom.zoo.tensors import iter_batches

        parts = [self.run_once(batch) for batch in iter_batches(inputs, batch_size)]
        if not parts:
            raise ZooError("no input rows to run")
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def close(self) -> None:
        """Unload every position's model."""
        for backend, loaded in self.stages:
            backend.unload(loaded)
        self.stages = []


def run_stitched(
    zoo: Zoo,
    stitched: StitchedVariant | Sequence[int],
    inputs: Mapping[str, np.ndarray],
    processors: str | Sequence[str] = "ort:CPU",
    batch_size: int = 256,
) -> dict[str, np.ndarray]:
    """Load ``stitched`` on ``processors`` (one per position), run ``inputs``, unload."""
    with StitchedModel.load(zoo, stitched, processors) as model:
        return model.run(inputs, batch_size)


def held_out_scores(zoo: Zoo, task: Any, wanted: Sequence[Sequence[int]],
                    processor: str = "ort:CPU") -> dict[tuple[int, ...], float]:
    """The metric of each stitched variant in ``wanted`` on ``task``'s held-out rows
    (``task.judging()``: rows its selection never saw), run on ``processor``, each once."""
    judging = task.judging()
    return {choices: float(judging.score(run_stitched(zoo, choices, judging.eval_inputs,
                                                      processor)))
            for choices in dict.fromkeys(tuple(c) for c in wanted)}


def merge_stitched(
    zoo: Zoo,
    stitched: StitchedVariant | Sequence[int],
    path: str | os.PathLike[str] | None = None,
) -> onnx.ModelProto:
    """Materialise ``stitched`` as one ONNX model (and save it to ``path`` when given).

    The result has the dense model's inputs and outputs; boundary tensors become internal.
    """
    import onnx

    from sparseloom.zoo.extract import merge_chain

    choices = zoo.check_choices(stitched)
    pieces = [onnx.load(str(p)) for p in stitched_paths(zoo, choices)]
    merged = merge_chain(pieces, name=f"{zoo.task}_{'_'.join(map(str, choices))}")
    if path is not None:
        onnx.save(merged, os.fspath(path))
    return merged
