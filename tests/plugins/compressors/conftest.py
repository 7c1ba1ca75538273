"""Fixtures: two small trained models (cached on disk), cut into realistic subgraphs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest

from tests.plugins.compressors.models import TrainedModel, load_or_train, part_inputs, split


class Cut:
    """A trained model, its dense parts, and per part the calibration batches for it."""

    def __init__(self, trained: TrainedModel) -> None:
        self.trained = trained
        self.parts = split(trained.model, trained.cut_tensors)
        self.calibration: list[list[dict[str, np.ndarray]]] = []
        for position in range(len(self.parts)):
            inputs = part_inputs(trained, self.parts, position, trained.calibration)
            self.calibration.append([
                {name: value[start : start + 64] for name, value in inputs.items()}
                for start in range(0, 256, 64)
            ])

    def with_part(self, position: int, part: onnx.ModelProto) -> list[onnx.ModelProto]:
        """The dense chain with ``parts[position]`` replaced by ``part``."""
        parts = list(self.parts)
        parts[position] = part
        return parts


@pytest.fixture(scope="session")
def cnn() -> Cut:
    """The digits CNN in two parts (conv1-conv2-pool | conv3-pool-flatten-fc1-fc2)."""
    return Cut(load_or_train("cnn"))


@pytest.fixture(scope="session")
def transformer() -> Cut:
    """The digits transformer in two parts; part 1 takes the hidden state and the mask."""
    return Cut(load_or_train("transformer"))


@pytest.fixture(scope="session")
def models(cnn: Cut, transformer: Cut) -> dict[str, Cut]:
    """Both cut models by name."""
    return {"cnn": cnn, "transformer": transformer}


@pytest.fixture(scope="session")
def run_openvino() -> Callable[[onnx.ModelProto, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Compile a model on OpenVINO CPU and run it once; outputs by name."""
    import openvino as ov

    core = ov.Core()

    def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # f32 as the backend compiles it: on AMX/AVX512-BF16 CPUs OpenVINO defaults to bf16.
        compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                      {"INFERENCE_PRECISION_HINT": "f32"})
        result = compiled(feed)
        # OpenVINO merges the names of tensors joined by a folded Cast (fp16 boundaries), so a
        # port may carry several names; get_any_name() may return the internal one.
        return {name: result[port] for port in compiled.outputs for name in port.get_names()}

    return run
