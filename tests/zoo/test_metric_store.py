"""The zoo's metric store: a variant is measured once, by whichever step comes first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sparseloom.workload.subset import stratified_rows, subset_task
from sparseloom.zoo.evaluate import evaluate_stitched, prefix_passes
from sparseloom.zoo.metric_store import MetricStore, metric_store
from sparseloom.zoo.types import Zoo
from tests.zoo.zoo_support import chain_with_onnxruntime, tiny_task


def test_a_second_evaluation_reads_the_store_and_runs_nothing(private_zoo: Zoo) -> None:
    zoo = private_zoo
    task = tiny_task()
    choices = [(0, 3), (0, 5), (2, 1)]
    first = evaluate_stitched(zoo, task, choices)
    assert first.cached == 0 and first.passes == prefix_passes(choices) == 5
    again = evaluate_stitched(zoo, task, [*choices, (4, 4)])
    assert again.cached == 3 and again.passes == 2  # only (4, 4) ran
    assert {c: again.metrics[c] for c in choices} == dict(first.metrics)
    expected = task.score(chain_with_onnxruntime(zoo.directory, (4, 4), task.eval_inputs))
    assert again.metric((4, 4)) == expected
    # What the cached variants would have cost is still reported.
    assert again.cost_seconds > again.seconds
    stored = metric_store(zoo, task, "ort:CPU").load()
    assert set(stored) == {*choices, (4, 4)}


def test_cache_false_runs_everything_and_stores_nothing(private_zoo: Zoo) -> None:
    zoo = private_zoo
    task = tiny_task()
    report = evaluate_stitched(zoo, task, [(1, 1)], cache=False)
    assert report.passes == 2 and report.cached == 0
    assert metric_store(zoo, task, "ort:CPU").load() == {}


def test_the_store_is_keyed_by_processor_rows_and_labels(private_zoo: Zoo) -> None:
    zoo = private_zoo
    task = tiny_task()
    evaluate_stitched(zoo, task, [(0, 0)])
    other_processor = evaluate_stitched(zoo, task, [(0, 0)], processor="ov:CPU")
    assert other_processor.cached == 0  # measured again: a different processor's store
    rows = stratified_rows(task.labels, 100, seed=1)
    on_subset = evaluate_stitched(zoo, task, [(0, 0)], rows=rows)
    assert on_subset.cached == 0 and on_subset.rows == 100
    sub = subset_task(task, rows)
    expected = sub.score(chain_with_onnxruntime(zoo.directory, (0, 0), sub.eval_inputs))
    assert on_subset.metric((0, 0)) == expected
    shuffled = subset_task(task, np.arange(len(task.labels)))
    import attrs

    relabelled = attrs.evolve(shuffled, labels=np.roll(shuffled.labels, 1))
    assert evaluate_stitched(zoo, relabelled, [(0, 0)]).cached == 0


def test_a_damaged_store_is_measured_again_and_rewritten(private_zoo: Zoo) -> None:
    zoo = private_zoo
    task = tiny_task()
    store = metric_store(zoo, task, "ort:CPU")
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text("{not json")
    report = evaluate_stitched(zoo, task, [(2, 2)])
    assert report.cached == 0
    data = json.loads(store.path.read_text())
    assert data["metrics"] == {"2,2": report.metric((2, 2))} and data["passes"] == 2


def test_updates_merge_and_lose_nothing(tmp_path) -> None:
    store = MetricStore(tmp_path / "metrics" / "k.json", {"k": 1})
    store.add({(0, 1): 0.5}, seconds=1.0, passes=2)
    MetricStore(store.path).add({(1, 1): 0.25}, seconds=3.0, passes=2)
    assert store.load() == {(0, 1): 0.5, (1, 1): 0.25}
    assert store.seconds_per_pass() == pytest.approx(1.0)


def test_the_store_keeps_the_cache_folders_permissions(tmp_path) -> None:
    import stat

    from sparseloom.zoo.metric_store import MetricStore

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)  # a group-shared cache folder
    store = MetricStore(shared / "m.json", {"k": 1})
    store.add({(0, 1): 0.5})
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o664  # not mkstemp's private 0600
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    mine = MetricStore(private / "m.json", {"k": 1})
    mine.add({(0, 1): 0.5})
    assert stat.S_IMODE(mine.path.stat().st_mode) == 0o600
    assert MetricStore(shared / "m.json").load() == {(0, 1): 0.5}
