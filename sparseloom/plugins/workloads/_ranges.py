"""The ranges of the bundled builders' common options (``TaskBuilder.ranges``).

A builder gets the ranges of :data:`TRAINING` for the options it has
(:func:`~sparseloom.plugins.workloads._builder.bundled_builder`) and adds its own (widths,
sample counts of its data set). The bounds keep a build finite and meaningful: a zero batch
divides by zero, a NaN learning rate trains nothing, ten thousand epochs of a task meant to
build in minutes run for days.
"""

from __future__ import annotations

from sparseloom.workload.arguments import OptionRange
from sparseloom.workload.checks import MIN_CALIBRATION_ROWS, MIN_EVAL_ROWS

#: The ranges of the options most bundled builders have (each gets those of its own options).
TRAINING = {
    "epochs": OptionRange(1, 1000, why="passes over the training data"),
    "batch_size": OptionRange(1, 100_000, why="rows per training step"),
    "lr": OptionRange(0, 10, low_open=True, why="the learning rate"),
    "calibration_samples": OptionRange(MIN_CALIBRATION_ROWS, 100_000,
                                       why="rows the zoo traces and quantizes on"),
}
#: A width (channels, dimensions, hidden units) of a bundled model.
WIDTH = OptionRange(1, 1024, why="a width of the model")
#: Eval rows: a metric over N rows moves in steps of 1/N (see ``MIN_EVAL_ROWS``).
EVAL_ROWS = OptionRange(MIN_EVAL_ROWS, 100_000, why="rows the metric is measured on")
