"""The tuned runtimes' layouts: which are tried together, and how one is kept."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.evaluation.stock_tuned import Config, Measured, TunedRuntime, tune
from sparseloom.evaluation.tuned_layouts import choose, layouts

ORT1, ORT2 = Config("ort", "f32", 1), Config("ort", "f32", 2)


def _measured() -> list[Measured]:
    # heavy: 4.0 ms on one thread, 2.8 on two; light: 0.5 on one, 0.6 on two.
    return [Measured("heavy", ORT1, 4.0, 0.9), Measured("heavy", ORT2, 2.8, 0.9),
            Measured("light", ORT1, 0.5, 0.9), Measured("light", ORT2, 0.6, 0.9)]


def _layouts() -> list[TunedRuntime]:
    slos = {"heavy": SLO(0.5, 100.0), "light": SLO(0.5, 100.0)}
    return layouts("stock-tuned", _measured(), (0, 1), False, slos,
                   {"heavy": 0.9, "light": 0.9})


def test_every_core_set_of_the_slowest_task_is_tried_with_the_best_rest() -> None:
    found = _layouts()
    slos = {"heavy": SLO(0.5, 100.0), "light": SLO(0.5, 100.0)}
    # First the search's own optimum: heavy on both cores (2.8) and light beside it on one
    # (2.8 + 0.5 = 3.3 on that core).
    assert found[0].describe() == tune("stock-tuned", _measured(), (0, 1), False, slos,
                                       {"heavy": 0.9, "light": 0.9}).describe()
    assert found[0].choices["heavy"].cores == (0, 1)
    assert found[0].makespan_ms == pytest.approx(3.3)
    # Then heavy alone on each core, light on the other (bottleneck 4.0 each, by hand).
    assert [(r.choices["heavy"].cores, r.choices["light"].cores) for r in found[1:]] == [
        ((0,), (1,)), ((1,), (0,))]
    assert [r.makespan_ms for r in found[1:]] == pytest.approx([4.0, 4.0])


class _FaultyServe:
    """Fault injection: the layout that puts ``heavy`` on both cores raises; the others
    return a summary with the given throughput (the fields :func:`choose` reads)."""

    def __init__(self, rates: dict[tuple[int, ...], float]) -> None:
        self.rates = rates
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, candidate: TunedRuntime) -> Any:
        cores = candidate.choices["heavy"].cores
        self.calls.append(cores)
        if cores == (0, 1):
            raise RuntimeError("injected: the session would not load")

        class Summary:
            reasons: tuple[str, ...] = ()
            throughput_rps = self.rates[cores]

        return Summary()


def test_the_fastest_layout_served_is_kept_and_a_failing_one_is_named() -> None:
    candidates = _layouts()
    serve = _FaultyServe({(0,): 900.0, (1,): 1100.0})
    kept, records = choose(candidates, serve, rounds=3)
    assert kept.choices["heavy"].cores == (1,)
    # Interleaved: round r starts with the r-th layout; the failed one is not run again.
    assert serve.calls[:3] == [(0, 1), (0,), (1,)]
    assert serve.calls[3:] == [(0,), (1,), (1,), (0,)]
    failed = records[0]
    assert failed["failure"].startswith("failed: RuntimeError: injected")
    assert math.isnan(failed["median_rps"]) and failed["throughput_rps"] == []
    assert [r["median_rps"] for r in records[1:]] == [900.0, 1100.0]


def test_one_layout_is_served_without_a_trial_and_none_is_an_error() -> None:
    only = _layouts()[:1]
    kept, records = choose(only, _FaultyServe({}), rounds=3)
    assert kept is only[0] and records == []
    with pytest.raises(EvaluationError, match="no layout"):
        choose([], _FaultyServe({}))
    with pytest.raises(EvaluationError, match="no layout served a valid run"):
        choose([_layouts()[0], _layouts()[0]], _FaultyServe({}))
