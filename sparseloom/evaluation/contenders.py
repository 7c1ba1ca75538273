"""The contenders of ``sparseloom bench serve``: every placement policy, and the stock runtimes.

A contender serves a workload under a load and SLOs and returns the run summary. Policies serve
through :func:`sparseloom.runtime.session.serve` (plan, preload, workers, feedback); stock
runtimes through :func:`sparseloom.evaluation.stock.serve_stock` — the same runtime, load
generator and summary, so contenders differ only in what runs where.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import SLO, repeated
from sparseloom.evaluation.stock import STOCK_RUNTIMES, serve_stock
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.options import RuntimeOptions
from sparseloom.runtime.summary import RunSummary

#: The policy whose figures the ratios are taken of.
HEADLINE = "sparseloom"


@attrs.frozen
class Contender:
    """One contender: a registered policy (``kind="policy"``) or a stock runtime.

    A policy contender may plan with a registered policy under a name of its own and serve
    with runtime settings of its own (``policy``, ``options``), so that one policy with a
    runtime mechanism on and off makes two contenders (``benchmarks/mechanisms.py``).
    """

    name: str
    kind: str
    #: The registered policy a ``policy`` contender plans with (``None``: its ``name``).
    policy: str | None = None
    #: The runtime settings of a ``policy`` contender's runs (``None``: the defaults).
    options: RuntimeOptions | None = None

    @property
    def is_stock(self) -> bool:
        """A stock runtime serving dense models (the bar sparseloom is judged against)."""
        return self.kind == "stock" and not STOCK_RUNTIMES[self.name].picks

    @property
    def is_sparseloom(self) -> bool:
        """One of sparseloom's own policies (``sparseloom``, ``sparseloom-*``)."""
        return self.kind == "policy" and (self.name == HEADLINE
                                          or self.name.startswith(f"{HEADLINE}-"))

    @property
    def is_baseline(self) -> bool:
        """A registered policy that is not sparseloom's own (the paper's baselines, ADMS,
        a plugin's)."""
        return self.kind == "policy" and not self.is_sparseloom


def all_contenders() -> list[Contender]:
    """Every registered policy (sparseloom first), then every stock runtime."""
    from sparseloom.core.registry import get_registry

    names = [r.name for r in get_registry().policies()]
    ordered = [HEADLINE, *sorted(n for n in names if n != HEADLINE)]
    return ([Contender(n, "policy") for n in ordered if n in names]
            + [Contender(n, "stock") for n in STOCK_RUNTIMES])


def select_contenders(names: Sequence[str]) -> list[Contender]:
    """The contenders named (all when empty), each once, in the order given.

    :raises ConfigError: an unknown or repeated name (the message lists the known ones).
    """
    known = {c.name: c for c in all_contenders()}
    if not names:
        return list(known.values())
    twice = repeated(names)
    if twice:
        raise ConfigError(f"--contender names {', '.join(twice)} more than once; name each "
                          f"contender once")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown contender(s) {', '.join(map(repr, unknown))}; known: "
                          f"{', '.join(known)}")
    return [known[n] for n in names]


@attrs.define(eq=False)
class ServeContext:
    """What every contender of one benchmark shares: the workload, its profile and zoos, the
    cores of sparseloom's processors, the memory budget policy contenders serve within
    (:class:`~sparseloom.runtime.session.RunConfig`), and the picks of the sparseloom policy
    per SLO set."""

    workload: Any
    profile: Any
    zoos: Mapping[str, Any]
    cores: tuple[int, ...]
    precision: str = "f32"
    memory_budget: float | int = 1.0
    _picks: dict[tuple[tuple[str, float, float], ...], dict[str, tuple[int, ...]]] = \
        attrs.field(factory=dict, init=False)

    def picks(self, slos: Mapping[str, SLO]) -> dict[str, tuple[int, ...]]:
        """The stitched variant the ``sparseloom`` policy picks per task under ``slos``."""
        from sparseloom.plan.api import make_plan

        key = tuple(sorted((t, s.accuracy, s.latency_ms) for t, s in slos.items()))
        if key not in self._picks:
            planned = make_plan(self.profile, policy=HEADLINE, slos=slos)
            self._picks[key] = {t: tuple(int(c) for c in v.choices)
                                for t, v in planned.plan.variants.items()}
        return self._picks[key]


def serve_contender(context: ServeContext, contender: Contender, spec: LoadSpec,
                    slos: Mapping[str, SLO]) -> RunSummary:
    """Serve ``context``'s workload with ``contender`` under ``spec`` and ``slos``."""
    if contender.kind == "policy":
        from sparseloom.runtime.session import RunConfig, serve

        return serve(context.workload, context.profile,
                     RunConfig(policy=contender.policy or contender.name, slos=dict(slos),
                               load=spec, options=contender.options or RuntimeOptions(),
                               memory_budget=context.memory_budget)
                     ).summary
    if contender.name not in STOCK_RUNTIMES:
        raise ConfigError(f"unknown stock runtime {contender.name!r}")
    stock = STOCK_RUNTIMES[contender.name]
    picks = context.picks(slos) if stock.picks else None
    summary = serve_stock(context.workload, context.zoos, stock, spec, slos,
                          cores=context.cores, picks=picks, precision=context.precision)
    return _with_eval_set_accuracy(context, summary, picks)


def _with_eval_set_accuracy(context: ServeContext, summary: RunSummary,
                            picks: Mapping[str, tuple[int, ...]] | None) -> RunSummary:
    """A stock run's summary with each task's accuracy on the whole eval set filled in, as a
    policy run's has it from the profile: the dense model's (the zoo's record), or the
    profile's of the pick — so every contender is judged by the same accuracy."""
    import attrs

    tasks = []
    for task in summary.tasks:
        if picks is not None:
            profile = context.profile.task(task.task)
            row = int(profile.index(list(picks[task.task])))
            whole = float(profile.accuracy()[row])
        else:
            whole = float(context.zoos[task.task].manifest["metric"]["dense"])
        tasks.append(attrs.evolve(task, accuracy_profile=whole))
    return attrs.evolve(summary, tasks=tuple(tasks))
