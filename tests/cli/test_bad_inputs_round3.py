"""Bad input, round 3 (issue #24), run as a user would: contract bugs a third party hits,
numbers and modes, exit codes. The helpers are those of :mod:`tests.cli.test_bad_inputs`: a
refusal exits non-zero with exactly one ``Error:`` line and no traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.cli.test_bad_inputs import refused, run_cli


def _scalar_input_model(path: Path) -> Path:
    """y = x * scale, with ``scale`` a rank-0 input (as a speech model's sample rate)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])], "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_infer_judges_rows_against_the_declared_rank(tmp_path: Path) -> None:
    model = _scalar_input_model(tmp_path / "scaled.onnx")
    good = tmp_path / "good.npz"
    np.savez(good, x=np.ones((3, 4), np.float32), scale=np.float32(2.0))
    proc = run_cli(["infer", model, "--input", good, "--output", tmp_path / "y.npz",
                    "--repeat", "1"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    with np.load(tmp_path / "y.npz") as outputs:
        np.testing.assert_array_equal(outputs["y"], np.full((3, 4), 2.0, np.float32))
    scalar_x = tmp_path / "scalar-x.npz"
    np.savez(scalar_x, x=np.float32(1.0), scale=np.float32(2.0))
    refused(run_cli(["infer", model, "--input", scalar_x]), "'x'", "no rows")
    not_npz = tmp_path / "inputs.npz"
    not_npz.write_text("x,scale\n1,2\n")
    line = refused(run_cli(["infer", model, "--input", not_npz]), "not an .npz archive",
                   "numpy.savez")
    assert "pickle" not in line
