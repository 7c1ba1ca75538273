"""``rounding``: weight rounding, a compressor whose level is a bit width, not a fraction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sparseloom.core.protocols import LevelRange


def _weights(model: Any) -> list[Any]:
    """The float32 initializers with two or more dimensions (weight matrices and kernels)."""
    from onnx import TensorProto

    return [init for init in model.graph.initializer
            if init.data_type == TensorProto.FLOAT and len(init.dims) >= 2]


class RoundingCompressor:
    """Rounds every weight matrix to ``2**level`` evenly spaced values (``level`` bits).

    The graph and its boundary tensors are unchanged; only weight values move, so every
    variant stitches with every other. Select it as ``rounding`` (its default levels, 3 and 6
    bits) or ``rounding-4``; options come from the workload file's ``[compressors.rounding]``.

    :param symmetric: a grid symmetric around zero (``true``) or spanning min..max.
    """

    kind = "rounding"
    default_levels = (3.0, 6.0)
    #: Whole bit widths from 2 to 8; sparseloom refuses other levels before building a zoo.
    level_range = LevelRange(2, 8, inclusive=True, integer=True)

    def __init__(self, symmetric: bool = True) -> None:
        self.symmetric = bool(symmetric)

    def prunable(self, subgraph: Any) -> bool:
        """Whether ``subgraph`` has a weight matrix to round (else the zoo keeps it dense)."""
        return bool(_weights(subgraph))

    def compress(self, subgraph: Any, level: float,
                 calibration: Sequence[Mapping[str, np.ndarray]]) -> Any:
        """A copy of ``subgraph`` with its weights rounded to ``level`` bits."""
        import onnx
        from onnx import numpy_helper

        rounded = onnx.ModelProto()
        rounded.CopyFrom(subgraph)
        for init in _weights(rounded):
            array = numpy_helper.to_array(init)
            if self.symmetric:
                low, high = -float(np.abs(array).max()), float(np.abs(array).max())
            else:
                low, high = float(array.min()), float(array.max())
            step = (high - low) / (2 ** int(level) - 1) or 1.0
            values = np.round((array - low) / step) * step + low
            init.CopyFrom(numpy_helper.from_array(values.astype(np.float32), init.name))
        return rounded
