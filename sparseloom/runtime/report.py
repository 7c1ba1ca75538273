"""Rendering a :class:`~sparseloom.runtime.summary.RunSummary` as text or JSON-ready data."""

from __future__ import annotations

import math
from typing import Any

import attrs

from sparseloom.runtime.summary import RunSummary


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.1%}"


def _busy(name: str, own: float, lent: float) -> str:
    """A processor's share of the wall time in its own model calls, and in calls it lent its
    cores to (another processor's wide stages): ``ort:CPU 42% (+50% lent, 92% busy)``."""
    if not lent:
        return f"{name} {own:.0%}"
    return f"{name} {own:.0%} (+{lent:.0%} lent, {own + lent:.0%} busy)"


def as_json(summary: RunSummary) -> dict[str, Any]:
    """The summary as JSON-ready data (NaN becomes ``None``)."""
    def clean(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    data = clean(attrs.asdict(summary))
    for task, result in zip(data["tasks"], summary.tasks, strict=True):
        task["met"] = result.met
    return data


def render(summary: RunSummary) -> str:
    """The summary as the text ``sparseloom run`` prints."""
    s = summary.settings
    lines = ["=" * 78, "sparseloom run summary", "=" * 78,
             f"scenario      : {summary.scenario} ({_load_text(summary)})",
             f"workload      : {s.get('workload')}   policy: {s.get('policy')}   processors: "
             f"{', '.join(s.get('processors', []))}",
             f"arrival order : {', '.join(s.get('arrival_order') or []) or 'all at once'}"
             + (f" (next joins after {s['join_after']} requests)" if s.get("join_after") else ""),
             f"result        : {'VALID' if summary.valid else 'INVALID'}"]
    lines += [f"  reason      : {reason}" for reason in summary.reasons]
    rows = []
    for t in summary.tasks:
        rows.append([t.task, f"{t.slo_accuracy:.3f} / {t.slo_latency_ms:.2f}",
                     t.variant, f"{t.accuracy_measured:.4f}", f"{t.accuracy_profile:.4f}",
                     _ms(t.latency.p50_ms), _ms(t.latency.p90_ms), _ms(t.latency.p99_ms),
                     _ms(t.latency.mean_ms), f"{t.throughput_rps:.1f}",
                     f"{t.completed}/{t.submitted}", f"MISSED {t.violated}" if t.violated
                     else "met"])
    lines += ["", _table(
        ["task", "SLO acc / ms", "variant @ processors (final)", "measured", "profile",
         "p50 ms", "p90 ms", "p99 ms", "mean ms", "req/s", "done", "SLO"], rows)]
    for t in summary.tasks:
        if len(t.served) > 1:
            lines.append(f"  {t.task} served: " + "; ".join(
                f"{route} x{count}" for route, count in t.served.items()))
    m = summary.memory
    lines += [
        "",
        f"SLO violation rate : {_pct(summary.violation_rate)} of tasks miss accuracy or "
        f"latency ({summary.latency_statistic} decides latency)",
        f"throughput         : {summary.throughput_rps:.1f} req/s over {summary.wall_s:.2f} s; "
        f"pipeline bound {summary.pipeline_bound_rps:.1f} req/s (busiest: "
        f"{summary.busiest_processor}) -> {_pct(summary.pipeline_share)} of it",
        "utilisation        : " + ", ".join(_busy(n, u, summary.lent.get(n, 0.0)) for n, u in
                                             summary.utilisation.items())
        + "".join(f"; {n} ran {k} stage(s) wide on the idle processors' cores"
                  for n, k in summary.wide_stages.items())
        + "".join(f"; {n} ran {k} late stage(s) on its overflow thread"
                  for n, k in summary.overflow_stages.items())
        + "".join(f"; lane {n} ran {k} call(s) on a quiet processor's cores"
                  for n, k in summary.roamed.items()),
        f"switches           : {summary.switches} ({summary.switch_loads} loads, "
        f"{summary.switch_load_ms:.1f} ms compile+load); preload {summary.preload_ms:.1f} ms",
        f"memory             : loaded {_mib(m['loaded_bytes'])}"
        + (f" ({m['loaded_bytes'] / m['weights_bytes']:.2f}x the {_mib(m['weights_bytes'])} of "
           f"weights it holds)" if m.get("weights_bytes") else "")
        + f", RSS growth {_mib(m['rss_growth_bytes'])}, device {_mib(m['device_bytes'])}; "
        f"budget {_mib(m['budget_bytes'])} of {_mib(m['full_bytes'])} full preloading (planned "
        f"{_mib(m['planned_resident_bytes'])})"
        + ("  OVER BUDGET" if m.get("runtime_budget_bytes")
           and m['loaded_bytes'] > m['runtime_budget_bytes'] else "")
        + (f"; {m['left_out']:.0f} preloaded subgraph(s) left out and {m['evicted']:.0f} "
           f"unloaded to stay within it" if m.get("left_out") or m.get("evicted") else ""),
        f"requests           : submitted {summary.submitted} = completed {summary.completed} + "
        f"failed {summary.failed}"
        + ("" if summary.submitted == summary.completed + summary.failed else "  BROKEN")
        + (f"; {summary.rejected} refused (queue full)" if summary.rejected else "")
        + (f"; {summary.injected_faults} faults injected" if summary.injected_faults else "")
        + (f"; down: {', '.join(summary.processors_down)}" if summary.processors_down else ""),
    ]
    lines += [f"note: {note}" for note in summary.notes]
    return "\n".join(lines)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    cells = [headers, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _load_text(summary: RunSummary) -> str:
    s = summary.settings
    if summary.scenario == "poisson":
        text = f"Poisson arrivals, {s.get('rate')} req/s per task"
    else:
        text = "closed loop, one request in flight per task"
    if s.get("queries"):
        text += f", {s['queries']} queries per task"
    if s.get("duration_s"):
        text += f", at most {s['duration_s']} s"
    if s.get("fault_rate"):
        text += f", faults injected at {s['fault_rate']:.1%}"
    return text + ", batch 1"
