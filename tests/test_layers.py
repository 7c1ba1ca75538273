"""Layers point one way and no module imports itself back, counting every import.

The stages in the order data flows, each importing only its own layer and layers to its left::

    core ← isolation ← workload ← zoo ← profile ← plan ← runtime ← evaluation ← api ← cli
         ← front door

``isolation`` (crash containment) needs only ``core``, and every stage from ``workload`` on
loads models through it. ``api`` is the Python API the command line is built on; the front
door is the package itself (``sparseloom/__init__.py``, which installs the crash guard),
``testing`` and ``__main__``. ``plugins`` implement core's contracts and are reached by
name through the registry: no module from ``core`` to ``runtime`` imports one.

Every ``import`` counts: inside functions, under ``if TYPE_CHECKING:`` (a type-only import that
closes a circle is still a circle to a reader), and importing ``a.b.c`` imports ``a/__init__``
and ``a/b/__init__`` too. The one exception is a module's own enclosing packages, which Python
has already initialised by the time the module runs; naming one explicitly (``from sparseloom
import __version__``) still counts.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sparseloom"
#: The layers from left to right; a module imports from its own layer or layers to its left.
LAYERS = ("core", "isolation", "workload", "zoo", "profile", "plan", "runtime", "evaluation",
          "api", "cli", "")
#: The layers that reach plugins through the registry only, never by importing them.
PLUGIN_FREE = ("core", "isolation", "workload", "zoo", "profile", "plan", "runtime")
FRONT_DOOR = ("sparseloom", "sparseloom.testing", "sparseloom.__main__")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """``sparseloom/plan/lanes.py`` → ``sparseloom.plan.lanes``; a package is its ``__init__``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _enclosing(name: str) -> list[str]:
    """``a.b.c`` → ``["a", "a.b"]``."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _existing(target: str, modules: Set[str]) -> str:
    """The longest prefix of ``target`` that is a module here ('' when none is)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def imports_of(path: Path, name: str, modules: Set[str]) -> set[str]:
    """The package modules ``path`` (module ``name``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()  # what the import statements name
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                # ``from pkg import mod`` imports the module; ``from pkg import name``, pkg.
                named.add(submodule if submodule in modules else source)
    found: set[str] = set()
    for target in named:
        target = _existing(target, modules)
        if not target:
            continue
        if target != name:
            found.add(target)
        # Importing a.b.c runs a/__init__ and a/b/__init__ first, except those that enclose
        # this module: they were initialised before it ran.
        found.update(parent for parent in _enclosing(target)
                     if parent in modules and parent != name and parent not in _enclosing(name))
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the package modules it imports."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    return {name: imports_of(path, name, paths.keys()) for name, path in paths.items()}


def find_cycles(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def layer_of(module: str) -> str | None:
    """The layer ``module`` belongs to: a name in :data:`LAYERS` ('' for the front door), or
    ``None`` for plugins, which stand beside the layers."""
    if module in FRONT_DOOR:
        return ""
    part = module.split(".")[1]
    if part == "plugins":
        return None
    assert part in LAYERS, f"{module} is in no layer; add its package to LAYERS in {__file__}"
    return part


def layer_violations(graph: Mapping[str, Set[str]]) -> list[str]:
    """Every import of a plugin from a plugin-free layer and of a layer to the importer's
    right, one line each."""
    wrong = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            continue
        for target in sorted(targets):
            other = layer_of(target)
            if other is None:
                if layer in PLUGIN_FREE:
                    wrong.append(f"{module} imports the plugin {target}: reach it by name "
                                 "through the registry")
            elif LAYERS.index(other) > LAYERS.index(layer):
                wrong.append(f"{module} ({layer}) imports {target} "
                             f"({other or 'the front door'}), a layer to its right")
    return wrong


# -- the checker itself, on hand-made graphs and files ------------------------------------------

def test_find_cycles_names_the_modules_of_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}, "f": {"f2"},
             "f2": {"f"}}
    assert find_cycles(graph) == [["a", "b", "c"], ["f", "f2"]]


def test_find_cycles_finds_none_in_a_dag() -> None:
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}) == []


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    for folder in (root, root / "low", root / "high"):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("from pkg.low import d\nVERSION = '1'\n")
    (root / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.high.b import B\n"
        "def f():\n    from ..high import c\n    from pkg import VERSION\n")
    (root / "low" / "d.py").write_text("from . import a\n")
    (root / "high" / "b.py").write_text("import pkg.low.a\n")
    (root / "high" / "c.py").write_text("")
    graph = import_graph(root)
    assert graph["pkg.low.a"] == {"pkg.high.b", "pkg.high.c", "pkg.high", "pkg"}
    assert graph["pkg.low.d"] == {"pkg.low.a"}  # its own package pkg.low is not an edge
    assert graph["pkg.high.b"] == {"pkg.low.a", "pkg.low"}
    assert graph["pkg"] == {"pkg.low.d", "pkg.low"}
    # ``from pkg import VERSION`` closes the circle pkg → low.d → low.a → pkg.
    assert find_cycles(graph) == [["pkg", "pkg.high.b", "pkg.low.a", "pkg.low.d"]]


def test_layer_violations_names_plugins_and_imports_to_the_right() -> None:
    graph = {"sparseloom.plan.lanes": {"sparseloom.plugins.policies.loaded",
                                        "sparseloom.core.types"},
             "sparseloom.zoo.build": {"sparseloom.profile.table"},
             "sparseloom.core.registry": {"sparseloom"},
             "sparseloom.cli.run": {"sparseloom.plugins.backends", "sparseloom.runtime.server"},
             "sparseloom.plugins.policies.loaded": {"sparseloom.plan.lanes"}}
    assert layer_violations(graph) == [
        "sparseloom.core.registry (core) imports sparseloom (the front door), a layer to its "
        "right",
        "sparseloom.plan.lanes imports the plugin sparseloom.plugins.policies.loaded: reach it "
        "by name through the registry",
        "sparseloom.zoo.build (zoo) imports sparseloom.profile.table (profile), a layer to its "
        "right",
    ]


# -- the package -------------------------------------------------------------------------------

def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_layers_point_one_way() -> None:
    wrong = layer_violations(import_graph())
    assert not wrong, "\n".join(wrong)
