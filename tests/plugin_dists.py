"""Build real (unpacked) distributions with entry-point metadata for plugin-loading tests.

A folder holding ``<name>-<version>.dist-info/{METADATA,entry_points.txt}`` next to the code is
what ``pip install`` leaves in site-packages; ``importlib.metadata`` finds it on ``sys.path``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_PLUGIN = REPO / "examples" / "sparseloom-example-plugin"


def make_distribution(
    root: Path,
    name: str,
    entry_points: Mapping[str, str],
    modules: Mapping[str, str] | None = None,
    version: str = "0.1.0",
) -> Path:
    """Write modules and a dist-info declaring ``entry_points`` in group ``sparseloom``."""
    root.mkdir(parents=True, exist_ok=True)
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(source)
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[sparseloom]\n{lines}")
    return root


def install_example_plugin(root: Path) -> Path:
    """Lay out the example plugin package as an installed distribution under ``root``."""
    package = "sparseloom_example_plugin"
    shutil.copytree(EXAMPLE_PLUGIN / package, root / package)
    return make_distribution(root, "sparseloom-example-plugin", {"example": package})
