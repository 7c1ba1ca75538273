"""Every name a benchmark script imports from sparseloom exists: the scripts import inside
their functions (heavy libraries load only when they run), so a renamed module or function
would otherwise surface only when someone runs the benchmark."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def _sparseloom_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every ``from sparseloom... import name`` in ``path``."""
    return [(node.lineno, node.module, alias.name)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] == "sparseloom"
            for alias in node.names]


def test_there_are_benchmarks_importing_sparseloom() -> None:
    assert sum(bool(_sparseloom_imports(path)) for path in BENCHMARKS) >= 5


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_every_sparseloom_name_a_benchmark_imports_exists(path: Path) -> None:
    missing = []
    for line, module_name, name in _sparseloom_imports(path):
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            try:  # a submodule: from sparseloom.evaluation import serve_grid
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{path.name}:{line}: {module_name}.{name}")
    assert not missing, "benchmark imports that no longer exist: " + "; ".join(missing)
