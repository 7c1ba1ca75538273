"""Exact metrics of stitched variants, measured once per zoo and shared by every step.

Building a zoo measures the originals; the Pareto analysis, the profile's training samples and
the validation's ground truth measure stitched variants of the same zoo on the same eval data.
Each of them reads and extends one store, so no variant is measured twice. A store lives in the
zoo's folder (``metrics/<key>.json``); its key hashes what a measured metric depends on: the
eval inputs and labels, the metric, the evaluation processor's name and the eval rows used.
Updates are merged under a file lock and written atomically, so concurrent runs lose nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.cache import cache_notice, config_hash, file_lock

STORE_FOLDER = "metrics"


def _encode(choices: tuple[int, ...]) -> str:
    return ",".join(map(str, choices))


def _decode(text: str) -> tuple[int, ...]:
    return tuple(int(c) for c in text.split(","))


@attrs.define
class MetricStore:
    """One zoo's measured metrics for one (eval data, metric, processor, rows) key.

    Attributes:
        path: the JSON file (``{"key": {...}, "metrics": {"3,7": 0.81, ...}}``).
        key: what the metrics depend on (written into the file for inspection).
    """

    path: Path
    key: Mapping[str, Any] = attrs.field(factory=dict)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) and isinstance(data.get("metrics"), dict) else {}
        except PermissionError:
            cache_notice(f"cannot read the metric store {self.path} (permission denied); its "
                         f"metrics are measured again. Give your group read access to the "
                         f"cache (chmod -R g+rwX), or use a cache of your own "
                         f"(SPARSELOOM_CACHE_DIR)")
            return {}
        except (OSError, ValueError):
            return {}

    def load(self) -> dict[tuple[int, ...], float]:
        """Every stored metric by choices (empty when none is stored or the file is unreadable)."""
        try:
            return {_decode(k): float(v) for k, v in self._read().get("metrics", {}).items()}
        except (ValueError, TypeError):
            return {}

    def seconds_per_pass(self) -> float | None:
        """Mean wall time of one subgraph pass over the eval rows, over everything stored."""
        data = self._read()
        passes = data.get("passes") or 0
        return float(data.get("seconds", 0.0)) / passes if passes else None

    def add(self, metrics: Mapping[tuple[int, ...], float], *, seconds: float = 0.0,
            passes: int = 0) -> None:
        """Merge ``metrics`` (measured with ``passes`` subgraph passes in ``seconds``) into the
        store; a read-only cache is left as it was."""
        if not metrics:
            return
        try:
            with file_lock(self.path.with_name(self.path.name + ".lock")):
                data = self._read()
                merged = self.load() | {tuple(k): float(v) for k, v in metrics.items()}
                handle, temporary = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
                # mkstemp makes the file private (0600): a group-shared cache would then be
                # unreadable to the others, who would measure and replace it again.
                os.fchmod(handle, shared_file_mode(self.path))
                with os.fdopen(handle, "w") as stream:
                    json.dump({"key": dict(self.key),
                               "seconds": float(data.get("seconds", 0.0)) + float(seconds),
                               "passes": int(data.get("passes", 0)) + int(passes),
                               "metrics": {_encode(k): v for k, v in sorted(merged.items())}},
                              stream)
                os.replace(temporary, self.path)
        except OSError:
            return


def shared_file_mode(path: Path) -> int:
    """The permission bits for a file written at ``path``: its folder's without the execute
    bits, so a cache folder shared with a group (``rwxrwsr-x``) keeps files the group reads and
    writes (``rw-rw-r--``), and a private one keeps private files."""
    try:
        return os.stat(path.parent).st_mode & 0o666
    except OSError:
        return 0o644


def metric_store(zoo: Any, task: Any, processor: str,
                 rows: np.ndarray | None = None) -> MetricStore:
    """The store of ``zoo``'s metrics measured on ``task``'s eval data (``rows`` of it) on
    ``processor``."""
    from sparseloom.zoo.options import arrays_hash

    labels = getattr(task, "labels", None)
    key = {
        "eval": arrays_hash(task.eval_inputs),
        "labels": arrays_hash({"labels": np.asarray(labels)}) if labels is not None else None,
        "metric": str(getattr(task, "metric", "")),
        "processor": str(processor),
        "rows": None if rows is None else arrays_hash({"rows": np.asarray(rows, np.int64)}),
        "row_count": None if rows is None else int(np.asarray(rows).size),
    }
    return MetricStore(Path(zoo.directory) / STORE_FOLDER / f"{config_hash(key)}.json", key)
