"""The registry: built-ins, entry points, failures reported and skipped, duplicates refused."""

from __future__ import annotations

import importlib
import sys

import pytest

from sparseloom.core.errors import PlanError, PluginCallError, PluginError, UnknownNameError
from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.registry import DEFAULT_PLUGINS, create_registry
from tests.plugin_dists import install_example_plugin, make_distribution


class PolicyPluginForTest:
    """A plugin object registering one policy called ``"p1"``."""

    @hookimpl
    def sparseloom_register_policies(self, register):
        register("p1", dict, description="a test policy")


@pytest.fixture
def on_sys_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("sparseloom_example_plugin", "brok"))]:
        del sys.modules[name]


def test_builtins_register_with_sparseloom_distribution():
    registry = create_registry(autoload=False)
    assert not registry.failures, registry.failures
    assert {registry.pm.get_name(p) for p in registry.pm.get_plugins()} == set(DEFAULT_PLUGINS)
    assert {r.kind for r in registry.registrations()} >= {"backend", "compressor", "estimator"}
    for registration in registry.registrations():
        assert registration.distribution == "sparseloom"


def test_plugin_object_registers_and_unregisters():
    registry = create_registry(autoload=False, builtins=())
    registry.register_plugin(PolicyPluginForTest(), "test-policy", distribution="d", version="1")
    registration = registry.get_policy("p1")
    assert (registration.kind, registration.plugin, registration.distribution) == (
        "policy", "test-policy", "d",
    )
    assert registry.create("policy", "p1") == {}
    registry.unregister_plugin("test-policy")
    with pytest.raises(UnknownNameError, match="unknown policy 'p1'; registered policies: none"):
        registry.get_policy("p1")


def test_duplicate_name_is_refused_naming_both_providers():
    registry = create_registry(autoload=False, builtins=())
    registry.register_plugin(PolicyPluginForTest(), "first", distribution="dist-a")
    registry.register_plugin(PolicyPluginForTest(), "second", distribution="dist-b")
    assert registry.get_policy("p1").plugin == "first"
    (failure,) = registry.failures
    assert failure.plugin == "second"
    assert "'p1' is registered twice" in failure.error
    assert "dist-a" in failure.error and "dist-b" in failure.error


def test_entry_point_plugin_loads_and_autoload_switch_hides_it(on_sys_path, monkeypatch):
    install_example_plugin(on_sys_path)
    registry = create_registry(autoload=True)
    policy = registry.get_policy("fastest-dense")
    assert (policy.distribution, policy.version) == ("sparseloom-example-plugin", "0.1.0")
    assert registry.get_estimator("knn").capabilities == ("accuracy",)
    assert registry.get_backend("ortx").distribution == "sparseloom-example-plugin"
    assert registry.get_compressor("rounding").capabilities == ("rounding",)
    assert not registry.failures

    monkeypatch.setenv("SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD", "1")
    with pytest.raises(UnknownNameError):
        create_registry().get_policy("fastest-dense")
    monkeypatch.setenv("SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD", "0")
    assert create_registry().get_policy("fastest-dense")


def test_plugin_raising_at_import_is_reported_and_skipped(on_sys_path):
    make_distribution(
        on_sys_path,
        "broken-plugin",
        {"broken": "broken_at_import"},
        {"broken_at_import": "raise RuntimeError('boom: missing licence file')\n"},
    )
    install_example_plugin(on_sys_path)
    registry = create_registry(autoload=True)
    (failure,) = registry.failures
    assert failure.distribution == "broken-plugin"
    assert "RuntimeError: boom: missing licence file" in failure.error
    assert registry.get_policy("fastest-dense")  # the healthy plugin still loaded


def test_malformed_entry_point_is_reported(on_sys_path):
    make_distribution(on_sys_path, "brokenref", {"bad": "no_such_module_xyz:thing"})
    registry = create_registry(autoload=True, builtins=())
    (failure,) = registry.failures
    assert failure.distribution == "brokenref"
    assert "ModuleNotFoundError" in failure.error


def test_plugin_raising_in_register_hook_is_reported():
    class RaisesInHookForTest:
        @hookimpl
        def sparseloom_register_backends(self, register):
            raise ValueError("cannot find driver")

    registry = create_registry(autoload=False, builtins=())
    registry.register_plugin(RaisesInHookForTest(), "raiser")
    assert "ValueError: cannot find driver" in registry.failures[0].error


def test_unknown_kind_and_bad_registration():
    registry = create_registry(autoload=False, builtins=())
    with pytest.raises(PluginError, match="unknown plugin kind 'gadget'"):
        registry.get("gadget", "x")

    class EmptyNameForTest:
        @hookimpl
        def sparseloom_register_policies(self, register):
            register("", dict)

    registry.register_plugin(EmptyNameForTest(), "empty")
    assert "non-empty string" in registry.failures[0].error


def test_an_observer_that_raises_is_reported_once_then_skipped(capsys):
    seen = []

    class ObserversForTest:
        @hookimpl
        def sparseloom_slo_violation(self, task, latency_ms, slo_latency_ms):
            seen.append((task, latency_ms, slo_latency_ms))

    class RaisingObserverForTest:
        calls = 0

        @hookimpl
        def sparseloom_slo_violation(self, task):
            RaisingObserverForTest.calls += 1
            raise RuntimeError("observer bug")

    registry = create_registry(autoload=False, builtins=())
    registry.register_plugin(ObserversForTest(), "ok")
    registry.register_plugin(RaisingObserverForTest(), "bad", distribution="bad-dist",
                             version="2.0")
    for _ in range(30):
        registry.notify_slo_violation("vision", 12.0, 10.0)
    assert seen == [("vision", 12.0, 10.0)] * 30
    assert RaisingObserverForTest.calls == 1
    err = capsys.readouterr().err
    assert err.count("Warning:") == 1 and "Traceback" not in err, err
    assert "plugin 'bad' (distribution bad-dist 2.0)" in err and "observer bug" in err


# -- the plugin boundary -----------------------------------------------------------------------


class BuggyPolicyForTest:
    """Test double: a third-party policy whose ``plan`` raises what the test injects."""

    error: Exception = RuntimeError("division by zero somewhere")

    def plan(self, tasks, profile, processors, slos):
        raise self.error

    @staticmethod
    def describe():
        return "buggy"


def _buggy_registry():
    class BuggyPluginForTest:
        @hookimpl
        def sparseloom_register_policies(self, register):
            register("buggy", BuggyPolicyForTest)
            register("broken-factory", lambda: 1 / 0)

    registry = create_registry(autoload=False, builtins=("sparseloom.plugins.policies",))
    registry.register_plugin(BuggyPluginForTest(), "buggy-plugin", distribution="buggy-dist",
                             version="0.3")
    return registry


def test_a_third_party_method_that_raises_is_one_plugin_error_naming_it():
    registry = _buggy_registry()
    policy = registry.create("policy", "buggy")
    assert isinstance(policy, BuggyPolicyForTest)  # the boundary is invisible otherwise
    assert policy.describe() == "buggy" and policy.error is BuggyPolicyForTest.error
    with pytest.raises(PluginCallError) as caught:
        policy.plan([], None, [], {})
    message = str(caught.value)
    assert message.startswith("policy 'buggy' of plugin 'buggy-plugin' (distribution "
                              "buggy-dist 0.3) failed in plan(): RuntimeError: division by zero")
    assert "\n" not in message and isinstance(caught.value.__cause__, RuntimeError)
    with pytest.raises(PluginCallError, match=r"'broken-factory'.*its factory.*ZeroDivision"):
        registry.create("policy", "broken-factory")


def test_a_sparseloom_error_raised_on_purpose_passes_the_boundary_unchanged():
    registry = _buggy_registry()
    policy = registry.create("policy", "buggy")
    policy.error = PlanError("no variant meets the SLO of task 'x'")
    with pytest.raises(PlanError, match=r"^no variant meets"):
        policy.plan([], None, [], {})


def test_builtins_are_not_wrapped():
    registry = _buggy_registry()
    builtin = registry.create("policy", "sparseloom")
    assert type(builtin) is registry.get_policy("sparseloom").factory
