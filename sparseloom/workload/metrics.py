"""Task metrics: how a task scores its model's first output against its labels.

Every metric lies in [0, 1] and higher is better, so SLOs and estimators treat all tasks alike.

``accuracy``
    the argmax over the last axis of an ``[N, C]`` output equals the integer label ``[N]``.
``ctc_accuracy``
    one minus the token error rate (edit distance over reference length, summed over the eval
    set) of greedy CTC decoding of an ``[N, T, C]`` output, blank = class 0. Labels are an
    ``[N, L]`` integer array of token ids (1..C-1), padded with -1. Clipped at 0.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sparseloom.core.errors import ConfigError

#: Label padding value for variable-length (sequence) labels.
LABEL_PAD = -1
#: The CTC blank class.
CTC_BLANK = 0


def accuracy(output: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows whose argmax over the last axis equals the label."""
    output = np.asarray(output)
    labels = np.asarray(labels).reshape(-1)
    if output.ndim != 2 or output.shape[0] != labels.shape[0]:
        raise ConfigError(
            f"metric 'accuracy' needs an [N, classes] output for {labels.shape[0]} labels; "
            f"got an output of shape {output.shape}"
        )
    return float(np.mean(np.argmax(output, axis=-1) == labels))


def ctc_greedy_decode(output: np.ndarray) -> list[np.ndarray]:
    """Greedy CTC decoding of ``[N, T, C]`` scores: argmax, collapse repeats, drop blanks."""
    best = np.argmax(np.asarray(output), axis=-1)
    decoded = []
    for row in best:
        keep = np.ones(row.shape[0], dtype=bool)
        keep[1:] = row[1:] != row[:-1]
        row = row[keep]
        decoded.append(row[row != CTC_BLANK])
    return decoded


def edit_distance(hypothesis: np.ndarray, reference: np.ndarray) -> int:
    """Levenshtein distance between two token sequences."""
    previous = np.arange(len(reference) + 1)
    for i, token in enumerate(hypothesis, start=1):
        current = np.empty_like(previous)
        current[0] = i
        for j, ref_token in enumerate(reference, start=1):
            current[j] = min(
                previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (token != ref_token)
            )
        previous = current
    return int(previous[-1])


def ctc_accuracy(output: np.ndarray, labels: np.ndarray) -> float:
    """One minus the token error rate of greedy CTC decoding (see the module docstring)."""
    output = np.asarray(output)
    labels = np.asarray(labels)
    if output.ndim != 3 or labels.ndim != 2 or output.shape[0] != labels.shape[0]:
        raise ConfigError(
            f"metric 'ctc_accuracy' needs an [N, T, classes] output and [N, L] labels; got "
            f"output {output.shape} and labels {labels.shape}"
        )
    errors = 0
    total = 0
    for hypothesis, reference in zip(ctc_greedy_decode(output), labels, strict=True):
        reference = reference[reference != LABEL_PAD]
        errors += edit_distance(hypothesis, reference)
        total += len(reference)
    return max(0.0, 1.0 - errors / max(total, 1))


#: Metric name → ``fn(first_output, labels) -> float in [0, 1]``.
METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": accuracy,
    "ctc_accuracy": ctc_accuracy,
}


def get_metric(name: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """The metric function called ``name``; :class:`ConfigError` naming the known ones."""
    try:
        return METRICS[name]
    except KeyError:
        raise ConfigError(
            f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}"
        ) from None
