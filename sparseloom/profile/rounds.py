"""What the profiler times in each interleaved round, and in what order.

Three kinds of timing, each a small record that says which loaded subgraphs it chains (its
cells, in chain order), which processor's runs it is dealt among, and what one run of the chain
(:class:`~sparseloom.profile.pinned.ChainTiming`) contributes: :class:`SingleTiming` (a stage
time), :class:`HandoffTiming` (the gap between two stages) and :class:`ChainTimingItem` (a whole
validation chain). :func:`schedule` orders one round; :func:`timed` runs one item of it, once
or in a burst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import attrs
import numpy as np

from sparseloom.core.types import Processor
from sparseloom.profile.pinned import ChainTiming, ModelCall, PinnedThreads, Stage

#: A loaded subgraph's cell: (position, variant, processor index).
Cell = tuple[int, int, int]
#: A validation chain: (variant per position, processor index per position).
Chain = tuple[Sequence[int], Sequence[int]]


class Timing(Protocol):
    """One kind of thing timed in the rounds: which cells it chains and what it records."""

    @property
    def owner(self) -> int:
        """The processor whose runs this is dealt among (its first stage's)."""

    def cells(self) -> list[Cell]:
        """The loaded subgraphs it runs, in chain order."""

    def sample(self, timing: ChainTiming) -> float:
        """The milliseconds one run contributes."""

    def where(self, processors: Sequence[Processor]) -> tuple[int, int, str, str]:
        """(position, variant, processor, operation) for its failure record."""


@attrs.frozen
class SingleTiming:
    """One subgraph alone on its processor's pinned thread: its stage time."""

    position: int
    variant: int
    processor: int

    @property
    def owner(self) -> int:
        return self.processor

    def cells(self) -> list[Cell]:
        return [(self.position, self.variant, self.processor)]

    def sample(self, timing: ChainTiming) -> float:
        return timing.stage_ms(0)

    def where(self, processors: Sequence[Processor]) -> tuple[int, int, str, str]:
        return self.position, self.variant, processors[self.processor].name, "infer"


@attrs.frozen
class HandoffTiming:
    """The dense subgraph at ``position`` on ``first`` feeding ``position + 1`` on ``second``:
    the gap between the two calls."""

    position: int
    first: int
    second: int

    @property
    def owner(self) -> int:
        return self.first

    def cells(self) -> list[Cell]:
        return [(self.position, 0, self.first), (self.position + 1, 0, self.second)]

    def sample(self, timing: ChainTiming) -> float:
        return timing.handoff_ms(0)

    def where(self, processors: Sequence[Processor]) -> tuple[int, int, str, str]:
        names = f"{processors[self.first].name}->{processors[self.second].name}"
        return self.position, 0, names, "hand-off"


@attrs.frozen
class ChainTimingItem:
    """Validation chain ``index`` as an isolated request: first stage start to last stage end."""

    index: int
    choices: tuple[int, ...] = attrs.field(converter=lambda v: tuple(map(int, v)))
    order: tuple[int, ...] = attrs.field(converter=lambda v: tuple(map(int, v)))

    @property
    def owner(self) -> int:
        return self.order[0]

    def cells(self) -> list[Cell]:
        return [(j, v, p) for j, (v, p) in enumerate(zip(self.choices, self.order, strict=True))]

    def sample(self, timing: ChainTiming) -> float:
        return timing.total_ms

    def where(self, processors: Sequence[Processor]) -> tuple[int, int, str, str]:
        names = "->".join(processors[p].name for p in self.order)
        return 0, self.choices[0], names, f"chain {list(self.choices)}"


def schedule(items: Sequence[Timing], rng: np.random.Generator) -> list[Timing]:
    """One round: each processor's items shuffled, then dealt round-robin across processors."""
    queues: dict[int, list[Timing]] = {}
    for item in items:
        queues.setdefault(item.owner, []).append(item)
    for owned in queues.values():
        rng.shuffle(owned)  # type: ignore[arg-type]
    owners = [int(p) for p in rng.permutation(sorted(queues))]
    order: list[Timing] = []
    while any(queues.values()):
        for owner in owners:
            if queues[owner]:
                order.append(queues[owner].pop())
    return order


def timed(threads: PinnedThreads, item: Timing, stages: Sequence[Stage],
          inputs: Mapping[str, Any], burst: int) -> tuple[float, float]:
    """``item``'s sample of one round and its cold sample, run on ``threads`` as ``stages``
    fed ``inputs``: its run alone (``burst`` 1; the two the same), else the median of runs
    2..``burst`` of ``burst`` back to back and the first run
    (:attr:`~sparseloom.profile.measure.ProfilerConfig.burst`)."""
    if burst == 1:
        sample = item.sample(threads.run(stages, inputs))
        return sample, sample
    # A later run's first stage reads the chain's inputs again, not the last outputs.
    first = stages[0]
    feed = {name: inputs[name] for name in first.input_names}
    again = [attrs.evolve(first, call=partial(_fed, first.call, feed), input_names=())]
    timing = threads.run([*stages, *([*again, *stages[1:]] * (burst - 1))], inputs)
    n = len(stages)
    runs = [item.sample(ChainTiming(timing.starts[k * n:(k + 1) * n],
                                    timing.ends[k * n:(k + 1) * n]))
            for k in range(burst)]
    return float(np.median(runs[1:])), runs[0]


def _fed(call: ModelCall, feed: Mapping[str, Any], _carried: Mapping[str, Any]
         ) -> Mapping[str, Any]:
    """``call`` on ``feed``, whatever the previous stage returned."""
    return call(feed)
