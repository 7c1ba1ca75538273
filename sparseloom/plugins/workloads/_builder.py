"""How a bundled task builder is declared: :func:`bundled_builder`.

Torch-free: a builder module declares its ``BUILDER`` at import, and reading a workload file
that names the builder imports the module without building anything. Torch and the shared
build steps (:mod:`._common`) are imported only when the recipe runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparseloom.plugins.workloads._ranges import TRAINING
from sparseloom.workload.arguments import OptionRange
from sparseloom.workload.task import TaskBuilder

#: A bundled recipe: ``recipe(config, out_dir, progress)`` writes the task files, returns meta.
Recipe = Callable[[Mapping[str, Any], Path, bool], dict[str, Any]]


def bundled_builder(
    name: str,
    recipe: Recipe,
    defaults: Mapping[str, Any],
    *,
    ranges: Mapping[str, OptionRange],
    **fields: Any,
) -> TaskBuilder:
    """The :class:`TaskBuilder` of a bundled task.

    Its ``build`` runs ``recipe`` inside :func:`._common.torch_threads`. Every common option in
    ``defaults`` gets its range from :data:`._ranges.TRAINING` unless ``ranges`` gives its own;
    ``fields`` are the other :class:`TaskBuilder` fields (``version``, ``description``,
    ``check``).
    """

    def build(config: Mapping[str, Any], out_dir: Path, *, progress: bool = True
              ) -> dict[str, Any]:
        from sparseloom.plugins.workloads import _common

        with _common.torch_threads():
            return recipe(config, out_dir, progress)

    build.__doc__ = recipe.__doc__
    common = {option: TRAINING[option] for option in defaults if option in TRAINING}
    return TaskBuilder(name=name, build=build, defaults=defaults, ranges={**common, **ranges},
                       **fields)
