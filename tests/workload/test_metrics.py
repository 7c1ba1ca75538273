"""Task metrics on hand-made outputs: accuracy, and the speech task's greedy-CTC digit accuracy.

Frame strings spell a CTC output one frame per character: ``-`` is the blank (class 0), a digit
``d`` is class ``d``. ``frames("11-2")`` is the one-hot ``[T, C]`` score matrix of those frames.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.workload.metrics import (
    LABEL_PAD,
    METRICS,
    accuracy,
    ctc_accuracy,
    ctc_greedy_decode,
    edit_distance,
    get_metric,
)

CLASSES = 11  # blank + digits 1..10 ("0" in a frame string is class 10)


def frames(*rows: str) -> np.ndarray:
    """``[N, T, C]`` scores spelling ``rows`` (shorter rows padded with blank frames)."""
    length = max(len(row) for row in rows)
    scores = np.zeros((len(rows), length, CLASSES), np.float32)
    for n, row in enumerate(rows):
        for t, char in enumerate(row.ljust(length, "-")):
            scores[n, t, 0 if char == "-" else int(char) or 10] = 1.0
    # a little noise on the losing classes: the argmax, not exact one-hots, decides
    return scores + np.random.default_rng(0).uniform(0, 0.5, scores.shape).astype(np.float32)


def labels(*rows: str) -> np.ndarray:
    """``[N, L]`` digit labels, padded with ``LABEL_PAD``."""
    length = max(1, *(len(row) for row in rows))
    out = np.full((len(rows), length), LABEL_PAD, np.int64)
    for n, row in enumerate(rows):
        out[n, : len(row)] = [int(char) or 10 for char in row]
    return out


@pytest.mark.parametrize(("row", "decoded"), [
    ("11-2233", [1, 2, 3]),        # repeats collapse
    ("4-4", [4, 4]),               # a blank separates a real repeat
    ("44", [4]),                   # without one it collapses
    ("----", []),                  # all blank: nothing
    ("-5--55-0", [5, 5, 10]),
])
def test_greedy_decode_collapses_repeats_then_drops_blanks(row: str, decoded: list[int]) -> None:
    [result] = ctc_greedy_decode(frames(row))
    assert result.tolist() == decoded


@pytest.mark.parametrize(("hypothesis", "reference", "distance"), [
    ([], [], 0),
    ([], [1, 2, 3], 3),            # deletions
    ([1, 2], [], 2),               # insertions
    ([1, 2, 3], [1, 2, 3], 0),
    ([1, 3], [1, 2, 3], 1),
    ([3, 2, 1], [1, 2, 3], 2),     # two substitutions
    ([7, 1, 2, 3, 4], [1, 2, 3, 5], 2),
])
def test_edit_distance_known_answers(hypothesis, reference, distance) -> None:
    assert edit_distance(np.array(hypothesis, int), np.array(reference, int)) == distance
    assert edit_distance(np.array(reference, int), np.array(hypothesis, int)) == distance


def test_ctc_accuracy_is_one_minus_digit_error_rate_over_the_set() -> None:
    output = frames("11-2233", "44", "----", "----", "7-8")
    # errors: 0 of 3, 1 of 2 (a collapsed repeat), 3 of 3 (nothing decoded),
    # 0 of 0 (empty reference), 0 of 2: 4 errors in 10 digits.
    assert ctc_accuracy(output, labels("123", "44", "567", "", "78")) == pytest.approx(0.6)
    # the last reference 79: one substitution more
    assert ctc_accuracy(output, labels("123", "44", "567", "", "79")) == pytest.approx(0.5)
    assert ctc_accuracy(frames("4-4"), labels("44")) == 1.0
    assert ctc_accuracy(frames("----"), labels("")) == 1.0


def test_ctc_accuracy_is_clipped_at_zero() -> None:
    # seven inserted digits against a one-digit reference: error rate 7
    assert ctc_accuracy(frames("1212121"), labels("3")) == 0.0


def test_accuracy_is_the_argmax_hit_rate() -> None:
    output = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert accuracy(output, np.array([1, 0, 0, 1])) == 0.5
    assert accuracy(output, np.array([[1], [0], [1], [0]])) == 1.0


def test_wrong_shapes_and_names_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"\[N, classes\] output for 3 labels"):
        accuracy(np.zeros((2, 4)), np.zeros(3))
    with pytest.raises(ConfigError, match=r"\[N, T, classes\] output and \[N, L\] labels"):
        ctc_accuracy(np.zeros((2, 4)), np.zeros((2, 3)))
    with pytest.raises(ConfigError, match="unknown metric 'wer'; known metrics: accuracy"):
        get_metric("wer")
    assert get_metric("ctc_accuracy") is ctc_accuracy is METRICS["ctc_accuracy"]
