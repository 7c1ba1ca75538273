"""Where a command places its work: ``--processor``, and the placement options of ``plan``/``run``.

:func:`processors_option` is the repeatable ``-p`` of every command that profiles or serves on
chosen processors (one processor named twice is refused, :func:`~.parsing.distinct_processors`);
:func:`placement_options` adds ``--policy``, ``--slo``, ``--memory-budget``, ``-p`` and
``--paired-gate`` to the commands that plan a placement, which read them with
:func:`read_placement`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sparseloom.cli.parsing import distinct_processors, parse_budget, parse_slos
from sparseloom.core.errors import ConfigError
from sparseloom.core.registry import DEFAULT_POLICY

Command = TypeVar("Command", bound=Callable[..., Any])


def processors_option(help: str) -> Callable[[Command], Command]:
    """The repeatable ``--processor``/``-p`` option, passed to the command as ``processors``."""
    return click.option("--processor", "-p", "processors", multiple=True,
                        callback=distinct_processors, help=help)


def memory_budget_option(what: str) -> Callable[[Command], Command]:
    """``--memory-budget`` (a string; :func:`read_budget` reads it), its help opening with
    ``what``."""
    return click.option("--memory-budget", default="1.0", show_default=True,
                        help=f"{what}: a fraction of full preloading in (0, 1] (0.55), or a "
                             f"size (1.5GiB, 800MB, or bytes).")


def read_budget(memory_budget: str) -> float | int:
    """The value of :func:`memory_budget_option`: a fraction of full preloading or bytes.

    :raises ConfigError: it is neither, or not above 0."""
    budget = parse_budget(memory_budget)
    if budget <= 0:
        raise ConfigError(f"--memory-budget must be > 0, got {memory_budget}")
    return budget


def placement_options(processors_help: str) -> Callable[[Command], Command]:
    """Add ``--policy``, ``--slo`` (as ``slo_specs``), ``--memory-budget``, ``-p`` (its help
    ``processors_help``) and ``--paired-gate/--no-paired-gate`` (as ``paired_gate``) to a
    click command function (apply below ``@click.command``)."""
    options = (
        click.option("--policy", default=DEFAULT_POLICY, show_default=True,
                     help="Placement policy (see `sparseloom plugins`)."),
        click.option("--slo", "slo_specs", multiple=True, metavar="TASK=ACCURACY,LATENCY_MS",
                     help="A task's SLO (repeat); other tasks: the workload's, else the middle "
                          "of their SLO grid."),
        memory_budget_option("Memory budget of the whole server (preloaded subgraphs, "
                             "routes, twins, lanes)"),
        processors_option(processors_help),
        click.option("--paired-gate/--no-paired-gate", "paired_gate", default=True,
                     show_default=True,
                     help="Serve a stitched pick only where the selection rows vouch for it "
                          "beside dense row by row (95% paired interval within the accuracy "
                          "SLO's margin), else plan again without it; it runs each pick and "
                          "dense over the selection rows once."),
    )

    def decorate(command: Command) -> Command:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def read_placement(policy: str, slo_specs: tuple[str, ...], memory_budget: str
                   ) -> tuple[dict[str, Any], float | int]:
    """The SLOs by task and the memory budget of :func:`placement_options`' values, once
    ``policy`` is known to be registered: a wrong value fails before any work."""
    from sparseloom.core.registry import get_registry

    get_registry().get_policy(policy)
    slos = parse_slos(slo_specs)
    return slos, read_budget(memory_budget)
