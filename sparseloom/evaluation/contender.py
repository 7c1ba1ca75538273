"""The contenders of ``sparseloom bench serve`` by name: every registered placement policy,
and the stock runtimes (:mod:`sparseloom.evaluation.stock`). What they share while serving
is :class:`~sparseloom.evaluation.contenders.ServeContext`."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import repeated
from sparseloom.evaluation.stock import STOCK_RUNTIMES
from sparseloom.runtime.options import RuntimeOptions

__all__ = ["HEADLINE", "TUNED_PICKS_POLICY", "Contender", "all_contenders", "select_contenders"]

#: The policy whose figures the ratios are taken of.
HEADLINE = "sparseloom"
#: The policy whose picks ``picks-tuned`` serves: the one that wins against the stock
#: runtimes (docs/results.md).
TUNED_PICKS_POLICY = "sparseloom-loaded"


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
