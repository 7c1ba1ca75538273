"""``sparseloom plugins``: what is registered, by whom, and what failed to load."""

from __future__ import annotations

import click

from sparseloom.cli.output import echo_json, echo_table
from sparseloom.core.registry import get_registry


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def plugins_command(as_json: bool) -> None:
    """List every registered plugin with its kind, distribution, version and load error.

    Exits with status 1 when a plugin failed to load (it is listed with its error).
    """
    registry = get_registry()
    rows = [
        {
            "name": r.name,
            "kind": r.kind,
            "distribution": r.distribution,
            "version": r.version,
            "plugin": r.plugin,
            "description": r.description,
            "capabilities": list(r.capabilities),
            "error": None,
        }
        for r in registry.registrations()
    ]
    rows += [
        {
            "name": f.plugin,
            "kind": "plugin",
            "distribution": f.distribution,
            "version": f.version,
            "plugin": f.plugin,
            "description": "",
            "capabilities": [],
            "error": f.error,
        }
        for f in registry.failures
    ]
    if as_json:
        echo_json(rows)
    else:
        echo_table(
            ["kind", "name", "distribution", "version", "description / error"],
            [
                [r["kind"], r["name"], r["distribution"], r["version"],
                 r["error"] or r["description"]]
                for r in rows
            ],
        )
    if registry.failures:
        names = ", ".join(f.plugin for f in registry.failures)
        click.echo(f"error: {len(registry.failures)} plugin(s) failed to load: {names}", err=True)
        raise SystemExit(1)


COMMANDS = (plugins_command,)
