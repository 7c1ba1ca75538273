"""The live view of ``sparseloom run --duration``: while the load runs, per task its requests/s,
p90 and SLO attainment over its recent requests and the route serving it; per processor its
utilisation and queue (:meth:`sparseloom.Server.stats`).

On a terminal it is a table redrawn in place (rich) :data:`REFRESH_PER_S` times a second and
cleared when the run ends (the summary follows); otherwise one plain line every
:data:`PLAIN_EVERY_S` seconds, so a log file gets a readable trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

#: Redraws per second of the terminal view (each reads ``stats()``: ~1 ms of Python).
REFRESH_PER_S = 2
#: Seconds between the plain lines written when stdout is not a terminal.
PLAIN_EVERY_S = 5.0


def _pct(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


def plain_line(stats: Any) -> str:
    """One line: ``[12 s] vision 30.0/s p90 4.21 ms 98% | ... || ov:CPU 45% q0 | ...``."""
    tasks = " | ".join(
        f"{t.task} {t.requests_per_s:.1f}/s p90 {_ms(t.p90_ms)} ms {_pct(t.attainment)}"
        for t in stats.tasks.values() if t.serving or t.completed)
    processors = " | ".join(
        f"{p.processor} {p.utilisation:.0%} q{p.queued}" + (" DOWN" if p.down else "")
        for p in stats.processors.values())
    return f"[{stats.uptime_s:.0f} s] {tasks} || {processors}"


def _renderable(stats: Any, duration_s: float | None) -> Any:
    from rich.console import Group
    from rich.table import Table

    tasks = Table(title=f"sparseloom run — {stats.uptime_s:.0f} s"
                        + (f" of {duration_s:g} s" if duration_s else "")
                        + f", {stats.completed} served, {stats.failed} failed"
                        + (f", {stats.rejected} refused" if stats.rejected else ""),
                  title_justify="left")
    for header in ("task", "req/s", "p50 ms", "p90 ms", "p99 ms", "SLO ms", "attainment",
                   "queued", "switches", "variant @ processors"):
        tasks.add_column(header, justify="left" if header.startswith(("task", "var")) else
                         "right")
    for t in stats.tasks.values():
        if t.serving or t.completed:
            tasks.add_row(t.task, f"{t.requests_per_s:.1f}", _ms(t.p50_ms), _ms(t.p90_ms),
                          _ms(t.p99_ms), f"{t.slo.latency_ms:g}", _pct(t.attainment),
                          str(t.queued), str(t.switches), t.route)
    processors = Table()
    for header in ("processor", "utilisation", "queued", "stages", "state"):
        processors.add_column(header, justify="left" if header == "processor" else "right")
    for p in stats.processors.values():
        processors.add_row(p.processor, f"{p.utilisation:.0%}", str(p.queued),
                           str(p.stages_run), "DOWN" if p.down else "up")
    return Group(tasks, processors)


@contextlib.contextmanager
def live_view(server: Any, *, terminal: bool, duration_s: float | None = None
              ) -> Iterator[None]:
    """Show ``server``'s live view while the block runs (see the module docstring)."""
    if terminal:
        from rich.live import Live

        with Live(get_renderable=lambda: _renderable(server.stats(), duration_s),
                  refresh_per_second=REFRESH_PER_S, transient=True):
            yield
        return
    from sparseloom.runtime.stats import periodically

    with periodically(lambda: click.echo(plain_line(server.stats())), PLAIN_EVERY_S,
                      "sparseloom-live"):
        yield
