"""Variant lists: parse, expand and check them, and build the compressors they name.

A variant is ``dense`` or compressor steps joined by ``+`` (``unstructured-0.5+int8``); a step
without a level stands for each of the compressor's default levels.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from sparseloom.core.errors import ConfigError
from sparseloom.core.protocols import LEVEL_SUFFIX, level_range_of
from sparseloom.core.types import repeated
from sparseloom.zoo.types import VariantSpec

__all__ = ["DEFAULT_VARIANTS", "create_compressor", "resolve_variants"]

#: The default zoo: the dense model and the paper's nine compressed variants (ten, Appendix A)
#: — four unstructured sparsities, two structured ones, INT8, FP16, and INT8 on top of 50%
#: unstructured sparsity — plus dynamic INT8 (``int8dyn``), the one that makes a transformer
#: on ONNX Runtime CPU more than twice as fast at dense accuracy (docs/compressors.md).
DEFAULT_VARIANTS: tuple[str, ...] = (
    "dense",
    "unstructured-0.3",
    "unstructured-0.5",
    "unstructured-0.7",
    "unstructured-0.9",
    "structured-0.25",
    "structured-0.5",
    "int8",
    "int8dyn",
    "fp16",
    "unstructured-0.5+int8",
)


def create_compressor(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """Build the compressor registered as ``name`` with ``options`` (its factory's keywords).

    :raises ConfigError: an option the factory does not take, or the factory fails; the
        message names the compressor, its distribution and the options it takes.
    """
    from sparseloom.core.registry import get_registry

    registration = get_registry().get_compressor(name)
    options = dict(options or {})
    provider = f"compressor {name!r} (distribution {registration.distribution or '?'})"
    try:
        parameters = inspect.signature(registration.factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to check against
        parameters = None
    if parameters is not None and not any(p.kind is p.VAR_KEYWORD for p in parameters):
        known = [p.name for p in parameters
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"{provider} takes no option {', '.join(map(repr, unknown))}; its options: "
                f"{', '.join(known) or 'none'} (set them in the workload file's "
                f"[compressors.{name}] table)"
            )
    try:
        return get_registry().build(registration, **options)
    except Exception as error:
        raise ConfigError(
            f"{provider} could not be built with options {options}: "
            f"{type(error).__name__}: {error}"
        ) from error


def _steps(variant: str | VariantSpec) -> list[tuple[str, float | None]]:
    """``(compressor, level)`` steps; ``None`` where a name gives no level."""
    if isinstance(variant, VariantSpec):
        return list(variant.steps)
    steps: list[tuple[str, float | None]] = []
    for part in str(variant).strip().split("+"):
        match = LEVEL_SUFFIX.fullmatch(part)
        steps.append((match.group(1), float(match.group(2))) if match else (part, None))
    return steps


def _step_levels(variant: str, name: str, level: float | None, compressor: Any
                 ) -> list[float]:
    """The levels one step stands for: its own (checked), or the compressor's defaults."""
    levels = level_range_of(compressor)
    defaults = tuple(float(x) for x in getattr(compressor, "default_levels", ()))
    described = ", ".join(f"{x:g}" for x in defaults) or "none"
    if levels is None:
        if level not in (None, 0.0):
            raise ConfigError(f"variant {variant!r}: compressor {name!r} has no levels; "
                              f"write it as {name!r} without '-{level:g}'")
        return [0.0]
    if level is None:
        if not defaults:
            raise ConfigError(f"variant {variant!r}: compressor {name!r} has no default "
                              f"levels; give one, e.g. '{name}-<level>' ({levels.describe()})")
        bad = [x for x in defaults if not levels.contains(x)]
        if bad:
            raise ConfigError(f"compressor {name!r}: default level(s) {bad} are outside its "
                              f"own level range ({levels.describe()}); fix the plugin")
        return list(defaults)
    if not levels.contains(level):
        raise ConfigError(
            f"variant {variant!r}: level {level:g} of compressor {name!r} is out of range; it "
            f"takes {levels.describe()} (default levels: {described})"
        )
    return [level]


def resolve_variants(
    variants: Sequence[str | VariantSpec] | None,
    compressor_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[VariantSpec]:
    """Parse, expand and check a variant list (default :data:`DEFAULT_VARIANTS`).

    A step without a level (``unstructured``) stands for each of the compressor's
    ``default_levels``; a level is checked against the compressor's level range
    (:func:`~sparseloom.core.protocols.level_range_of`).

    :raises ConfigError: dense not first, a name listed twice, an unknown compressor, a level
        out of range, or a compressor that cannot be built with its options.
    """
    options = compressor_options or {}
    specs: list[VariantSpec] = []
    for variant in variants or DEFAULT_VARIANTS:
        text = variant.name if isinstance(variant, VariantSpec) else str(variant).strip()
        if not text:
            raise ConfigError("an empty variant name; use e.g. 'dense', 'unstructured-0.5'")
        if text == "dense":
            specs.append(VariantSpec(()))
            continue
        choices = []
        for name, level in _steps(variant):
            compressor = create_compressor(name, options.get(name))
            choices.append([(name, x) for x in _step_levels(text, name, level, compressor)])
        specs.extend(VariantSpec(steps) for steps in itertools.product(*choices))
    if not specs or specs[0].steps:
        raise ConfigError("the first variant (id 0) must be 'dense'")
    names = [s.name for s in specs]
    duplicates = repeated(names)
    if duplicates:
        raise ConfigError(f"variants listed twice: {duplicates}")
    return specs
