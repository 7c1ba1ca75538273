"""The held-out split: judging rows never reach selection (zoo, profile, estimators, policies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.workload.file import read_workload_file
from sparseloom.workload.held_out import HeldOut, split_held_out
from sparseloom.workload.task import Task


def _task(tmp_path: Path, rows: int = 200, classes: int = 4) -> Task:
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(classes), rows // classes)
    rng.shuffle(labels)
    # each row's input carries its own row index, so a row can be followed across the split
    x = np.stack([np.arange(rows, dtype=np.float32), rng.random(rows, dtype=np.float32)], 1)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    return Task(name="t", model_path=model, eval_inputs={"x": x}, labels=labels,
                calibration_inputs={"x": x[:8]}, metric="accuracy")


def test_the_split_is_disjoint_complete_stratified_and_seeded(tmp_path: Path) -> None:
    task = _task(tmp_path)
    split = split_held_out(task, 0.3)
    held = split.held_out
    assert isinstance(held, HeldOut)
    assert held.count == 60 and split.num_eval == 140
    selection_ids = split.eval_inputs["x"][:, 0].astype(int)
    judging_ids = held.inputs["x"][:, 0].astype(int)
    assert not set(selection_ids) & set(judging_ids)          # no judging row in selection
    assert sorted([*selection_ids, *judging_ids]) == list(range(200))
    np.testing.assert_array_equal(judging_ids, held.rows)
    np.testing.assert_array_equal(selection_ids, held.selection_rows)
    np.testing.assert_array_equal(split.labels, task.labels[selection_ids])
    assert np.bincount(held.labels).tolist() == [15, 15, 15, 15]  # 30% of each class
    again = split_held_out(task, 0.3)
    np.testing.assert_array_equal(again.held_out.rows, held.rows)
    judging = split.judging()
    assert judging.held_out is None and judging.num_eval == 60
    np.testing.assert_array_equal(judging.labels, held.labels)
    assert not judging.eval_inputs["x"].flags.writeable


def test_nothing_held_out_when_off_too_small_or_already_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = _task(tmp_path)
    assert split_held_out(task, 0.0) is task
    split = split_held_out(task, 0.3)
    assert split_held_out(split, 0.3) is split
    small = _task(tmp_path, rows=24)
    assert split_held_out(small, 0.3) is small
    assert "too few to hold 30% out" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="judge on unseen rows"):
        task.judging()


@pytest.mark.parametrize("share", [-0.1, 0.6, "0.3", True])
def test_a_bad_share_is_refused(tmp_path: Path, share: object) -> None:
    with pytest.raises(ConfigError, match="held_out"):
        split_held_out(_task(tmp_path), share)  # type: ignore[arg-type]


def test_the_workload_file_sets_the_share(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('held_out = 0.25\n[[task]]\nname = "tiny"\nbuilder = "tiny"\n')
    assert read_workload_file(path).held_out == 0.25
    path.write_text('[[task]]\nname = "tiny"\nbuilder = "tiny"\n')
    assert read_workload_file(path).held_out == 0.3
    path.write_text('held_out = 0.9\n[[task]]\nname = "tiny"\nbuilder = "tiny"\n')
    with pytest.raises(ConfigError, match=r"w.toml.*held_out = 0.9 is outside"):
        read_workload_file(path)
