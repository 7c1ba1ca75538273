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

import attrs

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


def _identity(parameter: str, item: Any) -> Any:
    """What makes ``item`` of list ``parameter`` one thing: a record's name, a processor spec's
    name (``ort:CPU?threads=2`` is ``ort:CPU``), else the item itself."""
    name = getattr(item, "name", item)
    if isinstance(name, str) and parameter.endswith("processors"):
        return name.partition("?")[0]
    return name


def check_names(where: str, parameter: str, value: Any, *,
                items: type | tuple[type, ...] = str, unique: bool = True
                ) -> tuple[Any, ...] | None:
    """``None``, or a list or tuple of ``items`` (names by default) as a tuple.

    A lone string is refused rather than read letter by letter; with ``unique`` (the default)
    so is a list naming one thing twice (each of these lists names a set: processors, tasks,
    contenders, variants), rather than served, planned or measured twice.
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
    if unique:
        seen: dict[Any, Any] = {}
        for item in names:
            key = _identity(parameter, item)
            if key in seen:
                pair = f" ({seen[key]!r} and {item!r})" if seen[key] != item else ""
                raise ArgumentError(f"{where}: {parameter} names {key!r} more than once{pair}; "
                                    f"give each once")
            seen[key] = item
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


# -- builder options -----------------------------------------------------------------------------


@attrs.frozen
class OptionRange:
    """The values a numeric option of a task builder takes (:attr:`TaskBuilder.ranges`).

    Attributes:
        low, high: the bounds.
        low_open, high_open: whether a bound itself is excluded.
        why: what the option means or why the bound is there, said in the error.
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def problem(self, value: float) -> str | None:
        """Why ``value`` is not allowed, or ``None``."""
        above = value > self.low or (value == self.low and not self.low_open)
        below = value < self.high or (value == self.high and not self.high_open)
        if math.isfinite(value) and above and below:
            return None
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return (f"is outside {left}{_bound(self.low)}, {_bound(self.high)}{right}"
                + (f" ({self.why})" if self.why else ""))


def _bound(value: float) -> str:
    """A range's bound as written: ``4294967295``, ``0.05``, ``inf``."""
    return str(int(value)) if math.isfinite(value) and value == int(value) else f"{value:g}"


#: Options every builder checks by name when it declares no range of its own.
SEED_RANGE = OptionRange(0, 2**32 - 1, why="a seed is a 32-bit number")


def check_builder_options(builder: Any, config: Mapping[str, Any], where: str) -> None:
    """Refuse a builder ``config`` (its defaults updated with the task's options) whose numbers
    fall outside the builder's ``ranges`` (NaN and infinities always; a ``seed`` outside 32
    bits), or that its ``check`` finds wrong, in one :class:`ArgumentError` naming the option,
    the value and the allowed range."""
    ranges = dict(getattr(builder, "ranges", {}) or {})
    for key, value in config.items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in _numbers(values):
            rule = ranges.get(key, SEED_RANGE if key == "seed" else OptionRange())
            problem = rule.problem(float(item))
            if problem is not None:
                raise ArgumentError(f"{where}: option {key} = {value!r} {problem}; set it in "
                                    f"[task.options] within that range (builder "
                                    f"{builder.name!r})")
    check = getattr(builder, "check", None)
    problem = check(config) if callable(check) else None
    if problem:
        raise ArgumentError(f"{where}: {problem} (builder {builder.name!r})")


def _numbers(values: Iterable[Any]) -> Iterable[float]:
    """The numbers of ``values``, nested lists flattened (``stages = [[24, 2], ...]``)."""
    for value in values:
        if isinstance(value, list | tuple):
            yield from _numbers(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            yield float(value)
