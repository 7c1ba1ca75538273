"""The pytest fixtures shipped to plugin authors (``pytest11`` entry point)."""

from __future__ import annotations

import importlib.metadata

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.registry import get_registry


class EstimatorPluginForTest:
    @hookimpl
    def sparseloom_register_estimators(self, register):
        register("constant", lambda: "built", capabilities=["accuracy"])


def test_fixtures_are_installed_as_pytest11_entry_point():
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "sparseloom"
    ]
    assert entry_point.value == "sparseloom.testing"


def test_register_plugin_for_one_test(register_plugin, sparseloom_registry):
    name = register_plugin(EstimatorPluginForTest())
    assert get_registry() is sparseloom_registry
    assert sparseloom_registry.get_estimator("constant").plugin == name
    assert sparseloom_registry.create("estimator", "constant") == "built"
    assert [r.name for r in sparseloom_registry.estimators("accuracy")][-1] == "constant"


def test_registration_does_not_leak_between_tests(sparseloom_registry):
    assert "constant" not in {r.name for r in sparseloom_registry.estimators()}
