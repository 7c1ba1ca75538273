"""The package's shape: core/ holds the contracts only, no module is over 400 lines.

Which module may import which (layers, plugins, cycles) is tests/test_layers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sparseloom"
MAX_LINES = 400


def test_core_holds_only_the_contracts() -> None:
    allowed = {"__init__", "hookspecs", "protocols", "types", "registry", "errors", "cache",
               "processors"}
    # Modules and subpackages alike (``processors/`` holds the processor contract and the cores
    # it names).
    entries = [p for p in (PACKAGE / "core").iterdir()
               if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())]
    extra = sorted(p.stem for p in entries if p.stem not in allowed)
    assert not extra, f"core/ is for contracts; move {extra} into the stage that uses them"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(
    p.relative_to(PACKAGE)))
def test_module_is_at_most_400_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE.parent)} has {lines} lines; split it"
