"""Spoken digit strings synthesised with Debian's ``espeak-ng`` (for the ``speech`` task).

Utterances that share a voice, speed and pitch are synthesised in one ``espeak-ng`` call as
SSML with long breaks between them, and cut apart at those breaks; a call whose cut does not
give one piece per utterance is redone one utterance per call. Audio is decimated from
espeak's 22 050 Hz to :data:`SAMPLE_RATE`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sparseloom.core.errors import MissingDataError

ESPEAK_RATE = 22050
DECIMATION = 3
#: Sample rate of the synthesised audio, in Hz.
SAMPLE_RATE = ESPEAK_RATE // DECIMATION
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: A break between utterances is at least this long (within one, pauses are far shorter).
_BREAK_MS = 900
_MIN_GAP_S = 0.3
_SILENCE = 2  # |int16 sample| at or below this is silence


def espeak_binary() -> str:
    """The ``espeak-ng`` executable; :class:`MissingDataError` with the install line if absent."""
    found = shutil.which("espeak-ng")
    if found is None:
        raise MissingDataError(
            "espeak-ng is not installed; the speech task synthesises its audio with it. Run "
            "`sudo apt-get install -y espeak-ng` (or `make system-deps`)"
        )
    return found


def _lowpass_kernel(taps: int = 63) -> np.ndarray:
    cutoff = 0.9 / DECIMATION  # fraction of the Nyquist frequency
    n = np.arange(taps) - (taps - 1) / 2
    kernel = cutoff * np.sinc(cutoff * n) * np.hamming(taps)
    return (kernel / kernel.sum()).astype(np.float32)


_KERNEL = _lowpass_kernel()


def _run(voice: str, speed: int, pitch: int, text: str, ssml: bool) -> np.ndarray:
    # Text is passed as one argv item (no shell), so digits and SSML need no escaping.
    command = [espeak_binary(), "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout"]
    if ssml:
        command.append("-m")
    result = subprocess.run([*command, text], capture_output=True, check=True, timeout=120)
    raw = result.stdout
    start = raw.find(b"data") + 8  # skip the RIFF header (its sizes are not filled in)
    return np.frombuffer(raw[start : start + (len(raw) - start) // 2 * 2], dtype="<i2")


def _split(samples: np.ndarray, count: int) -> list[np.ndarray] | None:
    loud = np.abs(samples.astype(np.int32)) > _SILENCE
    if not loud.any():
        return None
    edges = np.flatnonzero(np.diff(loud.astype(np.int8)))
    # Loud runs as [start, stop) pairs.
    starts: list[int] = [0] if loud[0] else []
    stops: list[int] = []
    for edge in edges:
        (stops if loud[edge] else starts).append(int(edge) + 1)
    if loud[-1]:
        stops.append(len(samples))
    pieces: list[list[int]] = []
    for start, stop in zip(starts, stops, strict=True):
        if pieces and start - pieces[-1][1] < _MIN_GAP_S * ESPEAK_RATE:
            pieces[-1][1] = stop
        else:
            pieces.append([start, stop])
    if len(pieces) != count:
        return None
    return [samples[a:b] for a, b in pieces]


def _decimate(samples: np.ndarray) -> np.ndarray:
    audio = samples.astype(np.float32) / 32768.0
    return np.convolve(audio, _KERNEL, mode="same")[::DECIMATION].astype(np.float32)


def _ssml(texts: Sequence[str], prosody: Sequence[tuple[int, int]]) -> str:
    spoken = "".join(
        f'<prosody rate="{rate}%" pitch="{pitch:+d}%">{text}</prosody>'
        f'<break time="{_BREAK_MS}ms"/>'
        for text, (rate, pitch) in zip(texts, prosody, strict=True)
    )
    return f"<speak>{spoken}</speak>"


def synthesise_group(
    voice: str, speed: int, pitch: int, digit_strings: Sequence[str],
    prosody: Sequence[tuple[int, int]] | None = None,
) -> list[np.ndarray]:
    """Audio (float32 at :data:`SAMPLE_RATE`, silence trimmed) of each digit string.

    ``prosody`` gives each string its own (rate %, pitch change %) on top of the voice's
    ``speed`` (words per minute) and ``pitch`` (0–99).
    """
    texts = [" ".join(DIGIT_WORDS[int(d)] for d in digits) for digits in digit_strings]
    prosody = list(prosody or [(100, 0)] * len(texts))
    pieces = _split(_run(voice, speed, pitch, _ssml(texts, prosody), ssml=True), len(texts))
    if pieces is None:
        pieces = []
        for text, one in zip(texts, prosody, strict=True):
            single = _split(_run(voice, speed, pitch, _ssml([text], [one]), ssml=True), 1)
            if single is None:
                raise MissingDataError(
                    f"espeak-ng gave no audio for {text!r} with voice {voice}; check that "
                    f"`espeak-ng -v {voice} hello` speaks, or reinstall espeak-ng-data")
            pieces.extend(single)
    return [_decimate(piece) for piece in pieces]


def synthesise(groups: Sequence[tuple[Any, ...]], *, workers: int = 4,
               progress: bool = False, desc: str = "speech: synthesis") -> list[list[np.ndarray]]:
    """Synthesise many groups (the arguments of :func:`synthesise_group`) concurrently.

    espeak-ng spends most of a short call starting up, not computing, so a few concurrent
    calls finish far sooner than one after another even on two cores.
    """
    from sparseloom.plugins.workloads._common import progress_bar

    espeak_binary()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(synthesise_group, *group) for group in groups]
        return [f.result() for f in progress_bar(futures, total=len(futures), desc=desc,
                                                 enabled=progress)]
