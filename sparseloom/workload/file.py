"""Read and check a workload TOML file into a :class:`WorkloadDefinition`.

The format (paths are relative to the TOML file)::

    name = "mine"                       # optional; defaults to the file stem
    description = "..."                 # optional
    processors = ["ov:CPU", "ort:CPU"]  # optional; empty = the default set
    variants = ["dense", "unstructured", "int8"]  # optional: the zoo's variants (dense first;
                                        # a bare name = its default levels); empty = default
    held_out = 0.3                      # optional: share of each task's eval rows kept out of
                                        # selection to judge it (0 = none; at most 0.5)

    [compressors.unstructured]          # optional: options passed to a compressor's factory
    scope = "layer"

    [profile]                           # optional: profiler settings (docs/profile.md)
    accuracy_estimator = "xgboost"
    executor = "ray"                    # optional: local (default) or ray
    ray_resources = { "ov:NPU" = "soc-npu" }  # optional: processor -> Ray node resource

    [[task]]
    name = "mytask"
    model = "model.onnx"                # a task from files ...
    data = "eval.npz"                   # one array per model input name, plus "labels"
    calibration = "calib.npz"           # optional: one array per model input name
    metric = "accuracy"                 # optional: accuracy (default) or ctc_accuracy
    [task.slo]                          # optional
    accuracy = 0.85
    latency_ms = 5.0

    [[task]]
    name = "vision"
    builder = "vision"                  # ... or a bundled builder, or "package.module:NAME"
    [task.options]                      # optional builder options
    epochs = 2

Every mistake (a missing field, a wrong type, an unknown key) is a :class:`ConfigError` that
names the file, the task and the key.
"""

from __future__ import annotations

import importlib
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import SLO, repeated
from sparseloom.workload.held_out import DEFAULT_HELD_OUT, check_held_out
from sparseloom.workload.metrics import METRICS
from sparseloom.workload.task import (
    TaskBuilder,
    TaskDefinition,
    WorkloadDefinition,
    check_task_name,
)

#: Builders shipped with sparseloom, by short name (module ``sparseloom.plugins.workloads.<name>``).
BUNDLED_BUILDERS: tuple[str, ...] = ("tiny", "vision", "sentiment", "activity", "speech")

_TOP_KEYS = {
    "name": str, "description": str, "processors": list, "task": list, "profile": dict,
    "variants": list, "compressors": dict, "held_out": (int, float),
}
#: The ``[profile]`` table: which estimators (by registered name) and settings the profiler uses.
_PROFILE_KEYS = {
    "accuracy_estimator": str, "latency_estimator": str, "samples": int, "features": str,
    "executor": str, "ray_resources": dict,
}
_TASK_KEYS = {
    "name": str,
    "description": str,
    "builder": str,
    "options": dict,
    "model": str,
    "data": str,
    "calibration": str,
    "metric": str,
    "slo": dict,
}
_SLO_KEYS = {"accuracy": (int, float), "latency_ms": (int, float)}
_TYPE_NAMES = {str: "a string", list: "an array", dict: "a table"}


def _check_keys(
    table: Mapping[str, Any], allowed: Mapping[str, Any], where: str
) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r}; known keys: {', '.join(allowed)}"
            )
        expected = allowed[key]
        if not isinstance(value, expected) or isinstance(value, bool):
            wanted = _TYPE_NAMES.get(expected, "a number")
            raise ConfigError(
                f"{where}: {key!r} must be {wanted}, got {type(value).__name__} {value!r}"
            )


def resolve_builder(reference: str, where: str = "") -> TaskBuilder:
    """The :class:`TaskBuilder` a TOML ``builder`` names: bundled short name or ``mod:attr``."""
    prefix = f"{where}: " if where else ""
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
    elif reference in BUNDLED_BUILDERS:
        module_name, attr = f"sparseloom.plugins.workloads.{reference}", "BUILDER"
    else:
        raise ConfigError(
            f"{prefix}unknown builder {reference!r}; bundled builders: "
            f"{', '.join(BUNDLED_BUILDERS)}, or give 'package.module:NAME'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(
            f"{prefix}cannot import builder module {module_name!r}: {error}"
        ) from None
    builder = getattr(module, attr, None)
    if not isinstance(builder, TaskBuilder):
        raise ConfigError(
            f"{prefix}{module_name}:{attr} is not a sparseloom.workload.task.TaskBuilder"
        )
    return builder


def check_options(
    builder: TaskBuilder, options: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """Options checked against the builder's defaults (known keys, same types)."""
    checked = {}
    for key, value in options.items():
        if key not in builder.defaults:
            raise ConfigError(
                f"{where}: unknown option {key!r} for builder {builder.name!r}; known options: "
                f"{', '.join(builder.defaults) or 'none'}"
            )
        default = builder.defaults[key]
        same_type = type(value) is type(default) or (
            isinstance(default, float) and type(value) is int
        )
        if not same_type:
            raise ConfigError(
                f"{where}: option {key!r} must be {type(default).__name__} like its default "
                f"{default!r}, got {type(value).__name__} {value!r}"
            )
        checked[key] = float(value) if isinstance(default, float) else value
    return checked


def _parse_slo(table: Mapping[str, Any], where: str) -> SLO:
    _check_keys(table, _SLO_KEYS, f"{where} [slo]")
    missing = [key for key in _SLO_KEYS if key not in table]
    if missing:
        raise ConfigError(f"{where} [slo]: missing {', '.join(missing)}")
    try:
        return SLO(accuracy=table["accuracy"], latency_ms=table["latency_ms"])
    except ValueError as error:
        raise ConfigError(f"{where} [slo]: {error}") from None


def _parse_task(table: Any, index: int, base: Path, where_file: str) -> TaskDefinition:
    where = f"{where_file}: task #{index + 1}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table ([[task]]), got {table!r}")
    if "name" in table and isinstance(table["name"], str):
        where = f"{where_file}: task {table['name']!r}"
    _check_keys(table, _TASK_KEYS, where)
    if not table.get("name", "").strip():
        raise ConfigError(f"{where}: missing 'name'")
    check_task_name(table["name"], where_file)
    slo = _parse_slo(table["slo"], where) if "slo" in table else None
    metric = table.get("metric", "accuracy")
    if metric not in METRICS:
        raise ConfigError(
            f"{where}: unknown metric {metric!r}; known metrics: {', '.join(sorted(METRICS))}"
        )
    common = {"name": table["name"], "slo": slo, "description": table.get("description", "")}
    if "builder" in table:
        extra = [key for key in ("model", "data", "calibration", "metric") if key in table]
        if extra:
            raise ConfigError(
                f"{where}: a builder task takes no {', '.join(extra)} (the builder makes them)"
            )
        builder = resolve_builder(table["builder"], where)
        options = check_options(builder, table.get("options", {}), where)
        try:
            return TaskDefinition(builder=builder, options=options, **common)
        except ConfigError as error:  # the option's range: say which file
            raise ConfigError(f"{where_file}: {error}") from None
    if "options" in table:
        raise ConfigError(f"{where}: 'options' is only for builder tasks")
    missing = [key for key in ("model", "data") if key not in table]
    if missing:
        raise ConfigError(
            f"{where}: missing {' and '.join(map(repr, missing))} (a task needs a model and a "
            f"data file, or a builder)"
        )
    paths = {}
    for key in ("model", "data", "calibration"):
        if key in table:
            path = (base / table[key]).resolve()
            if not path.is_file():
                found = "is a folder, not a file" if path.is_dir() else "not found"
                raise ConfigError(f"{where}: {key} file {table[key]!r} {found} (looked at {path})")
            paths[key] = path
    return TaskDefinition(metric=metric, **paths, **common)


def read_workload_file(
    path: str | os.PathLike[str], *, name: str | None = None
) -> WorkloadDefinition:
    """Parse and check a workload TOML file; :class:`ConfigError` on any mistake."""
    path = Path(path).expanduser().resolve()
    where = f"workload file {path}"
    if not path.is_file():
        raise ConfigError(f"{where} {'is a folder, not a file' if path.is_dir() else 'not found'}")
    try:
        text = path.read_text(encoding="utf-8")
        if text.startswith("\ufeff"):  # tomllib calls it an "invalid statement" at 1:1
            raise ConfigError(f"{where} starts with a byte-order mark (U+FEFF), which TOML does "
                              "not allow; save it as UTF-8 without BOM")
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where} is not valid TOML: {error}") from None
    _check_keys(document, _TOP_KEYS, where)
    _check_keys(document.get("profile", {}), _PROFILE_KEYS, f"{where} [profile]")
    _check_executor(document.get("profile", {}), f"{where} [profile]")
    _check_profile_choices(document.get("profile", {}), f"{where} [profile]")
    raw_tasks = document.get("task", [])
    if not raw_tasks:
        raise ConfigError(f"{where}: no tasks; add at least one [[task]] table")
    tasks = [_parse_task(table, i, path.parent, where) for i, table in enumerate(raw_tasks)]
    seen: set[str] = set()
    for task in tasks:
        if task.name in seen:
            raise ConfigError(f"{where}: task name {task.name!r} appears twice")
        seen.add(task.name)
    processors = document.get("processors", [])
    for spec in processors:
        if not isinstance(spec, str) or ":" not in spec or not all(spec.split(":", 1)):
            raise ConfigError(
                f"{where}: processor {spec!r} must be a string '<backend>:<device>', "
                f"e.g. 'ov:CPU'"
            )
    from sparseloom.core.processors import check_distinct
    from sparseloom.core.registry import get_registry

    check_distinct(processors, f"{where}: processors")
    backends = {r.name for r in get_registry().backends()}
    for spec in processors:
        backend = spec.split(":", 1)[0]
        if backend not in backends:
            raise ConfigError(
                f"{where}: processor {spec!r} names backend {backend!r}, which is not "
                f"installed; installed backends: {', '.join(sorted(backends)) or 'none'} "
                f"(`sparseloom devices` lists their processors)")
    workload_name = name or document.get("name") or path.stem
    check_task_name(workload_name, where, what="workload")
    return WorkloadDefinition(
        name=workload_name,
        tasks=tuple(tasks),
        processors=tuple(processors),
        source=path,
        description=document.get("description", ""),
        variants=_parse_variants(document.get("variants", []), where),
        compressor_options=_parse_compressors(document.get("compressors", {}), where),
        held_out=check_held_out(document.get("held_out", DEFAULT_HELD_OUT),
                                f"{where}: held_out"),
    )


def _check_profile_choices(table: Mapping[str, Any], where: str) -> None:
    """``samples`` and the estimators of the ``[profile]`` table, refused at read rather than
    when ``sparseloom profile`` gets to them."""
    from sparseloom.core.registry import get_registry

    if "samples" in table and table["samples"] < 1:
        raise ConfigError(f"{where}: samples must be 1 or more exact stitched-variant samples, "
                          f"got {table['samples']}")
    for key, capability in (("accuracy_estimator", "accuracy"), ("latency_estimator", "latency")):
        if key in table:
            known = [r.name for r in get_registry().estimators(capability)]
            if table[key] not in known:
                raise ConfigError(f"{where}: {key} {table[key]!r} is not a registered "
                                  f"{capability} estimator; registered: {', '.join(known)} "
                                  f"(`sparseloom plugins` lists them)")


def _check_executor(table: Mapping[str, Any], where: str) -> None:
    """``executor`` and ``ray_resources`` of the ``[profile]`` table (docs/profile.md)."""
    if table.get("executor", "local") not in ("local", "ray"):
        raise ConfigError(f"{where}: executor {table['executor']!r} is unknown; use \"local\" "
                          f"(this process, the default) or \"ray\" (a Ray cluster)")
    for processor, resource in table.get("ray_resources", {}).items():
        if not isinstance(resource, str) or not resource.strip():
            raise ConfigError(
                f"{where}: ray_resources.{processor} must name the Ray custom resource of the "
                f"node that measures {processor} (e.g. \"soc-npu\"), got {resource!r}")


def _parse_variants(variants: list[Any], where: str) -> tuple[str, ...]:
    """The ``variants`` list: strings, checked further when a zoo is built from them."""
    for variant in variants:
        if not isinstance(variant, str) or not variant.strip():
            raise ConfigError(
                f"{where}: variants must be an array of variant names such as "
                f"[\"dense\", \"unstructured-0.5\", \"int8\"], got {variant!r}"
            )
    names = tuple(v.strip() for v in variants)
    twice = repeated(names)
    if twice:
        raise ConfigError(f"{where}: variants names {', '.join(map(repr, twice))} more than "
                          "once; list each variant once (a zoo holds one copy of each)")
    return names


def _parse_compressors(tables: Mapping[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """The ``[compressors.<name>]`` tables: options passed to each compressor's factory."""
    for compressor, options in tables.items():
        if not isinstance(options, dict):
            raise ConfigError(
                f"{where}: compressors.{compressor} must be a table of options "
                f"([compressors.{compressor}]), got {options!r}"
            )
    return {name: dict(options) for name, options in tables.items()}
