"""Parsing of comma-separated CLI options: every item present, no blanks, no repeats.

Each helper raises :class:`~sparseloom.core.errors.ConfigError` with one line that names the
option, what was given and what is allowed, so ``--stitch 0,,1`` or ``--variants ''`` is
refused rather than silently read as something else.
"""

from __future__ import annotations

from sparseloom.core.errors import ConfigError


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
        twice = sorted({item for item in items if items.count(item) > 1})
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
