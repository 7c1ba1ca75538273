"""A loaded workload's zoo measures its metrics on the selection rows, never the judging ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseloom.workload.evaluate import evaluate


def test_the_zoo_scores_variants_on_selection_rows_only(tiny: Any, tiny_zoos: Any) -> None:
    task = tiny.tasks[0]
    held = task.held_out
    assert held is not None and held.count > 0
    dense = float(tiny_zoos[task.name].manifest["metric"]["dense"])
    # an accuracy over N rows is a multiple of 1/N: the zoo counted the selection rows
    assert abs(dense * task.num_eval - round(dense * task.num_eval)) < 1e-6
    assert dense == evaluate(task)
    assert not np.isin(held.rows, held.selection_rows).any()
