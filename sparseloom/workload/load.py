"""Resolve a workload name or TOML path and build (or load from the cache) its tasks."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sparseloom.core.errors import ConfigError, UnknownNameError, UnknownTaskError
from sparseloom.workload.build import build_task
from sparseloom.workload.file import read_workload_file
from sparseloom.workload.held_out import check_held_out, split_held_out
from sparseloom.workload.task import Workload, WorkloadDefinition

__all__ = ["load_workload", "resolve_workload"]


def _looks_like_path(name_or_path: str) -> bool:
    return (
        name_or_path.endswith(".toml")
        or os.sep in name_or_path
        or "/" in name_or_path
        or Path(name_or_path).is_file()
    )


def resolve_workload(name_or_path: str | os.PathLike[str]) -> WorkloadDefinition:
    """The definition of a bundled/registered workload name or of a workload TOML path."""

    text = os.fspath(name_or_path)
    if _looks_like_path(text):
        return read_workload_file(text)
    from sparseloom.core.registry import get_registry

    try:
        registration = get_registry().get_workload(text)
    except UnknownNameError as error:
        raise UnknownNameError(
            f"{error} A workload is a registered name or a path to a workload .toml file."
        ) from None
    made = get_registry().build(registration)
    if isinstance(made, WorkloadDefinition):
        return made
    if isinstance(made, str | os.PathLike):
        return read_workload_file(made, name=text)
    raise ConfigError(
        f"workload {text!r} (plugin {registration.plugin}): its factory returned "
        f"{type(made).__name__}; expected a WorkloadDefinition or a path to a workload TOML"
    )


def load_workload(
    name_or_path: str | os.PathLike[str],
    *,
    tasks: Sequence[str] | None = None,
    progress: bool = True,
    rebuild: bool = False,
    held_out: float | None = None,
) -> Workload:
    """Build (or load from the cache) a workload and return its ready tasks.

    :param name_or_path: a registered workload name (``default``, ``tiny``) or a path to a
        workload TOML file.
    :param tasks: only these tasks (in this order); all by default.
    :param progress: show progress bars (stderr) for long build steps.
    :param rebuild: build the builder tasks again even when their cache entries are sound.
    :param held_out: the share of each task's eval rows held out of selection
        (:mod:`sparseloom.workload.held_out`); ``None``: the workload's (0.3 unless its file
        says otherwise); 0: none.
    :raises UnknownNameError: an unknown workload name.
    :raises UnknownTaskError: a task in ``tasks`` that the workload lacks.
    :raises ConfigError: a malformed workload file or data that does not fit its model.
    :raises MissingDataError: a bundled task whose source package is not installed.
    """

    definition = resolve_workload(name_or_path)
    chosen = list(definition.tasks)
    if tasks is not None:
        by_name = {task.name: task for task in definition.tasks}
        unknown = [name for name in tasks if name not in by_name]
        if unknown:
            raise UnknownTaskError(
                f"workload {definition.name!r} has no task {', '.join(map(repr, unknown))}; "
                f"its tasks: {', '.join(by_name) or 'none'}"
            )
        chosen = [by_name[name] for name in tasks]
    share = definition.held_out if held_out is None else check_held_out(held_out)
    built = tuple(split_held_out(build_task(task, progress=progress, rebuild=rebuild), share)
                  for task in chosen)
    return Workload(
        name=definition.name,
        tasks=built,
        processors=definition.processors,
        source=definition.source,
        description=definition.description,
        variants=definition.variants,
        compressor_options=definition.compressor_options,
        held_out=share,
    )
