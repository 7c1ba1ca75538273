"""``vision``: image classification (stands in for ResNet-101 on ImageNet).

Data: Fashion-MNIST (Zalando; 28×28 greyscale photos of clothing, 10 classes) from Debian's
``dataset-fashion-mnist`` package; a seeded subset of the 60k training images trains the
model, a seeded subset of the 10k test images is the eval set. Model: a small ResNet (3×3
stem, four residual blocks at 14×14 and 7×7, global average pool, linear head), trained
here.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.plugins.workloads._builder import bundled_builder
from sparseloom.plugins.workloads._ranges import EVAL_ROWS, TRAINING, WIDTH
from sparseloom.workload.arguments import OptionRange

#: Where Debian's ``dataset-fashion-mnist`` package installs the IDX files.
DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
DEBIAN_PACKAGE = "dataset-fashion-mnist"
CLASSES = ("t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle boot")

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "train_samples": 16000,
    "eval_samples": 2000,
    "calibration_samples": 128,
    "epochs": 2,
    "batch_size": 128,
    "lr": 0.006,
    "stem_channels": 16,
    "stages": [[24, 2], [24, 1], [48, 2], [48, 1]],
}


def read_idx(path: Path) -> Any:
    """An IDX (MNIST format) array from a ``.gz`` file."""
    import numpy as np

    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_fashion_mnist(split: str) -> tuple[Any, Any]:
    """Images ``[N, 1, 28, 28]`` float32 (standardised) and labels ``[N]`` int64."""
    import numpy as np

    from sparseloom.plugins.workloads._common import require_file

    prefix = "train" if split == "train" else "t10k"
    images = read_idx(require_file(DATA_DIR / f"{prefix}-images-idx3-ubyte.gz",
                                   package=DEBIAN_PACKAGE, apt=True))
    labels = read_idx(require_file(DATA_DIR / f"{prefix}-labels-idx1-ubyte.gz",
                                   package=DEBIAN_PACKAGE, apt=True))
    # Fashion-MNIST pixel mean 0.286 and std 0.353 (on [0, 1]).
    scaled = (images.astype(np.float32) / 255.0 - 0.286) / 0.353
    return scaled[:, None], labels.astype(np.int64)


def _build(config: Mapping[str, Any], out_dir: Path, progress: bool) -> dict[str, Any]:
    """Train the Fashion-MNIST ResNet and write its task files into ``out_dir``."""
    import numpy as np

    from sparseloom.plugins.workloads import _common
    from sparseloom.plugins.workloads._nets import ResNet2d

    generator, rng = _common.seeded_generators(config["seed"])
    train_images, train_labels = load_fashion_mnist("train")
    test_images, test_labels = load_fashion_mnist("test")
    train_pick = rng.permutation(len(train_labels))
    chosen = train_pick[: config["train_samples"]]
    calibration = train_images[train_pick[-config["calibration_samples"]:]]
    eval_pick = np.sort(rng.permutation(len(test_labels))[: config["eval_samples"]])
    eval_images, eval_labels = test_images[eval_pick], test_labels[eval_pick]

    stages = [tuple(stage) for stage in config["stages"]]
    model = ResNet2d(1, config["stem_channels"], stages, num_classes=len(CLASSES))
    trained = _common.train_and_export_classifier(
        out_dir, model, "image", (train_images[chosen], train_labels[chosen]),
        (eval_images, eval_labels), calibration, config,
        generator=generator, progress=progress, desc="vision: training",
    )
    return {
        **trained,
        "description": "Fashion-MNIST 28×28 clothing photos, 10 classes; small ResNet "
        "(stands in for ResNet-101 on ImageNet)",
        "classes": list(CLASSES),
    }


def _stages_problem(config: Mapping[str, Any]) -> str | None:
    stages = config["stages"]
    if not stages or not all(isinstance(s, list | tuple) and len(s) == 2
                             and all(type(v) is int for v in s) for s in stages):
        return (f"option stages = {stages!r} must be a non-empty list of [channels, stride] "
                f"pairs, e.g. [[24, 2], [48, 2]]")
    return None


BUILDER = bundled_builder(
    "vision", _build, DEFAULTS, version="1",
    description="Fashion-MNIST image classification with a small ResNet",
    ranges={
        "train_samples": OptionRange(1, 60_000, why="Fashion-MNIST has 60,000 training images"),
        "eval_samples": OptionRange(EVAL_ROWS.low, 10_000,
                                    why="Fashion-MNIST has 10,000 test images"),
        "calibration_samples": OptionRange(TRAINING["calibration_samples"].low, 60_000,
                                           why="taken from the training images"),
        "stem_channels": WIDTH,
        "stages": OptionRange(1, 1024, why="each stage is [channels, stride]"),
    },
    check=_stages_problem,
)
