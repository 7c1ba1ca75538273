"""``tiny``: handwritten-digit classification (8×8) with a small ResNet; builds in seconds.

Data: scikit-learn's bundled ``load_digits`` (1797 real 8×8 scans of handwritten digits, 10
classes), a stratified 80/20 train/eval split. Model: a 3×3 stem and three residual blocks
(≈ 30k parameters). Meant for fast tests of the whole pipeline, not as a benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.plugins.workloads._builder import bundled_builder
from sparseloom.workload.arguments import OptionRange

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "epochs": 6,
    "batch_size": 64,
    "lr": 0.005,
    "eval_fraction": 0.2,
    "calibration_samples": 64,
    "width": 16,
}


def _build(config: Mapping[str, Any], out_dir: Path, progress: bool) -> dict[str, Any]:
    """Train the tiny digits CNN and write its task files into ``out_dir``."""
    import numpy as np
    from sklearn.datasets import load_digits

    from sparseloom.plugins.workloads import _common
    from sparseloom.plugins.workloads._nets import ResNet2d

    generator = _common.seed_everything(config["seed"])
    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0 - 0.5)[:, None]  # [N, 1, 8, 8]
    labels = digits.target.astype(np.int64)
    train_index, eval_index = _common.stratified_split(
        labels, config["eval_fraction"], config["seed"]
    )
    width = config["width"]
    model = ResNet2d(1, width, [(width, 1), (2 * width, 2), (2 * width, 1)], num_classes=10)
    trained = _common.train_and_export_classifier(
        out_dir, model, "image", (images[train_index], labels[train_index]),
        (images[eval_index], labels[eval_index]),
        images[train_index][: config["calibration_samples"]], config,
        generator=generator, progress=progress, desc="tiny: training",
    )
    return {
        **trained,
        "description": "8×8 handwritten digits (scikit-learn load_digits), small ResNet",
    }


BUILDER = bundled_builder(
    "tiny", _build, DEFAULTS, version="1",
    description="8×8 handwritten digits (scikit-learn load_digits), small ResNet; seconds",
    ranges={
        # 5 % of the ~180 digits of a class is 9: both parts keep rows of every class.
        "eval_fraction": OptionRange(0.05, 0.95, why="the share of the 1797 digits held out "
                                                      "for evaluation"),
        "width": OptionRange(1, 256, why="channels of the first stage"),
    },
)
