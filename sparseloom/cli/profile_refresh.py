"""``sparseloom profile WORKLOAD --refresh [full]``: re-time a sample, repair a drifted profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.output import echo_json, echo_table


def run_refresh(loaded: Any, *, processors: tuple[str, ...], options: Any, mode: str,
                sample: int, rounds: int | None, threshold: float, as_json: bool,
                out: Path | None = None) -> Any:
    """Refresh the cached profile of ``loaded`` and print what was found and done.

    With ``out``, the refresh record goes to ``out/refresh.json`` and the refreshed table
    to ``out/profile``, as ``profile --out`` writes them.
    """
    from sparseloom.profile.refresh import refresh_profile

    table, record = refresh_profile(loaded, processors=processors or None, options=options,
                                    sample=sample, threshold=threshold, mode=mode,
                                    rounds=rounds, progress=not as_json)
    record["profile_directory"] = table.meta.get("table_directory")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.save(out / "profile")
        (out / "refresh.json").write_text(json.dumps(record, indent=2, default=str))
    if as_json:
        echo_json(record)
        return table
    cells = sum(len(c) for c in record["sample"].values())
    if record["calibrated"]:
        click.echo("first refresh of this profile: every subgraph re-timed once, to compare "
                   "with the table, and the sample timed as the reference of later refreshes")
    click.echo(f"re-timed {cells} subgraph(s) of {len(record['sample'])} task(s) on every "
               f"processor in {record['seconds']:.1f} s (load average "
               f"{record['load_average']}); drift threshold ±{threshold:.0%}")
    echo_table(["task", "processor", "now ÷ before", "cells", "drifted"], [
        [c["task"], c["processor"], f"{c['factor']:.3f}", c["cells"],
         "yes" if c["drifted"] else "no"] for c in record["checks"]])
    drifted = "; ".join(f"{task}: {', '.join(ps)}" for task, ps in record["drifted"].items())
    action = {"none": "nothing drifted; the profile is unchanged",
              "rescaled": f"rescaled the latencies that drifted ({drifted})",
              "retimed": f"re-timed the tasks that drifted ({drifted})"}.get(
                  record["action"], f"{record['action']} ({drifted})")
    click.echo(f"{action}; profile table: {record['profile_directory']}")
    return table
