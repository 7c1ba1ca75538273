"""Parsing of CLI options: every item present, no blanks, no repeats.

:class:`CheckedGroup` (every command group) refuses, before a command runs, an option that
takes one value given more than once (click would silently keep the last: ``infer -p ort:CPU
-p ov:CPU``) and a repeatable option given the same value twice (``--scenario closed
--scenario closed``); :func:`distinct_processors` is the callback of every repeatable ``-p``
(one processor named twice, with other options). :func:`parse_slos` reads every ``--slo
TASK=ACCURACY,LATENCY_MS`` of a command (``plan``, ``run``): finite numbers only, each task
once. :class:`BoundedInt` and :class:`BoundedFloat` are the types of every number option: a
finite value in a closed range, the error saying why the upper bound is there (``--window
99999999999999999999`` once ended in an ``OverflowError``, ``simulate --queries 10**9`` in
the memory running out).

Each helper raises :class:`~sparseloom.core.errors.ConfigError` with one line that names the
option, what was given and what is allowed, so ``--stitch 0,,1`` or ``--variants ''`` is
refused rather than silently read as something else.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import click

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


#: Byte units ``--memory-budget`` accepts (IEC and SI), case-insensitive.
_BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_budget(text: str) -> float | int:
    """``0.55`` (a fraction of full preloading, with a decimal point), ``123456`` (bytes) or
    a size with a unit (``1.5GiB``, ``800MB``, ``512 MiB``: bytes)."""
    sized = _sized(text, "--memory-budget")
    if sized is not None:
        return sized
    try:
        number: float | int = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        units = ", ".join(sorted(_BYTE_UNITS, key=_BYTE_UNITS.__getitem__))
        raise ConfigError(f"--memory-budget {text!r} is neither a fraction such as 0.55, a "
                          f"byte count such as 50000000, nor a size such as 1.5GiB (units: "
                          f"{units})") from None
    return number


def parse_size(text: str, option: str) -> int:
    """``123456`` (bytes) or a size with a unit (``1.5GiB``, ``800MB``): bytes, for
    ``option`` (named in the error)."""
    sized = _sized(text, option)
    if sized is not None:
        return sized
    if text.strip().isdigit():
        return int(text)
    units = ", ".join(sorted(_BYTE_UNITS, key=_BYTE_UNITS.__getitem__))
    raise ConfigError(f"{option} {text!r} is neither a byte count such as 50000000 nor a size "
                      f"such as 1.5GiB (units: {units})")


def _sized(text: str, option: str) -> int | None:
    """Bytes of a size with a unit (``1.5GiB``), ``None`` when ``text`` has no known unit."""
    import re

    sized = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if not sized or sized.group(2).lower() not in _BYTE_UNITS:
        return None
    value = float(sized.group(1)) * _BYTE_UNITS[sized.group(2).lower()]
    if not math.isfinite(value) or value < 1:
        raise ConfigError(f"{option} {text!r} is below one byte; give a size such as 1.5GiB")
    return int(value)


def finite_options(**values: float | None) -> None:
    """Refuse NaN and infinite values of float options (click's FLOAT takes ``nan``, ``inf``);
    keyword names are option names with ``_`` for ``-``."""
    for name, value in values.items():
        if value is not None and not math.isfinite(value):
            option = "--" + name.replace("_", "-")
            raise ConfigError(f"{option} must be a finite number, got {value!r}")


# -- options given more than once --------------------------------------------------------------


def _given(option: click.Option, args: Sequence[str]) -> list[str]:
    """The values ``args`` gives ``option`` (for the message; ``--opt v``, ``--opt=v``,
    ``-pv``)."""
    values, index = [], 0
    while index < len(args) and args[index] != "--":
        token = args[index]
        for name in option.opts:
            short = len(name) == 2 and not name.startswith("--")
            if token == name and index + 1 < len(args):
                values.append(args[index + 1])
                index += 1
            elif token.startswith(name + "="):
                values.append(token[len(name) + 1:])
            elif short and token.startswith(name) and token != name:
                values.append(token[len(name):])
        index += 1
    return values


#: Repeatable options whose command refuses repeats itself, more widely than one string given
#: twice: :func:`parse_slos` one task given two different SLOs, ``bench serve`` ``--k 5 --k
#: 5.0``.
OWN_REPEAT_CHECK = frozenset({"--slo", "--k"})


def refuse_repeated_options(command: click.Command, ctx: click.Context,
                            args: Sequence[str]) -> None:
    """Refuse an option of ``command`` that takes one value and is given more than once in
    ``args``, and a repeatable option given one value twice, naming the option and the values
    (one :class:`ConfigError` line). Flags may repeat; a malformed command line is left to
    click's own parse, which reports it with the command's usage."""
    if ctx.resilient_parsing:
        return
    parser = command.make_parser(ctx)
    # ``ctx`` is the group's: parse as the command's own context would.
    parser.allow_interspersed_args = command.allow_interspersed_args
    parser.ignore_unknown_options = command.ignore_unknown_options
    try:
        opts, _, order = parser.parse_args(args=list(args))
    except click.UsageError:
        return
    for param, count in Counter(order).items():
        if not isinstance(param, click.Option) or param.is_flag or param.count:
            continue
        names = "/".join(param.opts)
        if param.multiple:
            twice = repeated([str(v) for v in opts.get(param.name or "", ())])
            if twice and not OWN_REPEAT_CHECK.intersection(param.opts):
                raise ConfigError(f"{names} {twice[0]!r} is given more than once; give each "
                                  f"value once")
        elif count > 1:
            given = _given(param, args)
            raise ConfigError(
                f"{names} is given {count} times ({', '.join(map(repr, given))}); it takes one "
                f"value: give it once" + (" (the command runs on one processor)"
                                          if "--processor" in param.opts else ""))


class CheckedGroup(click.Group):
    """A command group whose commands refuse repeated options (:func:`refuse_repeated_options`)
    before they run."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, click.Group):
            refuse_repeated_options(command, ctx, rest)
        return name, command, rest


def distinct_processors(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]
                        ) -> tuple[str, ...]:
    """Click callback of every repeatable ``-p``: refuse one processor named twice, even with
    different options (``-p ort:CPU -p 'ort:CPU?threads=2'``)."""
    from sparseloom.core.processors import check_distinct

    check_distinct(specs, "--processor")
    return specs


# -- number options ----------------------------------------------------------------------------


def _with_why(error: click.BadParameter, why: str) -> click.BadParameter:
    """``error`` with ``why`` after its message (click's own names the option and the range)."""
    if not why:
        return error
    return click.BadParameter(f"{error.message.rstrip('.')}: {why}", ctx=error.ctx,
                              param=error.param)


class BoundedInt(click.IntRange):
    """A whole-number option in [``low``, ``high``]; ``why`` (the reason for ``high``) ends the
    error of a value out of range."""

    def __init__(self, low: int, high: int, why: str = "") -> None:
        super().__init__(min=low, max=high)
        self.high, self.why = high, why

    def at_least(self, low: int) -> BoundedInt:
        """The same bound, from ``low``."""
        return BoundedInt(low, self.high, self.why)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as error:
            raise _with_why(error, self.why) from None


class BoundedFloat(click.FloatRange):
    """A finite number option in [``low``, ``high``] (``low_open``: above ``low``; ``None``:
    the command checks the low end itself); NaN and the infinities are refused, ``why`` ends the
    error of a value out of range."""

    def __init__(self, low: float | None, high: float, *, low_open: bool = False,
                 why: str = "") -> None:
        super().__init__(min=low, max=high, min_open=low_open)
        self.why = why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter as error:
            raise _with_why(error, self.why) from None


#: Seeds: the range every random generator here takes (NumPy's legacy seed is 32 bits; XGBoost
#: failed inside ``fit`` on 10^20).
SEED = BoundedInt(0, 2**32 - 1, "a seed is a 32-bit number")
#: Rounds and repeats of a measurement: each one runs the whole measurement again.
ROUNDS = BoundedInt(1, 1000, "each round runs the whole measurement again; a few give the "
                             "spread")
#: Simulated requests per task (``sparseloom.evaluation.simulator.MAX_SIMULATED_QUERIES``,
#: not imported: the simulator is heavy for a command line that only parses).
SIMULATED_QUERIES = BoundedInt(1, 10**7, "the simulator keeps every request's latency (about "
                                         "60 bytes each, per task and policy)")
#: Calls of one model: ``infer --repeat`` and the backends' micro-benchmarks keep every
#: latency; 10^6 calls of a 1 ms model are a quarter of an hour.
CALLS = BoundedInt(1, 10**6, "every call is timed and kept")
#: Subgraph positions S: V**S stitched variants. The bound keeps V**S a number Python computes
#: at once (10**(10**20) never ends); the zoo's cut points and the profile's memory check
#: refuse far less, each with its own reason.
SUBGRAPHS = BoundedInt(1, 10**4, "each task has V**S stitched variants")
#: Stitched variants measured or sampled per task: each is an accuracy evaluation or a chain of
#: latency measurements.
SAMPLES = BoundedInt(1, 10**6, "each sample is measured")
#: Warm-up and timed calls per subgraph and processor in a profile: 10^4 of every subgraph on
#: every processor already take hours.
MEASUREMENTS = BoundedInt(1, 10**4, "every subgraph is called this often on every processor")
#: The most requests per task of a served load: 10^9 run for more than a day at 10,000
#: requests/s.
MAX_SERVED_QUERIES = 10**9
SERVED_QUERIES = BoundedInt(1, MAX_SERVED_QUERIES, "more is over a day of serving")
#: The longest served load, in seconds (30 days): longer is a service, and the timers of the
#: run overflow past a few hundred years (``run --duration 1e30`` did).
MAX_DURATION_S = 30 * 24 * 3600.0
#: The SLO monitor's window, in requests per task.
WINDOW = BoundedInt(1, 10**6, "requests the SLO monitor keeps per task")
#: Arrival orders sampled by ``evaluate``: each is served in full.
ORDERS = BoundedInt(1, 10**4, "each order is served in full")
#: Latency SLO multipliers k (× the isolated dense latency).
LATENCY_MULTIPLIER = BoundedFloat(0, 1000, low_open=True,
                                  why="a multiple of the isolated latency")
