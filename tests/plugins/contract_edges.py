"""Test doubles: third-party plugins at the edges of the documented contracts.

* policy ``minimal-plan``: a valid policy whose :class:`~sparseloom.core.types.Plan` fills only
  what the contract requires (``policy``, ``order`` and a variant per task), leaving every
  optional field (``slos``, estimates, ``feasible``, ...) at its default. It places every
  task on the first processor it is given, each position's first variant (the dense one).
* backend ``bare-load`` (processor ``bare-load:CPU``): ONNX Runtime whose ``load`` breaks the
  ``LoadedModel`` contract by returning a bare ``object()``.

:func:`edges_distribution` writes a distribution declaring this module as an entry point, for
subprocess tests of the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO, Plan, Processor, StitchedVariant
from tests.plugin_dists import make_distribution
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend

DISTRIBUTION = "sparseloom-contract-edges"


class MinimalPlanPolicy:
    """Every task's dense variant on the first processor; only the required Plan fields."""

    def plan(self, tasks: Sequence[str], profile: Any, processors: Sequence[Processor],
             slos: Mapping[str, SLO]) -> Plan:
        positions = profile.task(tasks[0]).n_positions
        first = processors[0].name
        return Plan("minimal-plan", (first,) * positions,
                    {task: StitchedVariant(task, (0,) * positions) for task in tasks})

    def on_feedback(self, observations: Any) -> Plan | None:
        return None


class BareLoadBackend(ProtocolOnlyBackend):
    """ONNX Runtime whose ``load`` returns an object without the loaded-model members."""

    processors = (Processor("bare-load:CPU", "bare-load", "CPU"),)

    def load(self, compiled: bytes, processor: Processor) -> Any:  # type: ignore[override]
        return object()


@hookimpl
def sparseloom_register_policies(register: Any) -> None:
    register("minimal-plan", MinimalPlanPolicy, description="only the required Plan fields")


@hookimpl
def sparseloom_register_backends(register: Any) -> None:
    register("bare-load", BareLoadBackend, description="load() returns a bare object")


def edges_distribution(root: Path) -> Path:
    """A distribution folder declaring this module as an entry point.

    Put ``root`` and the repository on ``PYTHONPATH`` to load it in a subprocess.
    """
    return make_distribution(root, DISTRIBUTION, {"edges": "tests.plugins.contract_edges"},
                             version="1.2.3")
