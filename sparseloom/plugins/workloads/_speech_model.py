"""The ``speech`` task's model: fixed log-mel front end on raw audio, conv body, CTC head.

Imported only inside the builder (imports torch).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sparseloom.plugins.workloads._nets import ResidualBlock1d

WINDOW_S = 0.035
HOP_S = 0.02
MEL_BINS = 40
#: Output classes: the CTC blank (0) and the digits 0–9 (1–10).
NUM_CLASSES = 11


def mel_filterbank(sample_rate: int, n_fft: int, bins: int) -> np.ndarray:
    """HTK-style triangular mel filters, ``[bins, n_fft // 2 + 1]``."""
    def to_mel(hz: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    def to_hz(mel: np.ndarray) -> np.ndarray:
        return 700.0 * (10 ** (mel / 2595.0) - 1.0)

    edges = to_hz(np.linspace(to_mel(np.array(50.0)), to_mel(np.array(sample_rate / 2)), bins + 2))
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    bank = np.zeros((bins, len(freqs)), dtype=np.float32)
    for i in range(bins):
        low, centre, high = edges[i : i + 3]
        rising = (freqs - low) / (centre - low)
        falling = (high - freqs) / (high - centre)
        bank[i] = np.clip(np.minimum(rising, falling), 0, None)
    return bank


class LogMelFrontend(nn.Module):
    """Raw audio ``[N, samples]`` → per-utterance mean-normalised log-mel ``[N, mels, T]``.

    The short-time DFT is a strided ``Conv1d`` with fixed Hann-windowed cosine and sine
    kernels, so the whole front end exports as plain Conv / Mul / MatMul / Log ONNX ops.
    """

    mel: torch.Tensor  # a buffer (register_buffer), so mypy cannot see its type

    def __init__(self, sample_rate: int) -> None:
        super().__init__()
        n_fft = int(2 ** np.round(np.log2(WINDOW_S * sample_rate)))
        self.hop = int(HOP_S * sample_rate)
        self.bins = n_fft // 2 + 1
        t = np.arange(n_fft)
        k = np.arange(self.bins)[:, None]
        window = np.hanning(n_fft)
        kernels = np.concatenate([np.cos(2 * np.pi * k * t / n_fft) * window,
                                  -np.sin(2 * np.pi * k * t / n_fft) * window])
        self.dft = nn.Conv1d(1, 2 * self.bins, n_fft, stride=self.hop, bias=False)
        self.dft.weight.data = torch.from_numpy(kernels[:, None].astype(np.float32))
        self.register_buffer("mel", torch.from_numpy(mel_filterbank(sample_rate, n_fft, MEL_BINS)))
        for parameter in self.parameters():
            parameter.requires_grad_(False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spectrum = self.dft(audio.unsqueeze(1))
        real, imag = spectrum[:, : self.bins], spectrum[:, self.bins :]
        log_mel = torch.log(torch.matmul(self.mel, real * real + imag * imag) + 1e-6)
        return log_mel - log_mel.mean(dim=2, keepdim=True)


class SpeechBody(nn.Module):
    """Log-mel ``[N, mels, T]`` → per-frame class scores ``[N, T/2, classes]``."""

    def __init__(self, channels: int, blocks: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.BatchNorm1d(MEL_BINS),
            nn.Conv1d(MEL_BINS, channels, 5, stride=2, padding=2, bias=False),
            nn.BatchNorm1d(channels),
            nn.ReLU(),
        )
        self.blocks = nn.Sequential(
            *[ResidualBlock1d(channels, 5, dilation=1 + i % 2) for i in range(blocks)]
        )
        self.head = nn.Conv1d(channels, NUM_CLASSES, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(features))).transpose(1, 2)


class SpeechModel(nn.Module):
    """Raw audio → fixed log-mel front end → trained conv body; CTC scores per frame."""

    def __init__(self, sample_rate: int, channels: int, blocks: int) -> None:
        super().__init__()
        self.frontend = LogMelFrontend(sample_rate)
        self.body = SpeechBody(channels, blocks)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.body(self.frontend(audio))


def ctc_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """CTC loss of ``[N, T, classes]`` scores against ``[N, L]`` tokens padded with -1."""
    log_probs = torch.log_softmax(scores, dim=-1).transpose(0, 1)
    lengths = (labels > 0).sum(dim=1)
    input_lengths = torch.full((scores.shape[0],), scores.shape[1], dtype=torch.long)
    return nn.functional.ctc_loss(log_probs, labels.clamp(min=0), input_lengths, lengths,
                                  blank=0, zero_infinity=True)


class FeatureAugment(nn.Module):
    """Training-only log-mel augmentation for unseen voices (identity in eval mode).

    A random shift along the mel axis (roughly a change of vocal-tract length), then one
    frequency mask and two time masks (SpecAugment).
    """

    def __init__(self, max_shift: int = 3, freq_mask: int = 6, time_mask: int = 10) -> None:
        super().__init__()
        self.max_shift, self.freq_mask, self.time_mask = max_shift, freq_mask, time_mask

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return features
        batch, bins, frames = features.shape
        out = features.clone()
        shifts = torch.randint(-self.max_shift, self.max_shift + 1, (batch,))
        for i in range(batch):
            shift = int(shifts[i])
            if shift > 0:
                out[i, shift:] = features[i, :-shift]
                out[i, :shift] = features[i, :1]
            elif shift < 0:
                out[i, :shift] = features[i, -shift:]
                out[i, shift:] = features[i, -1:]
            width = int(torch.randint(0, self.freq_mask + 1, ()))
            start = int(torch.randint(0, bins - width + 1, ()))
            out[i, start : start + width] = 0.0
            for _ in range(2):
                width = int(torch.randint(0, self.time_mask + 1, ()))
                start = int(torch.randint(0, frames - width + 1, ()))
                out[i, :, start : start + width] = 0.0
        return out
