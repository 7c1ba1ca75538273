"""``speech``: spoken digit-string recognition with CTC (stands in for wav2vec2 on speech).

Data: strings of 2–5 digits spoken by Debian's ``espeak-ng`` in eight English accents, with
many voice variants, speeds and pitches, each placed at a random offset in a fixed-length
window with background noise at a random SNR. Eval utterances use voice variants held out of
training. Model: raw ``audio`` in; a fixed spectral front end (windowed DFT as a strided
convolution, mel filterbank, log), a strided convolution, residual 1-D convolution blocks and
a per-frame classifier over blank + 10 digits, trained here with CTC. Metric: ``ctc_accuracy``
(1 − digit error rate, greedy decoding).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseloom.core.errors import WorkloadBuildError
from sparseloom.plugins.workloads._builder import bundled_builder
from sparseloom.plugins.workloads._ranges import EVAL_ROWS, WIDTH
from sparseloom.workload.arguments import OptionRange

ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp",
           "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
TRAIN_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "f1", "f2", "f3", "f4", "adam", "Andy",
                  "Annie", "aunty", "david", "ed", "john", "linda", "max", "paul", "robert",
                  "steph", "klatt", "klatt2", "croak", "Alicia", "Lee")
#: Voice variants heard only in the eval set.
TEST_VARIANTS = ("m7", "m8", "f5", "Alex", "Gene", "iven", "Michael", "quincy")

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "train_utterances": 2400,
    "eval_utterances": 400,
    "calibration_samples": 64,
    "utterances_per_call": 16,
    "train_offsets": 1,
    "window_s": 2.0,
    "min_digits": 2,
    "max_digits": 5,
    "channels": 64,
    "blocks": 5,
    "epochs": 8,
    "batch_size": 32,
    "lr": 0.005,
}


def _groups(count: int, variants: tuple[str, ...], per_call: int, config: Mapping[str, Any],
            rng: Any) -> list[tuple[Any, ...]]:
    groups = []
    for _ in range((count + per_call - 1) // per_call):
        voice = f"{rng.choice(ACCENTS)}+{rng.choice(variants)}"
        digits = [
            "".join(str(d) for d in rng.integers(
                0, 10, size=rng.integers(config["min_digits"], config["max_digits"] + 1)))
            for _ in range(per_call)
        ]
        prosody = [(int(rng.integers(80, 126)), int(rng.integers(-30, 31)))
                   for _ in range(per_call)]
        groups.append((voice, int(rng.integers(150, 211)), int(rng.integers(30, 71)), digits,
                       prosody))
    return groups


def _place(audio: list[Any], copies: int, window: int, rng: Any) -> Any:
    """Each clip at ``copies`` random offsets in a window, random gain, noise at 15–40 dB SNR."""
    import numpy as np

    out = np.zeros((len(audio) * copies, window), dtype=np.float32)
    for i, clip in enumerate(audio * copies):
        clip = clip[:window]
        offset = int(rng.integers(0, window - len(clip) + 1))
        out[i, offset : offset + len(clip)] = clip * rng.uniform(0.3, 1.0)
        power = float(np.mean(out[i] ** 2)) + 1e-12
        snr_db = rng.uniform(15, 40)
        out[i] += rng.normal(0, np.sqrt(power / 10 ** (snr_db / 10)), window).astype(np.float32)
    return out


def synthesise_set(count: int, variants: tuple[str, ...], config: Mapping[str, Any], rng: Any,
                   progress: bool, desc: str) -> tuple[list[Any], list[str]]:
    """``count`` utterances that fit the window, with their digit strings."""
    from sparseloom.plugins.workloads import _espeak

    window = int(config["window_s"] * _espeak.SAMPLE_RATE)
    # ~10% spare: the slowest long strings do not fit the window and are dropped.
    groups = _groups(count + count // 10 + 1, variants, config["utterances_per_call"], config,
                     rng)
    audio, texts = [], []
    synthesised = _espeak.synthesise(groups, progress=progress, desc=desc)
    for group, clips in zip(groups, synthesised, strict=True):
        for digits, clip in zip(group[3], clips, strict=True):
            if len(clip) <= window:
                audio.append(clip)
                texts.append(digits)
    if len(audio) < count:
        raise WorkloadBuildError(
            f"speech builder: only {len(audio)} of {count} utterances fit the window of "
            f"{config['window_s']} s; raise the task option window_s or lower max_digits")
    return audio[:count], texts[:count]


def _labels(texts: list[str], copies: int, width: int) -> Any:
    import numpy as np

    labels = np.full((len(texts) * copies, width), -1, dtype=np.int64)
    for i, digits in enumerate(texts * copies):
        labels[i, : len(digits)] = [int(d) + 1 for d in digits]  # token 0 is the CTC blank
    return labels


def _build(config: Mapping[str, Any], out_dir: Path, progress: bool) -> dict[str, Any]:
    """Synthesise the digit strings, train the CTC model, write its task files to ``out_dir``."""
    import torch

    from sparseloom.plugins.workloads import _common, _espeak
    from sparseloom.plugins.workloads._speech_model import FeatureAugment, SpeechModel, ctc_loss
    from sparseloom.workload.metrics import ctc_accuracy

    generator, rng = _common.seeded_generators(config["seed"])
    window = int(config["window_s"] * _espeak.SAMPLE_RATE)
    train_audio, train_texts = synthesise_set(
        config["train_utterances"], TRAIN_VARIANTS, config, rng, progress, "speech: voices")
    eval_audio, eval_texts = synthesise_set(
        config["eval_utterances"], TEST_VARIANTS, config, rng, progress, "speech: eval voices")
    train_x = _place(train_audio, config["train_offsets"], window, rng)
    train_y = _labels(train_texts, config["train_offsets"], config["max_digits"])
    eval_x = _place(eval_audio, 1, window, rng)
    eval_y = _labels(eval_texts, 1, config["max_digits"])

    model = SpeechModel(_espeak.SAMPLE_RATE, config["channels"], config["blocks"])
    with torch.no_grad():  # the front end is fixed: compute its features once for training
        features = torch.cat([model.frontend(torch.from_numpy(train_x[s : s + 256]))
                              for s in range(0, len(train_x), 256)])
    _common.train_from_config(
        torch.nn.Sequential(FeatureAugment(), model.body), [features],
        torch.from_numpy(train_y), config, loss_fn=ctc_loss,
        generator=generator, progress=progress, desc="speech: training",
    )
    model.eval()
    torch_metric = ctc_accuracy(_common.predict(model, [torch.from_numpy(eval_x)]), eval_y)
    example = {"audio": torch.from_numpy(train_x[:2])}
    calibration = train_x[rng.permutation(len(train_x))[: config["calibration_samples"]]]
    _common.export_task(out_dir, model, example, {"audio": eval_x}, eval_y,
                        {"audio": calibration})
    return {
        "metric": "ctc_accuracy",
        "torch_metric": torch_metric,
        "description": "spoken digit strings (espeak-ng, held-out voices); conv CTC model on "
        "raw audio (stands in for wav2vec2)",
        "sample_rate_hz": _espeak.SAMPLE_RATE,
        "train_examples": len(train_x),
    }


BUILDER = bundled_builder(
    "speech", _build, DEFAULTS, version="1",
    description="spoken digit strings (espeak-ng) recognised by a conv CTC model on raw audio",
    ranges={
        "train_utterances": OptionRange(1, 100_000, why="utterances synthesised to train on"),
        "eval_utterances": EVAL_ROWS,
        "utterances_per_call": OptionRange(1, 1000, why="utterances per espeak-ng call"),
        "train_offsets": OptionRange(1, 100, why="copies of each utterance at random offsets"),
        "window_s": OptionRange(0.5, 60, why="seconds of audio per row"),
        "min_digits": OptionRange(1, 20, why="digits per utterance"),
        "max_digits": OptionRange(1, 20, why="digits per utterance"),
        "channels": WIDTH,
        "blocks": OptionRange(1, 64, why="convolution blocks"),
    },
    check=lambda config: (None if config["min_digits"] <= config["max_digits"] else
                          f"option min_digits = {config['min_digits']} is above max_digits = "
                          f"{config['max_digits']}; lower it or raise max_digits"),
)
