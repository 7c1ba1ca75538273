"""``import sparseloom`` and building the registry stay light: no heavy runtime is imported."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("openvino", "onnxruntime", "torch", "xgboost", "lightgbm", "tensorrt", "transformers")


def _imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    modules = set(result.stdout.split())
    return {name for name in HEAVY if name in modules}


def test_import_sparseloom_is_light():
    assert _imported_after("import sparseloom") == set()


def test_registry_with_all_builtin_plugins_is_light():
    code = "from sparseloom.core.registry import create_registry\ncreate_registry(autoload=False)"
    assert _imported_after(code) == set()


def test_cli_help_is_light():
    code = "import sparseloom.cli"
    assert _imported_after(code) == set()
