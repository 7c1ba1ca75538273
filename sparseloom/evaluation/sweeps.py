"""Scale sweeps the paper does not run, on the simulator: T = 16, V = 20, S = 4, P = 4.

Each *case* is a profile: synthetic ones (:func:`~sparseloom.evaluation.synthetic.
synthetic_profile`, one factor scaled up from the paper's setting T = 4, S = 3, V = 10,
P = 3 at a time) and, when a measured profile is given, that profile on a device file's SoC
(:func:`~sparseloom.evaluation.devices.apply_device`; the paper's S = 3, P = 3, T = 4 on the
bundled ``core-ultra-soc``). Every policy is simulated on every case at SLO configurations 0,
12 and 24 (grid corners and middle), tasks joining in file order; a row gives the mean
violation rate, throughput, and the optimizer's time per decision (the policy's wall time in
``plan`` and ``on_feedback`` over the number of decisions).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from sparseloom.core.registry import get_registry
from sparseloom.evaluation.simulator import SimConfig, simulate
from sparseloom.evaluation.synthetic import synthetic_profile
from sparseloom.profile.table import ProfileTable

#: The paper's setting and one factor scaled up at a time (synthetic profiles).
SYNTHETIC_CASES: dict[str, dict[str, Any]] = {
    "T=4 S=3 V=10 P=3": {},
    "T=16": {"tasks": 16},
    "V=20": {"variants": 20},
    "S=4": {"positions": 4},
    "P=4": {"processors": ("CPU", "GPU", "NPU", "DSP")},
}

#: SLO configurations every case is simulated at (grid corners and middle).
SWEEP_SLO_CONFIGS = (0, 12, 24)


def sweep_cases(measured: ProfileTable | None = None, device: Any = None
                ) -> dict[str, ProfileTable]:
    """The sweep's profiles by case name: the synthetic ones, plus ``measured`` on ``device``."""
    from sparseloom.evaluation.devices import apply_device

    cases = {name: synthetic_profile(**options) for name, options in SYNTHETIC_CASES.items()}
    if measured is not None and device is not None:
        cases[f"{measured.workload} on {device.name}"] = apply_device(measured, device)
    return cases


def scale_sweep(cases: dict[str, ProfileTable], policies: Sequence[str] = (), *,
                queries: int = 50, progress: Callable[[str], None] | None = None
                ) -> list[dict[str, Any]]:
    """Simulate every policy (default: every registered one) on every case; one row each."""
    from sparseloom.evaluation.harness import slo_configurations

    names = list(policies) or sorted(r.name for r in get_registry().policies())
    rows = []
    for case, profile in cases.items():
        configs = slo_configurations(profile)
        first = next(iter(profile.tasks.values()))
        for policy in names:
            if progress is not None:
                progress(f"{case}: {policy}")
            started = time.perf_counter()
            results = [simulate(profile, SimConfig(
                policy=policy, slos=configs[k], queries=queries,
                arrival_order=tuple(profile.tasks) if len(profile.tasks) > 1 else ()))
                for k in SWEEP_SLO_CONFIGS]
            decisions = sum(r.switches + 1 for r in results)
            rows.append({
                "case": case, "policy": policy, "tasks": len(profile.tasks),
                "positions": first.n_positions, "variants": len(first.variant_names),
                "processors": len(profile.processors),
                "violation_rate": _mean([r.violation_rate for r in results]),
                "throughput_rps": _mean([r.throughput_rps for r in results]),
                "pipeline_share": _mean([r.pipeline_share for r in results]),
                "decision_ms": 1e3 * sum(r.decision_seconds for r in results) / decisions,
                "decisions": decisions, "wall_s": time.perf_counter() - started,
                "synthetic": bool(profile.meta.get("synthetic", False))})
    return rows


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan
