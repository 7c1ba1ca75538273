"""Shared output helpers for CLI commands: JSON, aligned plain-text tables, output locations.

Every command that writes files checks its output location with :func:`ensure_output_dir` or
:func:`ensure_output_file` *first*, before it builds or measures anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
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


def ensure_output_dir(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """Create the output folder ``path`` now and check that it is writable.

    Call it before any long work. :raises PathError: one line naming ``option``, the path,
    what is wrong and what to do.
    """
    from sparseloom.core.cache import ensure_directory

    return ensure_directory(path, f"{option} folder")


def ensure_output_file(path: str | os.PathLike[str], option: str = "--output") -> Path:
    """Check now that the output file ``path`` can be written (its folder exists and is
    writable, and it is not a folder). :raises PathError: as :func:`ensure_output_dir`."""
    from sparseloom.core.cache import ensure_parent

    return ensure_parent(path, f"{option} file")
