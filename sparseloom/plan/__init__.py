"""Planning: feasible sets, SLO grids (§5.1), processor orders and the preloader (Alg. 2).

:func:`make_plan` (profile → plan + preload) is the entry point of the CLI, the Python API and
the runtime. Names are imported lazily, so ``import sparseloom.plan`` loads no numpy code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparseloom.plan.api import PlanResult, make_plan
    from sparseloom.plan.preload import Preload, ResidentSubgraph

# The functions ``preload`` and ``slo_grid`` live in the modules of the same names
# (``sparseloom.plan.preload.preload``); re-exporting them here would be shadowed by the
# submodules as soon as those are imported.
__all__ = ["PlanResult", "Preload", "ResidentSubgraph", "make_plan"]

_WHERE = {"PlanResult": "api", "make_plan": "api", "Preload": "preload",
          "ResidentSubgraph": "preload"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sparseloom.plan' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"sparseloom.plan.{_WHERE[name]}"), name)
