"""Models specialised to batch 1 (:mod:`sparseloom.zoo.batch_one`), on the tiny zoo's real
subgraphs run by plain ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparseloom.core.errors import ZooError
from sparseloom.zoo.batch_one import batch_one_path, batch_params
from tests.zoo.zoo_support import tiny_zoo


def _dims(path: Path) -> dict[str, list[int | str]]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]}


def _session(path: Path) -> object:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_the_batch_is_fixed_to_one_everywhere_and_the_answers_stay() -> None:
    zoo = tiny_zoo(2)
    params = batch_params(zoo.boundary(0).inputs)
    assert params  # the tiny model is exported with a named batch dimension
    for position in range(zoo.positions):
        original = zoo.subgraph_path(position, 0)
        fixed = batch_one_path(original, params)
        assert fixed != original and fixed.parent.name == "batch1"
        before, after = _dims(original), _dims(fixed)
        # Every input and output that named the batch is 1 there now, nothing else moved.
        for name, dims in before.items():
            assert after[name] == [1 if d in params else d for d in dims]
        assert any(d in params for dims in before.values() for d in dims)
        plain, batch_one = _session(original), _session(fixed)
        rng = np.random.default_rng(position)
        feed = {i.name: rng.standard_normal([1 if not isinstance(d, int) else d
                                              for d in i.shape]).astype(np.float32)
                for i in plain.get_inputs()}  # type: ignore[attr-defined]
        for want, got in zip(plain.run(None, feed), batch_one.run(None, feed),  # type: ignore[attr-defined]
                             strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        two = {name: np.concatenate([a, a]) for name, a in feed.items()}
        with pytest.raises(Exception, match=r"(?i)dimension|shape"):
            batch_one.run(None, two)  # type: ignore[attr-defined]


def test_the_copy_is_made_once_and_a_model_without_the_name_is_left_alone(
        tmp_path: Path) -> None:
    zoo = tiny_zoo(2)
    params = batch_params(zoo.boundary(0).inputs)
    original = zoo.subgraph_path(0, 0)
    fixed = batch_one_path(original, params)
    written = fixed.stat().st_mtime_ns
    assert batch_one_path(original, params) == fixed and fixed.stat().st_mtime_ns == written
    assert batch_one_path(original, ()) == original
    assert batch_one_path(original, ("no_such_dimension",)) == original
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(ZooError, match=r"cannot read .*broken\.onnx"):
        batch_one_path(broken, params)


def test_batch_params_are_the_named_first_dimensions() -> None:
    inputs = [{"name": "a", "shape": ["batch", 3]}, {"name": "b", "shape": ["N", "seq"]},
              {"name": "c", "shape": [0, 4]}, {"name": "d", "shape": []},
              {"name": "e", "shape": ["batch", 2]}]
    assert batch_params(inputs) == ("batch", "N")

