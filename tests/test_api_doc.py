"""docs/api.md's script runs as written and prints the best stitched variant of ``tiny``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def _script() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/api.md holds no python block"
    return blocks[0]


def test_public_api_is_documented() -> None:
    import sparseloom

    text = DOC.read_text()
    missing = [name for name in sparseloom.__all__
               if name != "__version__" and f"sparseloom.{name}(" not in text]
    assert not missing, f"docs/api.md does not document {missing}"


@pytest.mark.slow
def test_api_doc_script_runs_as_written() -> None:
    result = subprocess.run([sys.executable, "-c", _script()], capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"tiny: best stitched variant \[(\d+), (\d+)\] = \[", result.stdout)
    assert match, result.stdout
    accuracy = float(re.search(r"accuracy (\d\.\d+)", result.stdout).group(1))
    assert 0.9 < accuracy <= 1.0  # tiny's dense model scores ~0.98; the best is at least close
    assert re.search(r"plan: tiny runs \[\d+, \d+\] on \('(ov|ort):CPU', '(ov|ort):CPU'\)",
                     result.stdout), result.stdout
    assert "served 100/100 requests" in result.stdout, result.stdout
