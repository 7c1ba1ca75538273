"""Registers the bundled workloads (``default``, ``tiny``) through the plugin hook."""

from __future__ import annotations

import functools

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.workloads import BUNDLED_WORKLOADS, bundled_workload_file

_DESCRIPTIONS = {
    "default": "the four paper tasks: vision, sentiment, activity, speech (real data, ~4 min "
    "to build once)",
    "tiny": "one small digits task that builds in seconds (for tests)",
}


@hookimpl
def sparseloom_register_workloads(register: RegisterFn) -> None:
    """Register each bundled workload; its factory returns the path of its TOML file."""
    for name in BUNDLED_WORKLOADS:
        register(
            name,
            functools.partial(bundled_workload_file, name),
            description=_DESCRIPTIONS.get(name, ""),
        )
