"""``--executor``, ``--ray-address`` and ``--ray-resource``: where a command's profile is measured.

Any command that builds a profile through :func:`sparseloom.cli.profile.profile_options` can
take them with the :func:`executor_options` decorator; the command then receives one
``executor_settings`` dict to pass on as ``profile_options(loaded, **executor_settings)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from sparseloom.core.errors import ConfigError


def ray_resource_map(items: tuple[str, ...]) -> dict[str, str] | None:
    """``--ray-resource PROCESSOR=RESOURCE`` items as a mapping (``None`` when none is given)."""
    if not items:
        return None
    resources: dict[str, str] = {}
    for item in items:
        processor, _, resource = (part.strip() for part in item.partition("="))
        if not processor or not resource:
            raise ConfigError(
                f"--ray-resource {item!r} is not PROCESSOR=RESOURCE; e.g. --ray-resource "
                f"ov:NPU=soc-npu measures ov:NPU on the node started with "
                f"--resources '{{\"soc-npu\": 1}}'")
        if resources.get(processor, resource) != resource:
            raise ConfigError(f"--ray-resource gives processor {processor!r} two resources, "
                              f"{resources[processor]!r} and {resource!r}; give it one")
        resources[processor] = resource
    return resources


def executor_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the executor options to a click command function (apply below ``@click.command``)."""

    @functools.wraps(command)
    def wrapper(*args: Any, executor: str | None, ray_address: str | None,
                ray_resource: tuple[str, ...], **kwargs: Any) -> Any:
        kwargs["executor_settings"] = {
            "executor": executor, "ray_address": ray_address,
            "ray_resources": ray_resource_map(ray_resource)}
        return command(*args, **kwargs)

    options = (
        click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
                     help="Where profiling runs: local (this process; default, or the "
                          "workload file's [profile] executor) or ray (a Ray cluster; "
                          "docs/profile.md)."),
        click.option("--ray-address", default=None, metavar="ADDR",
                     help="With --executor ray: the cluster to join, host:port or "
                          "ray://host:port (default: $SPARSELOOM_RAY_ADDRESS, else a new "
                          "local instance)."),
        click.option("--ray-resource", multiple=True, metavar="PROCESSOR=RESOURCE",
                     help="With --executor ray: measure PROCESSOR's latency on the node that "
                          "advertises custom resource RESOURCE (repeat per processor)."),
    )
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
