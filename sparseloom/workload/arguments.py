"""Argument checks of the public Python API, as strict as the command line.

Each check raises one :class:`~sparseloom.core.errors.ArgumentError` (a ``ConfigError`` that is
also a ``TypeError``) naming the function, the parameter, what it got and what it takes, before
the value reaches code that would fail on it with an ``AttributeError`` from deep inside — or,
worse, read a string as a sequence of one-letter names. The attrs validators at the end do the
same for the fields of public records (``LoadSpec``, ``RuntimeOptions``).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparseloom.core.errors import ArgumentError
from sparseloom.core.types import SLO


def _got(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}..." if len(text) > 60 else f"{text} ({type(value).__name__})"


def check_instance(where: str, parameter: str, value: Any, expected: type | tuple[type, ...],
                   fix: str) -> Any:
    """``value`` when it is an ``expected`` instance; :class:`ArgumentError` otherwise."""
    if not isinstance(value, expected):
        raise ArgumentError(f"{where}: {parameter} must be {fix}, got {_got(value)}")
    return value


def check_flags(where: str, **flags: Any) -> None:
    """Every keyword is ``True`` or ``False`` (``rebuild="no"`` would be true)."""
    for parameter, value in flags.items():
        check_instance(where, parameter, value, bool, "True or False")


def check_path_or_name(where: str, parameter: str, value: Any, what: str) -> Any:
    """A ``str`` or ``os.PathLike`` (a registered name or a file path), not empty."""
    check_instance(where, parameter, value, (str, os.PathLike), f"{what} (a str or a path)")
    if not os.fspath(value).strip():
        raise ArgumentError(f"{where}: {parameter} is empty; give {what}")
    return value


def check_names(where: str, parameter: str, value: Any, *,
                items: type | tuple[type, ...] = str) -> tuple[Any, ...] | None:
    """``None``, or a list or tuple of ``items`` (names by default) as a tuple.

    A lone string is refused rather than read letter by letter.
    """
    if value is None:
        return None
    example = f"{parameter}=[{value!r}]" if isinstance(value, str) else f"{parameter}=['a', 'b']"
    if isinstance(value, str | bytes) or not isinstance(value, Iterable) or isinstance(
            value, Mapping):
        raise ArgumentError(f"{where}: {parameter} must be a list of names, got {_got(value)}; "
                            f"write {example}")
    names = tuple(value)
    wrong = [n for n in names if not isinstance(n, items)]
    if wrong:
        kinds = items.__name__ if isinstance(items, type) else " or ".join(
            t.__name__ for t in items)
        raise ArgumentError(f"{where}: every item of {parameter} must be a {kinds}, got "
                            f"{_got(wrong[0])}")
    return names


def check_number(where: str, parameter: str, value: Any, *, low: float = -math.inf,
                 low_open: bool = False, high: float = math.inf, integer: bool = False,
                 optional: bool = False) -> Any:
    """A finite real (an ``int`` when ``integer``) within [``low``, ``high``]; ``None`` when
    ``optional``. Booleans, strings, NaN and infinities are refused."""
    if value is None and optional:
        return None
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer
                                                     else numbers.Real):
        raise ArgumentError(f"{where}: {parameter} must be {kind}, got {_got(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ArgumentError(f"{where}: {parameter} must be a finite number, got {value!r}")
    if number < low or (low_open and number == low) or number > high:
        if high == math.inf:
            rule = f"be {'>' if low_open else '>='} {low:g}"
        else:
            rule = f"lie in {'(' if low_open else '['}{low:g}, {high:g}]"
        raise ArgumentError(f"{where}: {parameter} must {rule}, got {value!r}")
    return value


def check_slos(where: str, parameter: str, value: Any) -> dict[str, SLO] | None:
    """``None``, or a mapping of task name → :class:`SLO` or ``(accuracy, latency_ms)``."""
    if value is None:
        return None
    check_instance(where, parameter, value, Mapping,
                   "a mapping of task name to SLO(accuracy, latency_ms)")
    slos = {}
    for task, slo in value.items():
        check_instance(where, f"a task name of {parameter}", task, str, "a str")
        if isinstance(slo, SLO):
            slos[task] = slo
            continue
        if isinstance(slo, tuple | list) and len(slo) == 2:
            try:
                slos[task] = SLO(*slo)
            except ValueError as error:  # ConfigError and ArgumentError are ValueErrors
                raise ArgumentError(f"{where}: {parameter}[{task!r}]: {error}") from None
            continue
        raise ArgumentError(f"{where}: {parameter}[{task!r}] must be an SLO or a pair "
                            f"(accuracy, latency_ms) such as (0.85, 40), got {_got(slo)}")
    return slos


# -- validators for attrs records ------------------------------------------------------------


def number_field(*, low: float = -math.inf, low_open: bool = False, high: float = math.inf,
                 integer: bool = False, optional: bool = False
                 ) -> Callable[[Any, Any, Any], None]:
    """An attrs validator applying :func:`check_number` to a field (named in the error)."""
    def validate(instance: Any, attribute: Any, value: Any) -> None:
        check_number(type(instance).__name__, attribute.name, value, low=low,
                     low_open=low_open, high=high, integer=integer, optional=optional)

    return validate


def names_field(instance: Any, attribute: Any, value: Any) -> None:
    """An attrs validator: a tuple of names (use with ``converter=names_converter``)."""
    check_names(type(instance).__name__, attribute.name, value)


def names_attribute() -> Any:
    """An attrs field of names, default empty: a list or tuple becomes a tuple, a lone string
    is refused (naming the record and the field)."""
    import attrs

    return attrs.field(default=(), converter=names_converter, validator=names_field)


def names_converter(value: Any) -> Any:
    """A tuple of a list or tuple; a lone string is left as it is for :func:`names_field` to
    refuse (``tuple("tiny")`` would be four one-letter names)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return value
    return tuple(value)


def choice_field(*choices: str) -> Callable[[Any, Any, Any], None]:
    """An attrs validator: one of ``choices``."""
    def validate(instance: Any, attribute: Any, value: Any) -> None:
        if value not in choices:
            raise ArgumentError(f"{type(instance).__name__}: {attribute.name} must be one of "
                                f"{', '.join(map(repr, choices))}, got {_got(value)}")

    return validate


def instance_field(expected: type | tuple[type, ...], fix: str
                   ) -> Callable[[Any, Any, Any], None]:
    """An attrs validator: an ``expected`` instance (``fix`` says what to give)."""
    def validate(instance: Any, attribute: Any, value: Any) -> None:
        check_instance(type(instance).__name__, attribute.name, value, expected, fix)

    return validate


def slos_converter(value: Any) -> Any:
    """SLOs by task, with ``(accuracy, latency_ms)`` pairs read as :class:`SLO` records."""
    return check_slos("RunConfig", "slos", value) if value is not None else {}
