"""``sparseloom-loaded``: SparseLoom's variant choice, placed for the load the tasks make together.

Beyond the paper. Algorithm 1 ranks processor orders by the mean *isolated* latency of the
tasks; served together, the tasks queue at the processors they share, and with one request in
flight per task (the paper's closed loop) the run ends when the busiest processor, or the
longest chain, does. This policy keeps what Algorithm 1 gets right — every task runs a stitched
variant that meets its accuracy SLO (accuracy is never given up for latency) — and chooses each
task's variant *and processor set* for the load:

1. The global order p* is Algorithm 1's (the paper's Ω, each processor once).
2. Each task either spans p* (its positions on p*'s processors, as in the paper) or keeps its
   whole chain on one processor — p* restricted to one processor, so a short task never waits
   behind a long task's stages and a chain that stays put pays no hand-off.
3. Per placement, the variants meeting the accuracy SLO are reduced to the Pareto front of
   (work on each processor, chain latency); a beam search over the tasks (longest first) picks
   one option per task minimising, in order: the tasks whose *loaded* latency estimate misses
   their latency SLO; the closed-loop makespan per round of requests, ``max(busiest processor's
   summed stage time, longest loaded latency)``; the summed loaded latency; the total work.
4. A processor whose arithmetic differs from the evaluation processor's (the numerics check:
   OpenVINO ``bf16``, OpenVINO's own ``int8`` kernels) takes a whole chain when the profile
   measured that variant's accuracy *as served* there (``TaskProfile.served_accuracy``,
   :mod:`sparseloom.profile.served`) and it meets the SLO (:func:`served_options`); the plan
   reports that served accuracy. Every other chain through a flagged subgraph stays off it.

A chain that keeps to one processor is served **merged** (``Plan.merged``; option
``merge_chains``): its stitched variant merged into one model
(:func:`sparseloom.zoo.whole.merged_path`), one call per request instead of one per position,
so the backend sees the whole graph and no boundary tensor is handed over. Measured on the
long pole of ``default`` (``benchmarks/merged_chain.py``), the chain took 1.16× [1.09–1.22]
the merged model; served, merged chains gave 1.18× the closed-loop throughput (docs/plan.md).
The estimates stay the chain's (what the profile measured; the runtime's calibration sees the
merged model run faster).

A long chain that keeps to one processor whose backend can run it *wide* (``widened``: ONNX
Runtime's intra-op pool, OpenVINO's CPU threads) may borrow the other processors' cores **while
they are idle** (``Plan.wide``): the runtime keeps a wide twin of each of its subgraphs beside
the one-thread one and runs a stage on the twin only when every other processor has nothing
running or queued. On the paper's closed loop the longest chain bounds the run and the short
tasks leave their processor idle most of the time (and wholly once they are done); a stage
borrows that core instead of leaving it idle, and never takes it from a task that needs it. A
request that arrives meanwhile waits for the borrowed stage to end (the loan is exclusive), so
a chain borrows whenever the others are idle only when no task elsewhere would miss its
latency SLO for that. Otherwise (option ``lend_when_quiet``, on by default) it is marked
``Plan.wide_when_quiet``: it borrows only from a processor idle for a few of its mean idle gaps
(:meth:`sparseloom.runtime.worker.ProcessorWorker.quiet`), so under Poisson arrivals about
0.25 % of that processor's requests find its core lent, and once its tasks stop arriving (a
closed loop whose short tasks are done) the chain borrows at once. The estimates stay those of
one thread (what the chain takes when the others are busy).

**Overflow** (``LoadedPolicy(overflow=False)`` turns it off). Every processor the plan gives
two or more tasks is named in ``Plan.overflow``: the runtime gives it a second server of its
queue on the other processors' cores, which takes a request only when waiting for the running
call (another task's, there) would make it miss its latency SLO
(:mod:`sparseloom.runtime.overflow`). A processor serving one task gets none: its requests wait
only for their own task's calls, and a thread there would only take the other processors'
cores for that task (measured, docs/results.md: on every processor, it cost the Poisson
capacity search at k = 5 14 %; on shared ones only, 1 %). Under the paper's closed loop it never
runs; under tight SLOs a short task's request no longer waits out another task's call (the
grid's violation rate at k = 5 on ``default``: 0.25 against 0.75 per level). The estimates
below do not count on it.

**Lanes** (``LoadedPolicy(lanes=False)`` turns them off). A running call cannot be
interrupted, so where the latency SLOs are tight next to the calls (``default`` at 2 × the
isolated dense latency: vision's 0.37 ms beside sentiment's 2–3 ms call) a shared queue makes a
short task miss whatever its order. The kernel can pre-empt: when every processor is a set of
CPU cores, the policy also plans each task's fastest whole chain on a *lane* of its own
(``Plan.lanes``, :mod:`sparseloom.runtime.lanes`: a thread free to run on every core),
estimated by :func:`sparseloom.plan.lanes.lane_choice`, and takes that plan when it is
estimated to miss fewer latency SLOs than the queues. A lane plan has no wide stage and no
overflow thread; its merged chains are merged as usual.

**Time-sliced lanes** (``LoadedPolicy(time_share=False)`` turns them off). A processor's
queue serves one call after another, so the tasks that share it take turns: with one request
of each in flight every one runs at the pace of the longest, however short its own call. When
every processor is a set of CPU cores, the tasks of a processor that serves two or more whole
chains (and no other task's stage) each get a lane pinned to *its* cores (``Plan.lanes`` with
``Plan.lanes_pinned``): the kernel time-slices them there, so a short call no longer waits out
a longer one and the fastest task makes the most calls, as each task's thread of a stock
runtime does; a task alone on its processor keeps the processor's worker (and borrows the idle
cores). Estimated as lanes are, on that one core (:func:`sparseloom.plan.lanes.pinned_lanes`),
and taken unless that misses more latency SLOs than the queue. With
``LoadedPolicy(lanes_borrow=True)`` (off by default: no gain measured) a pinned lane may run a
call on the cores of another processor whose own worker is quiet (``Plan.lanes_borrow``,
:func:`sparseloom.runtime.lending.roam`): once the tasks of that processor are done in a
closed loop, its core takes one of the lanes instead of idling.

**Spares** (``LoadedPolicy(spare=False)`` turns them off). A merged chain alone in its
processor's queue, when no other processor's queue serves any task (their cores hold only
time-sliced lanes, or nothing: ``default``'s ``sentiment`` on ``ov:CPU`` beside the light
tasks' lanes on ``ort:CPU``), gets a spare (``Plan.spares``, :mod:`sparseloom.runtime.lanes`):
the same merged model on one thread on the other processors' cores, which takes the task's
request only while its processor is busy with another and waiting there would make the
request miss its latency SLO (:func:`sparseloom.runtime.replicas.spare_or_own`). With one
request in flight per task (the closed loop, the steady state, the grid) it never runs; under
Poisson arrivals, once the task's processor falls behind, its queued requests run on two cores
at once, time-sliced there with the lanes, as a stock runtime's one session per core does. The
estimates do not count on it.

**Worth its risk** (``LoadedPolicy(min_gain=0)`` turns it off). Where the dense model meets a
task's accuracy SLO, a compressed variant is an option only when its chain is estimated at
least ``min_gain`` (10 %) faster than the dense model's under the same placement. A variant
estimated a few percent faster gains nothing a run can tell from noise and carries the accuracy
risk of every compressed variant; on ``default`` (AMD EPYC Zen 4, 2026-12-07) the picks the
profile estimated at 1.00–1.04× the dense model (``vision`` 8_1, ``speech`` 9_0) served merged
at 0.80–0.88× of it.

The loaded latency of a task is its chain plus, on each processor it uses, the longest time a
request of every other task holds that processor (consecutive stages on one processor run in
place, without yielding it; with one request in flight per task, at most that much is queued
ahead of it); it is what the plan reports as ``estimated_latency_ms``, so the runtime's
feedback compares it with the observed latency like with like.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Plan
from sparseloom.plan.feasible import (
    TaskChoice,
    accuracy_rows,
    build_plan,
    choice_accuracy,
    order_text,
)
from sparseloom.plan.lanes import (
    Option,
    installed_backend,
    lane_choice,
    laneable,
    pinned_lanes,
    spare_tasks,
)
from sparseloom.plan.orders import paper_orders
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plugins.policies.loaded_options import served_options, task_options
from sparseloom.plugins.policies.sparseloom import algorithm1, common_positions
from sparseloom.profile.table import ProfileTable

#: Partial assignments kept per step of the beam search (4 tasks × ~10 options each are
#: searched exhaustively well within this; 16 tasks plan in milliseconds).
BEAM = 256
#: Chains shorter than this never borrow cores: on the bundled sub-millisecond models two
#: threads measured 0.65–0.9× of one (waking a thread per operator costs more than it saves).
WIDE_MIN_CHAIN_MS = 2.0


def loaded_latency(options: Sequence[Option]) -> np.ndarray:
    """Each chosen option's chain plus, on each processor it uses, the longest hold of every
    other task's request there."""
    return _loaded(np.array([[o.chain_ms for o in options]]),
                   np.stack([o.longest_ms for o in options])[None],
                   np.stack([o.uses for o in options])[None])[0]


def _loaded(chain: np.ndarray, held: np.ndarray, uses: np.ndarray) -> np.ndarray:
    """:func:`loaded_latency` of N assignments at once: chains (N, T), longest holds and
    processors used (N, T, P)."""
    return chain + ((held.sum(axis=1)[:, None, :] - held) * uses).sum(axis=2)


def choose(options: Sequence[Sequence[Option]], slo_ms: Sequence[float]
           ) -> tuple[list[Option], np.ndarray]:
    """One option per task by beam search (see the module doc); returns them and their loaded
    latencies.

    Partial assignments are scored all at once as arrays (a plan is remade on the serving
    process while requests run, so it must be quick: 4 tasks plan in a few milliseconds).
    """
    ranked = sorted(range(len(options)), key=lambda t: -min(o.chain_ms for o in options[t]))
    longest = [np.stack([o.longest_ms for o in options[t]]) for t in ranked]  # (k, P) each
    uses = [np.stack([o.uses for o in options[t]]) for t in ranked]
    work = [np.stack([o.work_ms for o in options[t]]) for t in ranked]
    chain = [np.array([o.chain_ms for o in options[t]]) for t in ranked]
    slo = np.array([slo_ms[t] for t in ranked])
    beam = np.zeros((1, 0), dtype=np.int64)  # option index per ranked task, one row per partial
    for depth in range(len(ranked)):
        count = len(options[ranked[depth]])
        grown = np.concatenate([np.repeat(beam, count, axis=0),
                                np.tile(np.arange(count), len(beam))[:, None]], axis=1)
        pick = [grown[:, d] for d in range(depth + 1)]
        latency = _loaded(np.stack([chain[d][pick[d]] for d in range(depth + 1)], axis=1),
                          np.stack([longest[d][pick[d]] for d in range(depth + 1)], axis=1),
                          np.stack([uses[d][pick[d]] for d in range(depth + 1)], axis=1))
        missed = (latency > slo[:depth + 1]).sum(axis=1)
        total = np.stack([work[d][pick[d]] for d in range(depth + 1)], axis=1).sum(axis=1)
        # With one request in flight per task, a task's requests follow one another at its
        # loaded latency: the round ends with the slowest task or the busiest processor.
        makespan = np.maximum(total.max(axis=1), latency.max(axis=1))
        order = np.lexsort((total.sum(axis=1), latency.sum(axis=1), makespan, missed))
        beam = grown[order[:BEAM]]
    chosen: list[Option] = [options[0][0]] * len(options)
    for d, t in enumerate(ranked):
        chosen[t] = options[t][int(beam[0, d])]
    return chosen, loaded_latency(chosen)


@attrs.define(eq=False)
class LoadedPolicy(ProfilePolicy):
    """Variants and per-task processor sets planned for the tasks' joint load (module doc)."""

    name: str = attrs.field(default="sparseloom-loaded", init=False)
    #: Let a long chain held on one processor borrow the other processors' cores while they
    #: are idle (``Plan.wide``; module doc). Measured on ``bench serve default``: closed-loop
    #: throughput 1.38× that without it, the grid's violation rate unchanged (docs/plan.md).
    lend_idle: bool = attrs.field(default=True, kw_only=True)
    #: Let such a chain borrow even where a request arriving at a lender meanwhile would miss
    #: its latency SLO, but only from lenders quiet for a few of their mean idle gaps
    #: (``Plan.wide_when_quiet``; module doc).
    lend_when_quiet: bool = attrs.field(default=True, kw_only=True)
    #: Serve a chain kept on one processor as its stitched variant merged into one model
    #: (``Plan.merged``; module doc): one call instead of one per position.
    merge_chains: bool = attrs.field(default=True, kw_only=True)
    #: Give every processor the plan shares among tasks an overflow thread on the other
    #: processors' cores (``Plan.overflow``; module doc): a request that would miss its latency
    #: SLO waiting for the running call runs there, time-sliced with that core's own worker.
    overflow: bool = attrs.field(default=True, kw_only=True)
    #: Serve every task on a lane of its own (``Plan.lanes``; module doc) when that is
    #: estimated to miss fewer latency SLOs than the processors' shared queues.
    lanes: bool = attrs.field(default=True, kw_only=True)
    #: Give the tasks that share a processor each a lane pinned to its cores
    #: (``Plan.lanes_pinned``; module doc) when that is estimated to miss no more latency
    #: SLOs than its queue.
    time_share: bool = attrs.field(default=True, kw_only=True)
    #: Give a merged chain alone in its processor's queue, where the other processors' queues
    #: serve no task, a spare on their cores (``Plan.spares``; module doc).
    spare: bool = attrs.field(default=True, kw_only=True)
    #: Let those pinned lanes run a call on the cores of another processor whose own worker
    #: is quiet (``Plan.lanes_borrow``; module doc). Off: on the closed loop where it acts it
    #: measured no gain (1.04× [0.82–1.31], docs/plan.md).
    lanes_borrow: bool = attrs.field(default=False, kw_only=True)
    #: A compressed variant replaces the dense model (where the dense model meets the accuracy
    #: SLO) only when its chain is estimated at least this share faster under the same
    #: placement (module doc, *Worth its risk*); 0 takes any estimated gain.
    min_gain: float = attrs.field(default=0.1, kw_only=True)

    @min_gain.validator
    def _check_min_gain(self, _: attrs.Attribute[float], value: float) -> None:
        if not 0.0 <= value < 1.0:
            raise PlanError(f"min_gain must lie in [0, 1) (a share of the dense model's "
                            f"chain); got {value}")

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Algorithm 1's order p*; then each task spans p* or sits on one of its processors."""
        positions = common_positions(table)
        count = len(table.processors)
        order, _ = algorithm1(table, slos, paper_orders(positions, range(count)))
        placements = [tuple(int(p) for p in order)]
        placements += [(int(p),) * positions for p in dict.fromkeys(order.tolist())
                       if (int(p),) * positions != placements[0]]
        names = list(table.tasks)
        per_task = []
        for name in names:
            profile = table.task(name)
            rows = accuracy_rows(profile, slos[name])
            served = served_options(table, name, slos[name].accuracy, placements, count,
                                    min_gain=self.min_gain)
            if rows.size == 0 and not served:  # none meets it: the most accurate, never faster
                rows = np.array([int(np.argmax(profile.accuracy()))])
            options = task_options(profile, rows, placements, count,
                                   min_gain=self.min_gain) + served
            if not options:
                # Every accurate variant runs only where its arithmetic differs from the
                # profile's: the most accurate variant that runs as measured somewhere.
                for row in np.argsort(-profile.accuracy(), kind="stable"):
                    options = task_options(profile, np.array([row]), placements, count)
                    if options:
                        break
            if not options:
                where = order_text(table, placements[0])
                raise PlanError(f"task {name!r}: no stitched variant runs on {where} or on one "
                                f"of its processors with the arithmetic its accuracy was "
                                f"measured with; profile a processor that computes as the "
                                f"evaluation processor does")
            per_task.append(options)
        slo_ms = np.array([slos[n].latency_ms for n in names])
        chosen, latency = choose(per_task, slo_ms.tolist())
        laned = lane_choice(per_task, count) if self.lanes and laneable(table) else None
        if laned is not None and (laned[1] > slo_ms).sum() < (latency > slo_ms).sum():
            chosen, latency = laned
        else:
            laned = None
        sliced_names: tuple[str, ...] = ()
        if laned is None and self.time_share and laneable(table):
            sliced, estimate = pinned_lanes(chosen, latency, count)
            if (estimate > slo_ms).sum() <= (latency > slo_ms).sum():
                sliced_names, latency = tuple(names[t] for t in sliced), estimate
        choices = {}
        for name, option, loaded in zip(names, chosen, latency, strict=True):
            slo = slos[name]
            accuracy, _ = choice_accuracy(table.task(name), option.row, option.served_accuracy)
            accurate = accuracy >= slo.accuracy
            reason = ""
            if not accurate:
                reason = (f"accuracy unreachable: no stitched variant reaches {slo.accuracy:.4f}; "
                          f"serving the most accurate")
            elif loaded > slo.latency_ms:
                where = order_text(table, option.placement)
                shared = (f"on a lane, {len(names)} lanes sharing the cores of {count} "
                          f"processor(s)" if laned else
                          f"on a lane time-sliced with the other tasks on {where}"
                          if name in sliced_names else
                          f"with the other tasks sharing {where}")
                reason = (f"latency unreachable under load: {loaded:.3f} ms estimated "
                          f"{shared}, SLO {slo.latency_ms:.3f} ms")
            choices[name] = TaskChoice(name, option.row, option.placement, loaded,
                                       not reason, reason, option.served_accuracy)
        plan = build_plan(self.name, table, choices, order, slos, 0.0)
        merged = tuple(n for n, o in zip(names, chosen, strict=True)
                       if self.merge_chains and positions > 1 and len(set(o.placement)) == 1)
        if laned:  # each task alone on its thread: nothing to borrow, nobody to overflow
            return attrs.evolve(plan, merged=merged, lanes=tuple(names))
        lending = _lending(table) if self.lend_idle and count > 1 else []
        # A wide merged chain borrows the idle cores for its whole chain, one call.
        wide = [n for n, o in zip(names, chosen, strict=True)
                if n not in sliced_names and _borrows_when_idle(o, lending)]
        quiet = [n for t, (n, o) in enumerate(zip(names, chosen, strict=True))
                 if n in wide and not _lending_is_harmless(
                     t, chosen, latency, slo_ms, o.chain_ms if n in merged else o.longest_stage_ms)]
        if not self.lend_when_quiet:
            wide, quiet = [n for n in wide if n not in quiet], []
        # Only where a request can wait for another task's call: one task alone has none.
        sharing = collections.Counter(table.processors[p] for n, option in zip(
            names, chosen, strict=True) if n not in sliced_names for p in set(option.placement))
        overflow = tuple(p for p in table.processors if sharing[p] > 1) if self.overflow else ()
        spares = spare_tasks(names, chosen, merged, sharing, table.processors) \
            if self.spare and laneable(table) else ()
        return attrs.evolve(plan, wide=tuple(wide), wide_when_quiet=tuple(quiet),
                            merged=merged, overflow=overflow, lanes=sliced_names,
                            lanes_pinned=bool(sliced_names), spares=spares,
                            lanes_borrow=bool(sliced_names) and self.lanes_borrow)


def _borrows_when_idle(option: Option, lending: Sequence[int]) -> bool:
    """Whether ``option``'s chain may borrow idle cores at run time: it keeps to one processor
    whose backend can run it wide, and is long enough to gain (:data:`WIDE_MIN_CHAIN_MS`)."""
    return (len(set(option.placement)) == 1 and option.placement[0] in lending
            and option.chain_ms >= WIDE_MIN_CHAIN_MS)


def _lending_is_harmless(t: int, chosen: Sequence[Option], loaded_ms: np.ndarray,
                         slo_ms: np.ndarray, borrow_ms: float) -> bool:
    """Whether task ``t`` may borrow idle cores without costing another task its latency SLO.

    A request of another task that arrives while a borrowed stage runs waits for the stage to
    end (the loan is exclusive; at most ``borrow_ms``, the chain's longest one-thread stage:
    its twin runs it faster). Every task that uses a processor other than
    ``t``'s keeps its loaded latency plus ``borrow_ms`` within its SLO, or ``t`` runs on one
    thread. On the paper's closed loop (latency unconstrained) this always holds.
    """
    home = set(chosen[t].placement)
    return all(loaded_ms[u] + borrow_ms <= slo_ms[u]
               for u, option in enumerate(chosen)
               if u != t and not set(option.placement) <= home)


def _lending(table: ProfileTable) -> list[int]:
    """Indices of the processors whose backend can run a stage wide (``widened``)."""
    return [index for index, name in enumerate(table.processors)
            if callable(getattr(installed_backend(name), "widened", None))]
