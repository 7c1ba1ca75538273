"""The contenders of ``sparseloom bench serve``: every placement policy, and the stock runtimes.

A contender serves a workload under a load and SLOs and returns the run summary. Policies serve
through :func:`sparseloom.runtime.session.serve` (plan, preload, workers, feedback); stock
runtimes through :func:`sparseloom.evaluation.stock.serve_stock` — the same runtime, load
generator and summary, so contenders differ only in what runs where.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sparseloom.core.types import SLO
from sparseloom.evaluation.contender import HEADLINE, TUNED_PICKS_POLICY
from sparseloom.evaluation.judging import Judged, judged_precision
from sparseloom.evaluation.stock import STOCK_RUNTIMES, serve_stock
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.summary import RunSummary

if TYPE_CHECKING:
    from sparseloom.evaluation.tightening import Tightened


@attrs.define(eq=False)
class ServeContext:
    """What every contender of one benchmark shares: the workload, its profile and zoos, the
    cores of sparseloom's processors, the memory budget policy contenders serve within
    (:class:`~sparseloom.runtime.session.RunConfig`), the picks of a sparseloom policy per
    SLO set, and the tuned stock runtimes (found once per benchmark and SLO set, their
    measurements in :attr:`tunings`)."""

    workload: Any
    profile: Any
    zoos: Mapping[str, Any]
    cores: tuple[int, ...]
    precision: str = "f32"
    memory_budget: float | int = 1.0
    #: Requests per task of each closed run that measures a tuned runtime's candidate.
    tuning_queries: int = 300
    #: Interleaved rounds of those runs; a candidate's latency is the median of its rounds.
    #: Also the rounds of the layouts' trials (:mod:`~sparseloom.evaluation.tuned_layouts`).
    tuning_rounds: int = 1
    #: Requests per task, at least, of each closed run that tries a tuned runtime's layout
    #: with every task at once (:mod:`~sparseloom.evaluation.tuned_layouts`) ...
    trial_queries: int = 100
    #: ... and the seconds it lasts at least (``None``: no minimum): the closed scenario's.
    trial_min_s: float | None = None
    #: Whether OpenVINO computes bf16 on this CPU (tuned runtimes then try it).
    bf16: bool = False
    #: Called with one line per measured candidate.
    progress: Callable[[str], None] | None = None
    #: Raised by this fraction, the accuracy SLOs policies choose under (judged at the SLOs).
    choose_above: float = 0.0
    #: The precision each of sparseloom's processors computes in, judged as
    #: (:func:`~sparseloom.evaluation.judging.judged_precision`), by processor name; a name
    #: not here computes in :attr:`precision` on OpenVINO, f32 elsewhere.
    processor_precisions: Mapping[str, str] = attrs.field(factory=dict)
    #: Keep a pick only where the selection rows vouch for it beside dense, row by row
    #: (:mod:`~sparseloom.plan.paired_gate`; its verdicts in :attr:`gate`).
    paired_gate: bool = False
    #: Where a policy's pick falls outside its margin on the held-out rows, the policy
    #: chooses that task's variant again under a tighter selection margin until every pick
    #: keeps it (:mod:`~sparseloom.evaluation.tightening`; each step in :attr:`tightened`).
    tighten: bool = True
    tightened: list[Tightened] = attrs.field(factory=list, init=False)
    _levels: dict[tuple[Any, ...], dict[str, int]] = attrs.field(factory=dict, init=False)
    gate: Any = attrs.field(default=None, init=False)
    _gated: dict[tuple[Any, ...], Any] = attrs.field(factory=dict, init=False)
    _planned_from: dict[tuple[Any, ...], Any] = attrs.field(factory=dict, init=False)
    #: Per tuned runtime found: its name, picks, SLOs, configuration, prediction and the
    #: measurements it was chosen from.
    tunings: list[dict[str, Any]] = attrs.field(factory=list, init=False)
    _picks: dict[tuple[Any, ...], dict[str, tuple[int, ...]]] = \
        attrs.field(factory=dict, init=False)
    _routes: dict[tuple[Any, ...], dict[str, tuple[str, ...]]] = \
        attrs.field(factory=dict, init=False)
    _tuned: dict[tuple[Any, ...], Any] = attrs.field(factory=dict, init=False)
    _measured: dict[tuple[str, tuple[int, ...] | None], list[Any]] = attrs.field(
        factory=dict, init=False)
    #: Every judgement on held-out rows, by (task, pick, precision, accuracy SLO).
    judgements: dict[tuple[Any, ...], Judged] = attrs.field(factory=dict, init=False)
    _dense_outputs: dict[tuple[str, str], Any] = attrs.field(factory=dict, init=False)
    _judged_runs: dict[tuple[Any, ...], Judged] = attrs.field(factory=dict, init=False)

    def picks(self, slos: Mapping[str, SLO], policy: str = HEADLINE
              ) -> dict[str, tuple[int, ...]]:
        """The stitched variant ``policy`` picks per task under ``slos`` (each within its
        margin on the held-out rows when :attr:`tighten` is on)."""
        from sparseloom.evaluation.judging import chain_precision
        from sparseloom.evaluation.tightening import within_margins
        from sparseloom.plan.api import make_plan
        from sparseloom.plan.gating import is_dense

        key = (policy, _slo_key(slos))
        if key in self._picks:
            return self._picks[key]
        routes: dict[str, tuple[str, ...]] = {}

        def plan(levels: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
            self._levels[key] = dict(levels)
            planned = make_plan(self.profile_for(slos, policy), policy=policy,
                                slos=self.choosing(slos, policy)).plan
            routes.clear()
            routes.update({t: planned.processors_of(t) for t in planned.variants})
            self._picks[key] = {t: tuple(int(c) for c in v.choices)
                                for t, v in planned.variants.items()}
            return self._picks[key]

        def judge(task: str, pick: tuple[int, ...]) -> Judged | None:
            if not self.tighten or is_dense(self.profile.task(task), pick):
                return None
            precision = chain_precision([self._processor_precision(p) for p in routes[task]])
            return self.judged(task, pick, precision, slos[task].accuracy)

        try:
            levels, steps = within_margins(policy, slos, plan, judge)
        except BaseException:
            self._picks.pop(key, None)
            raise
        self._levels[key] = levels
        self._routes[key] = dict(routes)
        self.tightened += steps
        return self._picks[key]

    def profile_for(self, slos: Mapping[str, SLO], policy: str = HEADLINE) -> Any:
        """The table ``policy`` plans from under ``slos``: the profile, less the picks the
        paired gate refused when :attr:`paired_gate` is on (:func:`~sparseloom.plan.api.
        make_plan`'s gated table; each pick judged in its route's precision against the
        margin ``slos`` allow, not the raised SLO the policy chooses at), and less every
        stitched variant of a task that :mod:`~sparseloom.evaluation.tightening` left only its
        dense ones."""
        from sparseloom.evaluation.tightening import DENSE_ONLY
        from sparseloom.plan.gating import excluded_profile, stitched_rows

        levels = self._levels.get((policy, _slo_key(slos)), {})
        dense_only = tuple(sorted(t for t, level in levels.items() if level >= DENSE_ONLY))
        key = (policy, _slo_key(slos), _slo_key(self.choosing(slos, policy)), dense_only)
        if key not in self._planned_from:
            table = self._gated_table(slos, policy)
            self._planned_from[key] = excluded_profile(
                table, {t: stitched_rows(self.profile.task(t)) for t in dense_only})
        return self._planned_from[key]

    def _gated_table(self, slos: Mapping[str, SLO], policy: str) -> Any:
        if not self.paired_gate:
            return self.profile
        from sparseloom.evaluation.judging import chain_precision
        from sparseloom.plan.api import make_plan
        from sparseloom.plan.paired_gate import SelectionGate

        choosing = self.choosing(slos, policy)
        key = (policy, _slo_key(slos), _slo_key(choosing))
        if key in self._gated:
            return self._gated[key]
        gate = self.gate = self.gate or SelectionGate(self.workload, self.zoos, self.progress)

        def verdict(task: str, pick: tuple[int, ...], route: tuple[str, ...], _: SLO) -> Any:
            # judged at the SLO the contender is held to, not the raised one it plans with
            precision = chain_precision([self._processor_precision(p) for p in route])
            return gate(task, pick, precision,
                        self.selection_accuracy(task, None) - slos[task].accuracy)

        self._gated[key] = make_plan(self.profile, policy=policy, slos=choosing,
                                     gate=verdict).table
        return self._gated[key]

    def served_precisions(self, slos: Mapping[str, SLO], policy: str = HEADLINE
                          ) -> dict[str, str]:
        """Per task, the precision ``policy``'s plan computes its pick in, position by
        position (:func:`~sparseloom.evaluation.judging.chain_precision`): a chain with one
        position on bf16 OpenVINO and another on ONNX Runtime is judged as it ran."""
        from sparseloom.evaluation.judging import chain_precision

        self.picks(slos, policy)
        return {task: chain_precision([self._processor_precision(p) for p in processors])
                for task, processors in self._routes[policy, _slo_key(slos)].items()}

    def _processor_precision(self, name: str) -> str:
        if name in self.processor_precisions:
            return self.processor_precisions[name]
        return judged_precision(self.precision) if name.startswith("ov:") else "f32"

    def choosing(self, slos: Mapping[str, SLO], policy: str = HEADLINE) -> dict[str, SLO]:
        """The SLOs ``policy`` chooses its variants under: ``slos`` with every accuracy raised
        by :attr:`choose_above`, at most to the dense model's selection accuracy (a tighter
        margin down to none; asking more than dense leaves only variants that beat it by
        chance on the selection rows, and plans bent to serve them), and a task's raised
        further where its pick fell outside its margin on the held-out rows
        (:func:`~sparseloom.evaluation.tightening.raised_slo`)."""
        from sparseloom.evaluation.tightening import raised_slo

        levels = self._levels.get((policy, _slo_key(slos)), {})
        if not self.choose_above and not any(levels.values()):
            return dict(slos)
        chosen = {}
        for task, slo in slos.items():
            dense = self.selection_accuracy(task, None)
            floor = min(slo.accuracy + self.choose_above, dense)
            chosen[task] = raised_slo(slo, levels.get(task, 0), dense, floor)
        return chosen

    def tuned(self, name: str, slos: Mapping[str, SLO]) -> Any:
        """The tuned runtime ``name`` (``stock-tuned`` or ``picks-tuned``) under ``slos``.

        Each task's model (dense, or the pick) is measured in every configuration once per
        benchmark (:meth:`measure`); the best layouts that follow from the measurements and
        ``slos`` are tried with every task at once and the fastest serves
        (:mod:`sparseloom.evaluation.tuned_layouts`). Each new configuration is listed in
        :attr:`tunings`, with its layouts' trials.
        """
        from sparseloom.evaluation import stock_tuned, tuned_layouts
        from sparseloom.runtime.kept import not_kept

        stock = STOCK_RUNTIMES[name]
        models, measured = self.measure(name, slos)
        whole = {t: self.selection_accuracy(t, models[t]) for t in models}
        candidates = tuned_layouts.layouts(name, measured, self.cores, stock.picks, slos, whole)
        key = (name, tuple(models.items()), tuple(c.describe() for c in candidates))
        if key not in self._tuned:
            trial = LoadSpec("closed", queries=self.trial_queries,
                             min_duration_s=self.trial_min_s, seed=0)
            compressed = self.compressed_picks(slos) if stock.picks else None

            def serve_together(candidate: Any) -> RunSummary:
                return serve_stock(self.workload, self.zoos, candidate, trial, slos,
                                   picks=compressed)

            with not_kept():  # each layout is loaded once: never into the pool
                tuned, tried = tuned_layouts.choose(candidates, serve_together,
                                                    rounds=self.tuning_rounds,
                                                    progress=self.progress)
            self._tuned[key] = tuned
            self.tunings.append({
                "contender": name,
                "picks": self.picks(slos, TUNED_PICKS_POLICY) if stock.picks else None,
                "configuration": tuned.describe(), "predicted_bottleneck_ms": tuned.makespan_ms,
                "slos": {t: [s.accuracy, s.latency_ms] for t, s in slos.items()},
                "measured": stock_tuned.tuning_table(measured, slos, whole),
                "layouts": tried})
        return self._tuned[key]

    def measure(self, name: str, slos: Mapping[str, SLO]
                ) -> tuple[dict[str, tuple[int, ...] | None], list[Any]]:
        """Each task's model that the tuned runtime ``name`` serves under ``slos`` (``None``:
        the dense model) and every configuration of it measured alone, measuring those not
        measured yet in this benchmark (:func:`~sparseloom.evaluation.stock_tuned.
        measure_candidates`)."""
        from sparseloom.evaluation import stock_tuned
        from sparseloom.runtime.kept import not_kept

        stock = STOCK_RUNTIMES[name]
        compressed = self.compressed_picks(slos) if stock.picks else None
        tasks = list(self.workload.task_names)
        models = {t: compressed.get(t) if compressed else None for t in tasks}
        spec = stock_tuned.tuning_spec(self.tuning_queries, seed=0)
        configs = stock_tuned.candidates(self.cores, self.bf16)
        for task in tasks:
            if (task, models[task]) in self._measured:
                continue

            def serve_alone(task: str, choice: Any) -> RunSummary:
                one = stock_tuned.TunedRuntime(name, stock.picks, {task: choice})
                return serve_stock(self.workload, self.zoos, one, spec, slos, picks=compressed,
                                   tasks=[task])

            with not_kept():  # each configuration is loaded once: never into the pool
                self._measured[task, models[task]] = stock_tuned.measure_candidates(
                    serve_alone, task, configs, self.cores, self.progress,
                    rounds=self.tuning_rounds)
        return models, [m for t in tasks for m in self._measured[t, models[t]]]

    def compressed_picks(self, slos: Mapping[str, SLO]) -> dict[str, tuple[int, ...]]:
        """What ``picks-tuned`` serves under ``slos``: the picks of :data:`TUNED_PICKS_POLICY`
        less those that are the dense model at every position. Such a task serves its dense
        model and shares ``stock-tuned``'s measurements of it, so the two tuned runtimes
        differ only where a variant does (measured twice, the same model in the same
        configuration read 0.134 and 0.220 ms in one benchmark and moved its task to
        another runtime; AMD EPYC Zen 4, 2026-12-07)."""
        return self.without_dense(self.picks(slos, TUNED_PICKS_POLICY))

    def without_dense(self, picks: Mapping[str, tuple[int, ...]]
                      ) -> dict[str, tuple[int, ...]]:
        """``picks`` less those that are the dense model at every position."""
        from sparseloom.plugins.policies.baselines import dense_variant

        def dense(task: str, pick: Sequence[int]) -> bool:
            table = self.profile.task(task)
            return list(pick) == [dense_variant(table)] * table.n_positions

        return {t: p for t, p in picks.items() if not dense(t, p)}

    def measured_alone(self) -> dict[tuple[str, tuple[int, ...] | None], list[Any]]:
        """Every model a tuned runtime measured alone, by (task, pick; ``None``: dense): its
        :class:`~sparseloom.evaluation.stock_tuned.Measured` per configuration."""
        return dict(self._measured)

    def isolated_hot_ms(self, slos: Mapping[str, SLO]) -> dict[str, float]:
        """Each task's dense model alone on the benchmark's cores: the fastest hot median
        latency (ms) among the configurations ``stock-tuned`` measures that may serve it
        under ``slos`` (measuring them first if no contender has)."""
        from sparseloom.evaluation.stock_tuned import refusals

        self.measure("stock-tuned", slos)
        out = {}
        for task in self.workload.task_names:
            measured = self._measured[task, None]
            refused = refusals(measured, slos, {task: self.selection_accuracy(task, None)})
            out[task] = min(m.latency_ms for m, no in zip(measured, refused, strict=True)
                            if not no)
        return out

    def selection_accuracy(self, task: str, pick: Sequence[int] | None) -> float:
        """The accuracy on the selection rows of ``task``'s dense model (the zoo's record),
        or of its stitched variant ``pick`` (the profile's)."""
        if pick is None:
            return float(self.zoos[task].manifest["metric"]["dense"])
        profile = self.profile.task(task)
        return float(profile.accuracy()[int(profile.index(list(pick)))])


    def judged(self, task: str, pick: Sequence[int] | None, precision: str,
               slo_accuracy: float) -> Judged:
        """``pick`` of ``task`` (``None``: dense) judged on the task's held-out rows in
        ``precision`` against the margin ``slo_accuracy`` leaves below dense
        (:mod:`sparseloom.evaluation.judging`). The rows run once per benchmark for each
        (task, pick, precision); another SLO (a grid cell) only moves the margin."""
        from sparseloom.evaluation.judging import judge

        choices = None if pick is None else tuple(int(c) for c in pick)
        key = (task, choices, precision, round(float(slo_accuracy), 9))
        if key not in self.judgements:
            dense = self.selection_accuracy(task, None)
            margin = dense - float(slo_accuracy)
            ran = self._judged_runs.get(key[:3])
            if ran is None:
                ran, outputs = judge(
                    self.workload.task(task), self.zoos[task], choices, precision,
                    selection_drop=dense - self.selection_accuracy(task, choices),
                    margin=margin, dense_outputs=self._dense_outputs.get((task, precision)))
                self._dense_outputs[task, precision] = outputs
                self._judged_runs[key[:3]] = ran
            self.judgements[key] = attrs.evolve(ran, margin=margin)
        return self.judgements[key]


def profile_context(workload: Any, profile: Any, zoos: Mapping[str, Any], **settings: Any
                    ) -> ServeContext:
    """The :class:`ServeContext` of ``profile``'s own processors: their cores, the precision
    of its OpenVINO processor and each processor's judged precision, so that every command
    (``bench serve``, the demo) judges a pick in the precision it is served in.

    :param settings: the other fields of :class:`ServeContext` (``memory_budget``,
        ``tuning_queries``, ``tuning_rounds``, ``choose_above``, ``progress``).
    """
    from sparseloom.core.processors import openvino_cpu_precision, openvino_precision
    from sparseloom.runtime.models import profile_processors

    processors = profile_processors(profile)
    return ServeContext(workload, profile, zoos,
                        tuple(sorted({c for p in processors for c in p.cores})),
                        openvino_precision(processors),
                        bf16=openvino_cpu_precision() == "bf16",
                        processor_precisions={p.name: judged_precision(openvino_precision([p]))
                                              for p in processors}, **settings)


def _slo_key(slos: Mapping[str, SLO]) -> tuple[tuple[str, float, float], ...]:
    return tuple(sorted((t, s.accuracy, s.latency_ms) for t, s in slos.items()))
