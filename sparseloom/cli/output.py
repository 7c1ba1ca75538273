"""Shared output helpers for CLI commands: JSON and aligned plain-text tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON (attrs records and paths are converted)."""
    click.echo(json.dumps(value, indent=2, sort_keys=False, default=str))


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as a left-aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        padded = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        click.echo("  ".join(padded).rstrip())
        if index == 0:
            click.echo("  ".join("-" * width for width in widths))
