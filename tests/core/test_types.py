"""Shared records convert what they are given: integer fields hold plain ``int`` s."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import Processor, StitchedVariant


def test_numpy_integers_become_plain_ints() -> None:
    stitched = StitchedVariant("vision", np.array([2, 0, 7]))
    assert stitched.choices == (2, 0, 7)
    assert all(type(c) is int for c in stitched.choices)
    assert stitched == StitchedVariant("vision", (2, 0, 7))
    assert hash(stitched) == hash(StitchedVariant("vision", [2, 0, 7]))
    processor = Processor("ort:CPU", "ort", "CPU", cores=np.arange(2, dtype=np.int32))
    assert processor.cores == (0, 1) and all(type(c) is int for c in processor.cores)
    # plain ints serialise; numpy integers would not
    assert json.loads(json.dumps(list(processor.cores) + list(stitched.choices))) == [
        0, 1, 2, 0, 7]


@pytest.mark.parametrize("choices", [(1.0, 2), ("1",), (True, 0), (np.float64(3),)])
def test_non_integers_are_config_errors(choices) -> None:
    with pytest.raises(ConfigError, match="expected integers, got"):
        StitchedVariant("vision", choices)


def test_a_non_sequence_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected a sequence of integers, got 3"):
        Processor("ort:CPU", "ort", "CPU", cores=3)
    with pytest.raises(ConfigError, match="non-negative"):
        StitchedVariant("vision", (0, -1))
