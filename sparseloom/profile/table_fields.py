"""The profile table's file format: its version, file names and per-task array fields
(``docs/profile.md``, *Files*)."""

from __future__ import annotations

import numpy as np

FORMAT_VERSION = 1
JSON_NAME = "profile.json"
NPZ_NAME = "profile.npz"

#: Per-task array fields stored in the NPZ, with their dtypes.
ARRAY_FIELDS: dict[str, type] = {
    "variant_levels": np.float64,
    "source_accuracy": np.float64,
    "latency_ms": np.float64,
    "latency_spread_ms": np.float64,
    "compile_ms": np.float64,
    "load_ms": np.float64,
    "memory_bytes": np.int64,
    "handoff_ms": np.float64,
    "accuracy_estimated": np.float32,
    "accuracy_measured": np.float32,
    "fidelity_error": np.float64,
    "latency_median_ms": np.float64,
    "chain_fit": np.float64,
    "numerics_error": np.float64,
    "served_accuracy": np.float32,
    "latency_cold_ms": np.float64,
}

#: Fields a table may lack (written by older versions); they get their documented defaults.
OPTIONAL_FIELDS = frozenset({"fidelity_error", "latency_median_ms", "chain_fit",
                             "numerics_error", "served_accuracy", "latency_cold_ms"})

__all__ = ["ARRAY_FIELDS", "FORMAT_VERSION", "JSON_NAME", "NPZ_NAME", "OPTIONAL_FIELDS"]
