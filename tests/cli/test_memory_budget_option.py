"""``--memory-budget``: a fraction, a byte count or a size with a unit; ``--keep-loaded``: a
byte count or a size."""

from __future__ import annotations

import pytest

from sparseloom.cli.parsing import parse_budget, parse_size
from sparseloom.core.errors import ConfigError


@pytest.mark.parametrize(("text", "expected"), [
    ("0.55", 0.55), ("1.0", 1.0), ("123456", 123456), ("1.5GiB", 3 * 2**29),
    ("800MB", 800_000_000), ("512 MiB", 512 * 2**20), ("2gib", 2 * 2**30), ("1e3KB", 10**6),
])
def test_budgets_are_read_as_fractions_bytes_or_sizes(text: str, expected: float) -> None:
    value = parse_budget(text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("text", "message"), [
    ("lots", "neither a fraction"), ("1.5 parsecs", "units: b, kb, kib"),
    ("0GiB", "below one byte"), ("GiB", "neither a fraction"),
])
def test_a_budget_that_is_not_one_says_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_budget(text)


def test_sizes_are_bytes_or_sizes_with_a_unit_never_fractions() -> None:
    assert parse_size("768MiB", "--keep-loaded") == 768 * 2**20
    assert parse_size(" 4096 ", "--keep-loaded") == 4096
    for text in ("0.5", "-3", "lots"):
        with pytest.raises(ConfigError, match=r"--keep-loaded .*neither a byte count"):
            parse_size(text, "--keep-loaded")
