"""Pytest fixtures for sparseloom plugin authors, shipped as a ``pytest11`` entry point.

With sparseloom installed, any test suite can use:

``sparseloom_registry``
    A fresh :class:`~sparseloom.core.registry.Registry` holding the built-in plugins only (no
    entry points), installed as the process-wide registry for the duration of the test.

``register_plugin``
    A function ``register_plugin(plugin, name=None)`` that registers a plugin object or module
    into that registry for one test and returns its name; it is removed afterwards.

Example::

    def test_my_policy_is_listed(register_plugin, sparseloom_registry):
        register_plugin(my_plugin_module)
        assert sparseloom_registry.get_policy("mine").distribution == "test"
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sparseloom.core.registry import Registry, create_registry, set_registry


@pytest.fixture
def sparseloom_registry() -> Iterator[Registry]:
    """A fresh registry of built-in plugins, process-wide for the duration of one test."""
    registry = create_registry(autoload=False)
    previous = set_registry(registry)
    try:
        yield registry
    finally:
        set_registry(previous)


@pytest.fixture
def register_plugin(sparseloom_registry: Registry) -> Iterator[Callable[..., str]]:
    """Register a plugin into ``sparseloom_registry`` for one test; returns its name."""
    names: list[str] = []

    def register(plugin: object, name: str | None = None) -> str:
        registered = sparseloom_registry.register_plugin(
            plugin, name, distribution="test", version="0"
        )
        if registered is None:
            failure = sparseloom_registry.failures[-1] if sparseloom_registry.failures else None
            raise RuntimeError(f"plugin could not be registered: {failure}")
        names.append(registered)
        return registered

    yield register
    for name in names:
        sparseloom_registry.unregister_plugin(name)
