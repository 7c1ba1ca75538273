"""Workloads: sets of tasks, each a dense ONNX model with labelled eval data and an SLO.

A workload comes from a TOML file (see ``docs/workloads.md``) or from a plugin that registers
one through ``sparseloom_register_workloads``. Each task is either *declared from files* (an
ONNX model, an ``.npz`` of eval inputs and labels, an optional calibration ``.npz``) or *built*
by a :class:`TaskBuilder`, a Python recipe whose output is cached on disk under
:func:`sparseloom.core.cache.cache_dir` and rebuilt only when its config changes.

The records live here; :mod:`sparseloom.workload.load` turns a name or a file into them and
:mod:`sparseloom.workload.evaluate` scores a model on a task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError, MissingDataError, UnknownTaskError
from sparseloom.core.types import SLO
from sparseloom.workload.arguments import OptionRange, check_builder_options
from sparseloom.workload.held_out import DEFAULT_HELD_OUT, readonly
from sparseloom.workload.metrics import get_metric

if TYPE_CHECKING:
    from sparseloom.workload.held_out import HeldOut

__all__ = [
    "MissingDataError",
    "Task",
    "TaskBuilder",
    "TaskDefinition",
    "UnknownTaskError",
    "Workload",
    "WorkloadDefinition",
]


#: The longest task name: it becomes part of file names (``pareto-<task>.png``, profile and zoo
#: entries) and of table columns, and a file name may have 255 bytes in all.
MAX_TASK_NAME = 64


def check_task_name(name: str, where: str = "", what: str = "task") -> str:
    """``name`` if it may be a task name; :class:`ConfigError` otherwise.

    Task names become parts of file names (``pareto-<task>.png``, profile and zoo files) and
    are addressed on the command line (``--slo TASK=ACC,MS``, ``--arrival-order A,B``), so the
    one rule everywhere is: a non-empty string of at most :data:`MAX_TASK_NAME` characters,
    with no path separator, ``,``, ``=``, NUL or other control character, not ``.`` or ``..``,
    not starting with ``.`` and not starting or ending with spaces. ``what`` names the kind
    of name in the message (a workload's name follows the same rule: it names cache folders).
    """
    prefix = f"{where}: " if where else ""
    used = " and of --slo TASK=ACC,MS and --arrival-order A,B" if what == "task" else ""
    rule = (f"{what} names become parts of file names{used}, so they may not contain '/', "
            "'\\', ',', '=' or control characters, start with '.', or start or end with "
            "spaces; use letters, digits, '-', '_' and '.'")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{prefix}a {what} name must be a non-empty string, got {name!r}")
    shown = repr(name) if len(name) <= MAX_TASK_NAME else f"{name[:20]!r}... ({len(name)} chars)"
    if len(name) > MAX_TASK_NAME:
        raise ConfigError(f"{prefix}{what} name {shown} is longer than {MAX_TASK_NAME} "
                          f"characters; {rule}")
    bad = [c for c in ("/", "\\", ",", "=") if c in name]
    control = any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name)
    if bad or control or name.startswith(".") or name != name.strip():
        held = f" (it holds {', '.join(map(repr, bad))})" if bad else (
            " (it holds a control character)" if control else "")
        raise ConfigError(f"{prefix}{what} name {shown} cannot be used{held}: {rule}")
    return name


def _task_name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    check_task_name(value)


def _tasks(values: Iterable[Task]) -> tuple[Task, ...]:
    return tuple(values)


def _definitions(values: Iterable[TaskDefinition]) -> tuple[TaskDefinition, ...]:
    return tuple(values)


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(eq=False)
class Task:
    """One ready task: a dense ONNX model, its eval and calibration data, metric and SLO.

    Attributes:
        name: the task name, unique in its workload.
        model_path: the dense base model, one ONNX file with a dynamic batch dimension.
        eval_inputs: eval inputs by model input name, batch first (read-only arrays).
        labels: eval labels, one row per eval sample.
        calibration_inputs: unlabelled inputs for INT8 calibration, by model input name.
        metric: the metric name (see :mod:`sparseloom.workload.metrics`), in [0, 1].
        slo: the task's SLO, when the workload gives one.
        input_names: the model's input names, in graph order.
        output_names: the model's output names, in graph order; the first one is scored.
        description: what the task is and what it stands in for.
        info: build facts (``dense_metric``, ``torch_metric``, ``params``, ``model_bytes``,
            ``build_seconds``, ``cache_hit``, ``cache_dir`` ...), empty for file tasks.
        held_out: the eval rows held out of selection to judge it
            (:mod:`sparseloom.workload.held_out`); ``eval_inputs`` and ``labels`` are then
            the selection rows only. ``None``: nothing held out.
    """

    name: str = attrs.field(validator=_task_name)
    model_path: Path = attrs.field(converter=Path)
    eval_inputs: Mapping[str, np.ndarray] = attrs.field(converter=readonly)
    labels: np.ndarray
    calibration_inputs: Mapping[str, np.ndarray] = attrs.field(converter=readonly)
    metric: str
    slo: SLO | None = None
    input_names: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    output_names: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    description: str = ""
    info: Mapping[str, Any] = attrs.field(factory=dict)
    held_out: HeldOut | None = None

    @property
    def num_eval(self) -> int:
        """Number of eval samples."""
        return int(self.labels.shape[0])

    @property
    def num_calibration(self) -> int:
        """Number of calibration samples."""
        return int(next(iter(self.calibration_inputs.values())).shape[0])

    @property
    def dense_metric(self) -> float | None:
        """The dense model's metric on the whole eval set (selection and held-out rows) when
        it was built, else ``None``."""
        value = self.info.get("dense_metric")
        return None if value is None else float(value)

    def judging(self) -> Task:
        """This task over its held-out rows (what ``bench serve`` judges accuracy on).

        :raises ConfigError: nothing was held out (a task built outside
            :func:`~sparseloom.workload.load.load_workload`, or a workload with
            ``held_out = 0``).
        """
        if self.held_out is None:
            raise ConfigError(
                f"task {self.name!r} holds no eval rows out of selection; load it with "
                f"load_workload (held_out > 0 in its workload file) to judge on unseen rows")
        return attrs.evolve(self, eval_inputs=self.held_out.inputs,
                            labels=self.held_out.labels, held_out=None)

    def score(self, outputs: Mapping[str, np.ndarray]) -> float:
        """Score model outputs (by output name, as ``run_batched`` returns) against labels.

        The first model output is scored; if ``outputs`` lacks its name (a renamed output
        of a compressed or stitched model), the first value of ``outputs`` is used.
        """
        if not outputs:
            raise ConfigError(f"task {self.name!r}: no model outputs to score")
        first = self.output_names[0] if self.output_names else None
        output = (
            outputs[first] if first is not None and first in outputs
            else next(iter(outputs.values()))
        )
        return get_metric(self.metric)(output, self.labels)

    def calibration_batches(self, batch_size: int = 32) -> list[dict[str, np.ndarray]]:
        """The calibration inputs cut into batches (the form compressors take)."""
        count = self.num_calibration
        return [
            {name: array[start : start + batch_size]
             for name, array in self.calibration_inputs.items()}
            for start in range(0, count, batch_size)
        ]


@attrs.frozen(eq=False)
class Workload:
    """A set of tasks run together, and the processors to run them on.

    Attributes:
        name: the workload name (the bundled name, or the TOML's ``name`` or file stem).
        tasks: the ready tasks, in file order.
        processors: processor specs such as ``"ov:CPU"``; empty means the default set.
        source: the TOML file it was read from, when any.
        description: one line about it.
        variants: the zoo's variant names (the file's ``variants``); empty means the default.
        compressor_options: options per compressor name (the file's ``[compressors.<name>]``).
        held_out: the share of each task's eval rows held out of selection
            (:mod:`sparseloom.workload.held_out`).
    """

    name: str
    tasks: tuple[Task, ...] = attrs.field(converter=_tasks)
    processors: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    source: Path | None = None
    description: str = ""
    variants: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    compressor_options: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    #: The share of each task's eval rows held out of selection to judge it (0: none).
    held_out: float = DEFAULT_HELD_OUT

    @property
    def task_names(self) -> tuple[str, ...]:
        """The task names, in order."""
        return tuple(task.name for task in self.tasks)

    def task(self, name: str) -> Task:
        """The task called ``name``; :class:`UnknownTaskError` naming the known ones."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise UnknownTaskError(
            f"workload {self.name!r} has no task {name!r}; its tasks: "
            f"{', '.join(self.task_names) or 'none'}"
        )


@attrs.frozen
class TaskBuilder:
    """A Python recipe that builds one task's files (bundled tasks, plugin tasks).

    ``build(config, out_dir, progress=...)`` gets ``defaults`` updated with the TOML's
    ``[task.options]``, writes ``model.onnx``, ``eval.npz`` (one array per model input plus
    ``labels``) and ``calibration.npz`` into ``out_dir``, and returns a mapping with at least
    ``metric``; ``torch_metric`` (the trained model's metric before export) and
    ``description`` are recorded when given. It must be deterministic for a given config.

    Attributes:
        name: the builder name (``vision``; also used in cache folder names).
        build: the recipe.
        defaults: its options and their default values (the TOML may override them).
        version: bump it when the recipe changes so that caches rebuild.
        description: one line about the task it builds.
        ranges: the values each numeric option takes (every number of a list option too);
            an option without one need only be finite, and ``seed`` a 32-bit number.
        check: ``check(config)`` for rules between options: why ``config`` cannot be built,
            or ``None``.

    A config outside these is refused when the task is declared, naming the option, the value
    and the range (:func:`~sparseloom.workload.arguments.check_builder_options`), not met as a
    ``ZeroDivisionError`` from inside the recipe.
    """

    name: str
    build: Callable[..., Mapping[str, Any]] = attrs.field(validator=attrs.validators.is_callable())
    defaults: Mapping[str, Any] = attrs.field(factory=dict)
    version: str = "1"
    description: str = ""
    ranges: Mapping[str, OptionRange] = attrs.field(factory=dict)
    check: Callable[[Mapping[str, Any]], str | None] | None = None


@attrs.frozen
class TaskDefinition:
    """How to obtain one task: a :class:`TaskBuilder`, or files (model, data, calibration)."""

    name: str = attrs.field(validator=_task_name)
    builder: TaskBuilder | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)
    model: Path | None = None
    data: Path | None = None
    calibration: Path | None = None
    metric: str = "accuracy"
    slo: SLO | None = None
    description: str = ""

    def __attrs_post_init__(self) -> None:
        if (self.builder is None) == (self.model is None):
            raise ConfigError(f"task {self.name!r}: give either a builder or a model file")
        if self.model is not None and self.data is None:
            raise ConfigError(f"task {self.name!r}: a model file needs a data file")
        if self.builder is not None:
            check_builder_options(self.builder, {**self.builder.defaults, **self.options},
                                  f"task {self.name!r}")


@attrs.frozen
class WorkloadDefinition:
    """A workload before its tasks are built: what a workload file or plugin declares."""

    name: str
    tasks: tuple[TaskDefinition, ...] = attrs.field(converter=_definitions)
    processors: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    source: Path | None = None
    description: str = ""
    variants: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    compressor_options: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    #: The share of each task's eval rows held out of selection to judge it (0: none).
    held_out: float = DEFAULT_HELD_OUT
