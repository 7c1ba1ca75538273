"""The plugin registry: built-in plugins first, then the ``sparseloom`` entry-point group.

Nothing outside this module calls ``pm.hook`` directly: code asks the :class:`Registry`
facade for registrations (``registry.backends()``, ``registry.get_backend("ov")``) and
notifies observers through its ``notify_*`` methods.

A plugin that fails to import or to register is recorded as a :class:`PluginFailure` and
skipped; a name registered twice is refused with an error naming both providers, and the first
registration (built-ins load first) stays in force.

Every call into third-party plugin code is a boundary: :meth:`Registry.build` wraps what a
factory returns in :class:`ContainedPlugin`, so that anything but a :class:`SparseloomError`
raised by one of its methods becomes one :class:`PluginCallError` naming the plugin, its
distribution and what it raised. An observer that raises is reported once and not called again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import pluggy

from sparseloom.core import __version__, hookspecs
from sparseloom.core.errors import DEBUG_ENV, PluginError, UnknownNameError, provider
from sparseloom.core.protocols import (
    BUILTIN_DISTRIBUTION,
    compressor_name_problem,
    contain,
    guarded,
)
from sparseloom.core.types import PLUGIN_KINDS, PluginFailure, Processor, Registration

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "sparseloom"

#: The policy every command and API uses unless told otherwise: SparseLoom's variant choice
#: placed for the load the tasks make together (:mod:`sparseloom.plugins.policies.loaded`).
#: It is the one that beats the stock runtimes in ``sparseloom bench serve`` (docs/results.md);
#: the paper's Algorithm 1 stays available as ``sparseloom``.
DEFAULT_POLICY = "sparseloom-loaded"

DISABLE_AUTOLOAD_ENV = "SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"

#: Built-in plugin modules, registered in this order through the same path as third-party ones.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "sparseloom.plugins.backends.openvino",
    "sparseloom.plugins.backends.onnxruntime",
    "sparseloom.plugins.estimators.latency",
    "sparseloom.plugins.estimators.xgboost_estimator",
    "sparseloom.plugins.estimators.lightgbm_estimator",
    "sparseloom.plugins.estimators.ranking",
    "sparseloom.plugins.workloads.plugin",
    "sparseloom.plugins.compressors",
    "sparseloom.plugins.policies",
    "sparseloom.plugins.policies.adms",
)

#: Registration hook name for each plugin kind.
REGISTRATION_HOOKS: dict[str, str] = {
    "backend": "sparseloom_register_backends",
    "compressor": "sparseloom_register_compressors",
    "estimator": "sparseloom_register_estimators",
    "policy": "sparseloom_register_policies",
    "workload": "sparseloom_register_workloads",
}

_PLURAL = {"backend": "backends", "compressor": "compressors", "estimator": "estimators",
           "policy": "policies", "workload": "workloads"}


def autoload_disabled() -> bool:
    """Whether ``SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD`` turns entry-point plugins off."""
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _describe_error(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


@attrs.define(eq=False)
class Registry:
    """A pluggy plugin manager plus the registrations its plugins made.

    Build one with :func:`create_registry`; most code uses the process-wide
    :func:`get_registry`.
    """

    pm: pluggy.PluginManager = attrs.field(factory=lambda: _new_plugin_manager())
    failures: list[PluginFailure] = attrs.field(factory=list)
    _registrations: dict[str, dict[str, Registration]] = attrs.field(
        factory=lambda: {kind: {} for kind in PLUGIN_KINDS}, alias="_registrations"
    )
    #: (distribution, version) per registered plugin name, for observer failures.
    _providers: dict[str, tuple[str, str]] = attrs.field(factory=dict, alias="_providers")
    #: (plugin, hook) of every observer that raised: reported once, then not called again.
    _silenced: set[tuple[str, str]] = attrs.field(factory=set, alias="_silenced")

    # -- loading ---------------------------------------------------------------------------

    def register_plugin(
        self,
        plugin: object,
        name: str | None = None,
        *,
        distribution: str = "",
        version: str = "",
    ) -> str | None:
        """Register ``plugin`` (a module or object with hook implementations).

        Its registration hooks are called at once. Failures are recorded in
        :attr:`failures` and ``None`` is returned; otherwise the plugin name is returned.
        """
        plugin_name = name or getattr(plugin, "__name__", None) or repr(plugin)
        try:
            registered = self.pm.register(plugin, name=plugin_name)
        except Exception as error:  # pluggy raises ValueError or PluginValidationError
            self._fail(plugin_name, distribution, version, error)
            return None
        if registered is None:  # pluggy's answer for a blocked plugin
            return None
        self._providers[plugin_name] = (distribution, version)
        for kind, hook_name in REGISTRATION_HOOKS.items():
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                register = self._register_callback(kind, plugin_name, distribution, version)
                try:
                    impl.function(**{arg: register for arg in impl.argnames})
                except Exception as error:
                    self._fail(plugin_name, distribution, version, error)
        return plugin_name

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin and everything it registered."""
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)
        for by_name in self._registrations.values():
            for key in [k for k, r in by_name.items() if r.plugin == name]:
                del by_name[key]

    def load_builtins(self, modules: Iterable[str] = DEFAULT_PLUGINS) -> None:
        """Import and register the built-in plugin modules."""
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except Exception as error:
                self._fail(module_name, "sparseloom", __version__, error)
                continue
            self.register_plugin(
                module, module_name, distribution="sparseloom", version=__version__
            )

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Load every plugin of the entry-point ``group``; a broken one is reported, skipped."""
        for entry_point in importlib.metadata.entry_points(group=group):
            dist = getattr(entry_point, "dist", None)
            dist_name = dist.name if dist is not None else "<unknown distribution>"
            dist_version = dist.version if dist is not None else ""
            if self.pm.get_plugin(entry_point.name) is not None:
                continue
            try:
                plugin = entry_point.load()
            except Exception as error:
                self._fail(
                    f"{entry_point.name} = {entry_point.value}", dist_name, dist_version, error
                )
                continue
            self.register_plugin(
                plugin, entry_point.name, distribution=dist_name, version=dist_version
            )

    def _fail(self, plugin: str, distribution: str, version: str, error: BaseException) -> None:
        failure = PluginFailure(plugin, distribution, version, _describe_error(error))
        log.warning("plugin %s (%s) skipped: %s", plugin, distribution or "?", failure.error)
        self.failures.append(failure)

    def _register_callback(
        self, kind: str, plugin: str, distribution: str, version: str
    ) -> hookspecs.RegisterFn:
        def register(
            name: str,
            factory: Callable[..., Any],
            *,
            description: str = "",
            capabilities: Iterable[str] = (),
        ) -> None:
            registration = Registration(
                kind=kind,
                name=name,
                factory=factory,
                description=description,
                capabilities=tuple(capabilities),
                plugin=plugin,
                distribution=distribution,
                version=version,
            )
            problem = compressor_name_problem(name) if kind == "compressor" else None
            if problem:
                raise PluginError(
                    f"compressor name {name!r} of plugin {plugin!r} (distribution "
                    f"{distribution or '?'}) could never be selected in a variant list: "
                    f"{problem}. Register it under a name of letters, digits, '_' and '-' "
                    f"that does not end in '-<number>'."
                )
            existing = self._registrations[kind].get(name)
            if existing is not None:
                raise PluginError(
                    f"{kind} name {name!r} is registered twice: by plugin {existing.plugin!r} "
                    f"of distribution {existing.distribution or '?'} and by plugin {plugin!r} "
                    f"of distribution {distribution or '?'}; the second is refused. Rename it "
                    f"or uninstall one of the two distributions."
                )
            self._registrations[kind][name] = registration

        return register

    # -- the facade ------------------------------------------------------------------------

    def registrations(self, kind: str | None = None) -> list[Registration]:
        """All registrations, or those of one ``kind``, in registration order."""
        kinds = PLUGIN_KINDS if kind is None else (kind,)
        return [r for k in kinds for r in self._registrations[k].values()]

    def get(self, kind: str, name: str) -> Registration:
        """The registration of ``kind`` called ``name``; :class:`UnknownNameError` if none."""
        if kind not in self._registrations:
            raise PluginError(f"unknown plugin kind {kind!r}; known kinds: {PLUGIN_KINDS}")
        try:
            return self._registrations[kind][name]
        except KeyError:
            known = ", ".join(sorted(self._registrations[kind])) or "none"
            raise UnknownNameError(
                f"unknown {kind} {name!r}; registered {_PLURAL[kind]}: {known}. "
                f"Run `sparseloom plugins` to see what is installed."
            ) from None

    def create(self, kind: str, name: str, **options: Any) -> Any:
        """Build the implementation registered as ``kind``/``name`` with ``options``."""
        return self.build(self.get(kind, name), **options)

    def build(self, registration: Registration, **options: Any) -> Any:
        """Call ``registration``'s factory with ``options``; a third party's result comes back
        behind the plugin boundary (:class:`ContainedPlugin`).

        :raises PluginCallError: a third-party factory raised (naming the plugin).
        """
        if registration.distribution == BUILTIN_DISTRIBUTION:
            return registration.factory(**options)
        factory = guarded(registration.factory, registration, "its factory")
        return contain(registration, factory(**options))

    def backends(self) -> list[Registration]:
        """Registered backends."""
        return self.registrations("backend")

    def compressors(self) -> list[Registration]:
        """Registered compressors."""
        return self.registrations("compressor")

    def estimators(self, capability: str | None = None) -> list[Registration]:
        """Registered estimators, optionally only those with ``capability``."""
        found = self.registrations("estimator")
        return [r for r in found if capability is None or capability in r.capabilities]

    def policies(self) -> list[Registration]:
        """Registered placement policies."""
        return self.registrations("policy")

    def workloads(self) -> list[Registration]:
        """Registered bundled workloads."""
        return self.registrations("workload")

    def get_backend(self, name: str) -> Registration:
        """The backend registered as ``name``."""
        return self.get("backend", name)

    def get_compressor(self, name: str) -> Registration:
        """The compressor registered as ``name``."""
        return self.get("compressor", name)

    def get_estimator(self, name: str) -> Registration:
        """The estimator registered as ``name``."""
        return self.get("estimator", name)

    def get_policy(self, name: str) -> Registration:
        """The placement policy registered as ``name``."""
        return self.get("policy", name)

    def get_workload(self, name: str) -> Registration:
        """The bundled workload registered as ``name``."""
        return self.get("workload", name)

    # -- lifecycle notifications -----------------------------------------------------------

    def notify_profile_built(self, workload: str, profile: Any) -> None:
        """Tell observers a profile table was built."""
        self._notify("sparseloom_profile_built", workload=workload, profile=profile)

    def notify_slo_violation(self, task: str, latency_ms: float, slo_latency_ms: float) -> None:
        """Tell observers a request missed its latency SLO."""
        self._notify(
            "sparseloom_slo_violation",
            task=task,
            latency_ms=latency_ms,
            slo_latency_ms=slo_latency_ms,
        )

    def notify_backend_error(
        self, processor: Processor, operation: str, error: BaseException
    ) -> None:
        """Tell observers a backend failed."""
        self._notify(
            "sparseloom_backend_error", processor=processor, operation=operation, error=error
        )

    def _notify(self, hook_name: str, **kwargs: Any) -> None:
        # Observers must not break the run (nor flood it): one that raises is reported in one
        # line, once, and not called again by this registry.
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            key = (impl.plugin_name, hook_name)
            if key in self._silenced:
                continue
            try:
                impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except Exception as error:
                with _silence_lock:
                    if key in self._silenced:
                        continue
                    self._silenced.add(key)
                distribution, version = self._providers.get(impl.plugin_name, ("", ""))
                who = provider("observer", hook_name, impl.plugin_name, distribution, version)
                if os.environ.get(DEBUG_ENV):
                    traceback.print_exception(error)
                print(f"Warning: {who} raised {type(error).__name__}: {error}; it is not called "
                      f"again in this run (set {DEBUG_ENV}=1 to see its traceback)",
                      file=sys.stderr, flush=True)


def _new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def create_registry(
    *,
    autoload: bool | None = None,
    builtins: Sequence[str] = DEFAULT_PLUGINS,
) -> Registry:
    """Build a registry: the built-in plugins, then (unless disabled) the entry points.

    :param autoload: load the ``sparseloom`` entry-point group; ``None`` follows the
        ``SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD`` environment variable.
    :param builtins: the built-in plugin modules to register first.
    """
    registry = Registry()
    registry.load_builtins(builtins)
    if autoload is None:
        autoload = not autoload_disabled()
    if autoload:
        registry.load_entry_points()
    return registry


_registry: Registry | None = None
_lock = threading.Lock()
_silence_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, built on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = create_registry()
        return _registry


def set_registry(registry: Registry | None) -> Registry | None:
    """Replace the process-wide registry (``None`` rebuilds it on next use); returns the old."""
    global _registry
    with _lock:
        previous, _registry = _registry, registry
        return previous
