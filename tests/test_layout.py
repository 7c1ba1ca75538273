"""The package's shape: no import cycles between its modules, no module over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sparseloom"
MAX_LINES = 400
#: The stages in the order data flows; a stage imports core/ and earlier stages only.
STAGES = ("workload", "zoo", "profile", "plan", "runtime", "evaluation")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(path: Path, name: str) -> set[str]:
    """Modules ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks do not run)."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            skipped.update(id(sub) for sub in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the package modules it imports (a module importing its own package excluded)."""
    paths = {_module_name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = set()
        for target in _runtime_imports(path, name):
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.add(target)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def test_find_cycles_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_stages_import_only_core_and_earlier_stages() -> None:
    wrong = []
    for module, targets in import_graph().items():
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in STAGES:
            continue
        stage = STAGES.index(parts[1])
        for target in targets:
            other = target.split(".")
            if len(other) > 1 and other[1] in STAGES and STAGES.index(other[1]) > stage:
                wrong.append(f"{module} imports the later stage {target}")
            if len(other) > 1 and other[1] == "cli":
                wrong.append(f"{module} imports the command line ({target})")
    assert not wrong, "\n".join(wrong)


def test_core_holds_only_the_contracts() -> None:
    allowed = {"__init__", "hookspecs", "protocols", "types", "registry", "errors", "cache",
               "processors"}
    extra = sorted(p.stem for p in (PACKAGE / "core").glob("*.py") if p.stem not in allowed)
    assert not extra, f"core/ is for contracts; move {extra} into the stage that uses them"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(
    p.relative_to(PACKAGE)))
def test_module_is_at_most_400_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE.parent)} has {lines} lines; split it"
