"""Parsing of comma-separated CLI options: every item present, no blanks, no repeats.

:func:`parse_slos` reads every ``--slo TASK=ACCURACY,LATENCY_MS`` of a command (``plan``,
``run``): finite numbers only, each task once.

Each helper raises :class:`~sparseloom.core.errors.ConfigError` with one line that names the
option, what was given and what is allowed, so ``--stitch 0,,1`` or ``--variants ''`` is
refused rather than silently read as something else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import repeated


def comma_items(text: str, option: str, example: str, *, unique: bool = False) -> list[str]:
    """The comma-separated items of ``text``, stripped; no empty item allowed.

    :param example: a valid value, shown in the error (``0,3,5``).
    :param unique: refuse an item given twice.
    """
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ConfigError(f"{option} {text!r} has an empty item; give comma-separated items "
                          f"with nothing empty between the commas, e.g. {example}")
    if unique:
        twice = repeated(items)
        if twice:
            raise ConfigError(f"{option} {text!r} names {', '.join(twice)} more than once; "
                              f"give each item once, e.g. {example}")
    return items


def comma_ints(text: str, option: str, example: str, what: str = "values") -> list[int]:
    """The comma-separated non-negative integers of ``text`` (see :func:`comma_items`)."""
    values = []
    for item in comma_items(text, option, example):
        try:
            value = int(item)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(f"{option} takes comma-separated {what} (non-negative integers) "
                              f"such as {example}; {item!r} in {text!r} is not one")
        values.append(value)
    return values


def parse_slo(spec: str) -> tuple[str, Any]:
    """``TASK=ACCURACY,LATENCY_MS`` → ``(task, SLO)``; a one-line :class:`ConfigError` naming
    ``--slo`` and the rule otherwise (NaN and infinite numbers are refused)."""
    from sparseloom.core.types import SLO

    task, equals, values = spec.partition("=")
    parts = values.split(",")
    if not equals or not task.strip() or len(parts) != 2:
        raise ConfigError(f"--slo {spec!r} is malformed; write TASK=ACCURACY,LATENCY_MS, e.g. "
                          "--slo vision=0.85,40")
    try:
        accuracy, latency = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(f"--slo {spec!r}: accuracy and latency must be numbers, e.g. "
                          "vision=0.85,40") from None
    if not 0.0 <= accuracy <= 1.0:
        raise ConfigError(f"--slo {spec!r}: accuracy {accuracy} is outside [0, 1]; give the "
                          "metric as a fraction (0.85, not 85)")
    if not 0.0 < latency < math.inf:
        raise ConfigError(f"--slo {spec!r}: latency must be > 0 ms and finite, got {latency}")
    try:
        return task.strip(), SLO(accuracy, latency)
    except ConfigError as error:
        raise ConfigError(f"--slo {spec!r}: {error}") from None


def parse_slos(specs: Iterable[str]) -> dict[str, Any]:
    """Every ``--slo`` of a command by task; a task given twice is refused (not: the last)."""
    slos: dict[str, Any] = {}
    given: dict[str, str] = {}
    for spec in specs:
        task, slo = parse_slo(spec)
        if task in slos:
            raise ConfigError(f"--slo gives task {task!r} twice ({given[task]!r} and {spec!r}); "
                              f"give each task once")
        slos[task], given[task] = slo, spec
    return slos


def parse_budget(text: str) -> float | int:
    """``0.55`` (a fraction of full preloading, with a decimal point) or ``123456`` (bytes)."""
    try:
        value: float | int = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise ConfigError(f"--memory-budget {text!r} is neither a fraction such as 0.55 nor a "
                        "byte count such as 50000000") from None
    return value


def finite_options(**values: float | None) -> None:
    """Refuse NaN and infinite values of float options (click's FLOAT takes ``nan``, ``inf``);
    keyword names are option names with ``_`` for ``-``."""
    for name, value in values.items():
        if value is not None and not math.isfinite(value):
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} must be a finite number, got {value!r}")
