"""Checks of :class:`sparseloom.Server`'s arguments, as strict as the command line's options.

One :class:`~sparseloom.core.errors.ArgumentError` names the parameter, what it got and what it
takes (the helpers are :mod:`sparseloom.workload.arguments`'), before a wrong value meets the
code that would fail on it from deep inside, after the workers started.
"""

from __future__ import annotations

import os
from typing import Any

from sparseloom.core.types import SLO
from sparseloom.profile.table import ProfileTable
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.workload.arguments import (
    check_flags,
    check_instance,
    check_names,
    check_number,
    check_slos,
)
from sparseloom.workload.task import Workload


def check_server_arguments(workload: Any, profile: Any, policy: Any, slos: Any, processors: Any,
                           memory_budget: Any, tasks: Any, max_queued: Any, options: Any,
                           progress: Any, paired_gate: Any = True) -> dict[str, SLO]:
    """``Server(...)``'s arguments, each refused with one ``ArgumentError`` naming it; returns
    the SLOs (a pair ``(accuracy, latency_ms)`` read as an :class:`SLO`)."""
    where = "Server()"
    check_instance(where, "workload", workload, (Workload, str, os.PathLike),
                   "a Workload, a registered workload name or a workload .toml path")
    for name, value, kind, fix in (
            ("profile", profile, ProfileTable, "a ProfileTable (build_profile, load_profile)"),
            ("options", options, RuntimeOptions, "a RuntimeOptions")):
        if value is not None:
            check_instance(where, name, value, kind, fix)
    check_instance(where, "policy", policy, str, "a registered policy name")
    checked_slos = check_slos(where, "slos", slos) or {}
    check_names(where, "processors", processors)
    check_names(where, "tasks", tasks)
    check_number(where, "memory_budget", memory_budget, low=0, low_open=True)
    check_number(where, "max_queued", max_queued, low=1, integer=True, optional=True)
    check_flags(where, progress=progress, paired_gate=paired_gate)
    return checked_slos
