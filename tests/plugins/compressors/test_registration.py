"""The compressors register through the hook, satisfy the protocol and validate levels."""

from __future__ import annotations

import pytest

from sparseloom.core.errors import CompressionError
from sparseloom.core.protocols import Compressor
from sparseloom.core.registry import DEFAULT_PLUGINS, create_registry
from sparseloom.plugins.compressors import NO_LEVEL

KINDS = ("unstructured", "structured", "lowrank", "int8", "int8dyn", "fp16")


def test_builtins_include_the_compressors() -> None:
    assert "sparseloom.plugins.compressors" in DEFAULT_PLUGINS


def test_registered_with_kind_as_capability() -> None:
    registry = create_registry(autoload=False, builtins=("sparseloom.plugins.compressors",))
    assert not registry.failures
    assert [r.name for r in registry.compressors()] == list(KINDS)
    for name in KINDS:
        registration = registry.get_compressor(name)
        assert registration.capabilities == (name,)
        compressor = registry.create("compressor", name)
        assert isinstance(compressor, Compressor)
        assert compressor.kind == name


@pytest.mark.parametrize("kind", ["unstructured", "structured", "lowrank"])
@pytest.mark.parametrize("level", [0.0, 1.0, -0.2, 1.5, float("nan")])
def test_fraction_levels_out_of_range(kind: str, level: float, cnn) -> None:
    compressor = create_registry(autoload=False, builtins=("sparseloom.plugins.compressors",)
                                 ).create("compressor", kind)
    with pytest.raises(CompressionError, match=rf"{kind}.*level.*0 < level < 1"):
        compressor.compress(cnn.parts[1], level, cnn.calibration[1])


@pytest.mark.parametrize("kind", ["int8", "int8dyn", "fp16"])
def test_levelless_kinds_refuse_levels(kind: str, cnn) -> None:
    registry = create_registry(autoload=False, builtins=("sparseloom.plugins.compressors",))
    compressor = registry.create("compressor", kind)
    assert compressor.default_levels == ()
    with pytest.raises(CompressionError, match=rf"{kind}.*no levels.*level=0.0"):
        compressor.compress(cnn.parts[1], 0.5, cnn.calibration[1])
    assert NO_LEVEL == 0.0
