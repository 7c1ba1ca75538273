"""Distributions with entry-point metadata for plugin-loading tests.

:func:`make_distribution` writes an unpacked one (a ``<name>-<version>.dist-info`` folder next
to the code, what ``pip install`` leaves in site-packages) for plugins that exist only in a
test; :func:`install_example_plugin` builds the real example plugin into a wheel offline and
installs it with pip into a target folder. ``importlib.metadata`` finds both on ``sys.path``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
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


@functools.cache
def example_plugin_wheel() -> Path:
    """The example plugin built into a wheel, offline, against the installed setuptools.

    The source is copied first so the build leaves nothing in the repository.
    """
    work = Path(tempfile.mkdtemp(prefix="sparseloom-example-wheel-"))
    source = work / "src"
    shutil.copytree(EXAMPLE_PLUGIN, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "--quiet", "--wheel-dir", str(work / "dist"), str(source)],
                   check=True, capture_output=True, text=True)
    [wheel] = (work / "dist").glob("sparseloom_example_plugin-*.whl")
    return wheel


def install_example_plugin(root: Path) -> Path:
    """``pip install`` the example plugin's wheel into ``root`` (put ``root`` on the path)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--quiet", "--target", str(root), str(example_plugin_wheel())],
                   check=True, capture_output=True, text=True)
    return root
