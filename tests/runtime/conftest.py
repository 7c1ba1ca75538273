"""Fixtures of the runtime tests: the ``tiny`` workload and a two-task file workload, each with
a small zoo (S = 2, four variants) and a fast profile, built once and cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparseloom.profile.builder import ProfileOptions, build_profile
from sparseloom.profile.measure import ProfilerConfig
from sparseloom.zoo.options import ZooOptions

#: The zoo of the profiler tests (shared cache): S = 2 positions × V = 4 variants.
VARIANTS = ("dense", "unstructured-0.5", "structured-0.5", "unstructured-0.9")
FAST = ProfilerConfig(warmup=1, repeats=3)
#: The processors the runtime tests profile and serve on: the default set's, with OpenVINO in
#: f32 (the default set computes bf16 on a bf16 CPU), so that a served answer equals plain
#: ONNX Runtime's within f32 rounding, the oracle these tests check answers against.
F32_PROCESSORS = ("ov:CPU", "ort:CPU")


def _profiled(workload: Any) -> Any:
    from sparseloom.zoo.build import build_zoo

    zoos = {task.name: build_zoo(task, ZooOptions(subgraphs=2, variants=VARIANTS),
                                 progress=False) for task in workload.tasks}
    return build_profile(workload, processors=F32_PROCESSORS, zoos=zoos,
                         options=ProfileOptions(config=FAST, samples=8), progress=False)


@pytest.fixture(scope="session")
def tiny() -> tuple[Any, Any]:
    """(workload, profile) of ``tiny``."""
    from sparseloom.workload.load import load_workload

    workload = load_workload("tiny", progress=False)
    return workload, _profiled(workload)


@pytest.fixture(scope="session")
def two_tasks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """(workload, profile) of a file workload with two digit tasks (tiny's model and data)."""
    from sparseloom.workload.load import load_workload

    # every row of tiny's eval set; each task of the pair then holds its own rows out
    task = load_workload("tiny", progress=False, held_out=0).task("tiny")
    folder: Path = tmp_path_factory.mktemp("two_tasks")
    rows = {"a": slice(0, 180), "b": slice(180, 360)}
    lines = ['name = "pair"', 'processors = ["ov:CPU", "ort:CPU"]']
    for name, part in rows.items():
        arrays = {key: np.asarray(value)[part] for key, value in task.eval_inputs.items()}
        np.savez(folder / f"eval_{name}.npz", labels=task.labels[part], **arrays)
        lines += ["[[task]]", f'name = "digits_{name}"', f'model = "{task.model_path}"',
                  f'data = "eval_{name}.npz"']
    (folder / "pair.toml").write_text("\n".join(lines) + "\n")
    workload = load_workload(str(folder / "pair.toml"), progress=False)
    return workload, _profiled(workload)
