"""Stratified eval subsets and their stated error."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.workload.subset import stratified_rows, subset_standard_error, subset_task


def test_classes_keep_their_share() -> None:
    labels = np.repeat(np.arange(4), [400, 300, 200, 100])
    rows = stratified_rows(labels, 100, seed=0)
    assert rows.size == 100 and np.all(np.diff(rows) > 0)
    assert np.bincount(labels[rows]).tolist() == [40, 30, 20, 10]
    assert not np.array_equal(rows, stratified_rows(labels, 100, seed=1))
    np.testing.assert_array_equal(rows, stratified_rows(labels, 100, seed=0))


def test_rare_classes_keep_a_row_and_the_count_is_exact() -> None:
    labels = np.array([0] * 95 + [1] * 3 + [2] * 2)
    rows = stratified_rows(labels, 10, seed=0)
    assert rows.size == 10
    assert set(labels[rows]) == {0, 1, 2}


def test_one_hot_and_continuous_labels() -> None:
    one_hot = np.eye(3, dtype=np.int64)[np.repeat([0, 1, 2], [50, 30, 20])]
    rows = stratified_rows(one_hot, 10, seed=0)
    assert np.bincount(one_hot[rows].argmax(axis=1)).tolist() == [5, 3, 2]
    continuous = np.linspace(0, 1, 50)
    assert stratified_rows(continuous, 7, seed=0).size == 7


def test_all_rows_and_bad_counts() -> None:
    labels = np.arange(10) % 2
    np.testing.assert_array_equal(stratified_rows(labels, 10), np.arange(10))
    np.testing.assert_array_equal(stratified_rows(labels, 99), np.arange(10))
    with pytest.raises(ConfigError, match="at least 1 row"):
        stratified_rows(labels, 0)


def test_standard_error() -> None:
    assert subset_standard_error(0.8, 1000, 1000) == 0.0
    half = subset_standard_error(0.8, 250, 500)
    assert half == pytest.approx(np.sqrt(0.8 * 0.2 / 250 * 250 / 499))
    assert subset_standard_error(0.8, 100, 500) > half


@attrs.frozen
class _Task:
    name: str
    eval_inputs: dict
    labels: np.ndarray


def test_subset_task_restricts_inputs_and_labels() -> None:
    task = _Task("t", {"x": np.arange(20).reshape(10, 2)}, np.arange(10))
    sub = subset_task(task, np.array([1, 4]))
    assert sub.labels.tolist() == [1, 4] and sub.eval_inputs["x"].tolist() == [[2, 3], [8, 9]]
    with pytest.raises(ConfigError, match=r"\[0, 10\)"):
        subset_task(task, np.array([10]))

    @attrs.frozen
    class NoLabels:
        name: str
        eval_inputs: dict

    with pytest.raises(ConfigError, match="no 'labels'"):
        subset_task(NoLabels("n", {}), np.array([0]))
