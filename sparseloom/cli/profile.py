"""``sparseloom profile``: build the profile table, optionally validate it against measurements."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.executor_options import executor_options
from sparseloom.cli.output import echo_json, echo_table, ensure_output_dir
from sparseloom.cli.parsing import MEASUREMENTS, ROUNDS, SAMPLES, SEED, SUBGRAPHS
from sparseloom.cli.placement_options import processors_option


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "-"
    if kind == "%":
        return f"{value:.1%}"
    if kind == "s":
        return f"{value:.1f} s"
    if kind == "ms":
        return f"{value:.3f} ms"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _workload_defaults(workload: Any) -> dict[str, Any]:
    """Options from a ``[profile]`` table of the workload file, when it has one."""
    source = getattr(workload, "source", None)
    if source is None:
        return {}
    import tomllib

    try:
        with open(source, "rb") as handle:
            table = tomllib.load(handle).get("profile", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return dict(table) if isinstance(table, dict) else {}


def profile_options(loaded: Any, **given: Any) -> Any:
    """The profile options of a command: ``given`` ones (``None`` = not given), else the
    workload file's ``[profile]`` table, else the defaults.

    `profile`, `plan`, `run`, `bench runtime`, `evaluate` and `simulate` all build their
    options here, so they find the same cached profile.
    """
    from sparseloom.profile.builder import ProfileOptions

    defaults = _workload_defaults(loaded)
    settings = {
        "accuracy_estimator": defaults.get("accuracy_estimator", "xgboost"),
        "latency_estimator": defaults.get("latency_estimator", "additive-fitted"),
        "samples": defaults.get("samples"),
        "feature_set": defaults.get("features", "extended"),
        "executor": defaults.get("executor", "local"),
        "ray_resources": defaults.get("ray_resources"),
    }
    settings.update({key: value for key, value in given.items() if value is not None})
    for option, key in (("--ray-address", "ray_address"), ("--ray-resource", "ray_resources")):
        if settings["executor"] != "ray" and given.get(key) is not None:
            from sparseloom.core.errors import ConfigError

            raise ConfigError(f"{option} applies to the ray executor only; add --executor ray "
                              f"(or [profile] executor = \"ray\" in the workload file)")
    return ProfileOptions(**settings)


def _variant_list(text: str | None) -> tuple[str, ...] | None:
    """``--variants`` as a tuple of names (``None``: the workload's, else the default)."""
    if text is None:
        return None
    from sparseloom.cli.parsing import comma_items

    return tuple(comma_items(text, "--variants", "dense,int8,unstructured-0.5", unique=True))


def _check_stitched_fit(subgraphs: int | None, variants: str | None) -> None:
    """Refuse an S whose V**S stitched variants cannot be held in memory, before any work.

    The profile keeps a few numbers per stitched variant (estimate, measured value, features
    in chunks); 32 bytes each is a safe lower bound, held against half the machine's memory.
    """
    import os

    from sparseloom.core.errors import ConfigError
    from sparseloom.zoo.variants import DEFAULT_VARIANTS

    if subgraphs is None:
        return
    count = len(variants.split(",")) if variants else len(DEFAULT_VARIANTS)
    need = 32 * count**subgraphs
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB
        memory = 16 << 30
    if need > memory // 2:
        fits = max(s for s in range(1, subgraphs) if 32 * count**s <= memory // 2) \
            if 32 * count <= memory // 2 else 0
        raise ConfigError(
            f"-S {subgraphs} with {count} variants makes {count}**{subgraphs} stitched "
            f"variants, about {_gib(need)} GiB of profile for {memory / 2**30:.0f} GiB "
            f"of memory; use -S {fits} or fewer, or fewer variants")


def _gib(size_bytes: int) -> str:
    """``size_bytes`` in GiB, in words a terminal can print even past a float's range."""
    gib = size_bytes >> 30
    return f"{gib:,}" if gib < 10**15 else f"10^{len(str(gib)) - 1}"


def _table_summary(table: Any) -> dict[str, Any]:
    from sparseloom.profile.cost import estimator_seconds

    tasks = {}
    for name, profile in table.tasks.items():
        best = profile.accuracy()
        tasks[name] = {
            "positions": profile.n_positions, "variants": profile.n_variants,
            "stitched": profile.n_stitched, "samples": table.meta["samples"][name],
            "best_accuracy": float(best.max()),
            "latency_ms_range": [float(profile.latency_ms.min()),
                                 float(profile.latency_ms.max())],
            "seconds": estimator_seconds(table.meta["timings"][name]),
            "cache_hits": table.meta["cache_hits"][name],
        }
    from sparseloom.profile.numerics import unfaithful_summary

    return {"workload": table.workload, "processors": list(table.processors),
            "estimators": table.meta["estimators"], "unfaithful": unfaithful_summary(table),
            "profile_directory": table.meta["table_directory"], "tasks": tasks,
            "failures": table.meta["failures"]}


def _echo_validation(report: dict[str, Any]) -> None:
    click.echo(f"workload {report['workload']} on {', '.join(report['processors'])}; "
               f"estimators: accuracy={report['estimators']['accuracy']} "
               f"({report['estimators']['feature_set']} features), "
               f"latency={report['estimators']['latency']}")
    rows = []
    for name, entry in [*report["tasks"].items(), ("overall", report["overall"])]:
        accuracy, latency, cost = entry["accuracy"], entry["latency"], entry["profiling"]
        recall = accuracy.get("top_k_recall", {})
        rows.append([
            name, _fmt(recall.get("5"), "%"), _fmt(recall.get("10"), "%"),
            _fmt(accuracy.get("spearman")), _fmt(accuracy.get("mae")),
            _fmt(latency.get("mae_ms"), "ms"), _fmt(latency.get("mape"), "%"),
            _fmt(latency.get("mean_baseline_mape"), "%"), _fmt(latency.get("pearson_r")),
            _fmt(cost.get("seconds"), "s"), _fmt(cost.get("exhaustive_seconds_estimate"), "s"),
            _fmt(cost.get("exhaustive_seconds_measured"), "s"),
            _fmt(cost.get("v10", {}).get("reduction"), "%"),
        ])
    echo_table(["task", "top-5", "top-10", "spearman", "acc MAE", "lat MAE", "lat MAPE",
                "mean-only MAPE", "lat r", "profiling", "exhaustive", "measured",
                "saving V=10"], rows)
    goals = report["goals"]
    for key, label in (("top_10_recall", "top-10 recall"), ("latency_mape", "latency MAPE")):
        goal = goals[key]
        verdict = "MET" if goal["met"] else "NOT MET"
        context = ""
        if "mean_baseline" in goal:  # a MAPE means little unless it beats predicting the mean
            context = (f", always-the-mean baseline {_fmt(goal['mean_baseline'], '%')}, "
                       f"Pearson r {_fmt(goal['pearson_r'])}")
        click.echo(f"{label}: {_fmt(goal['ours'], '%')} (paper {goal['paper']:.2%}{context}) "
                   f"{verdict}")
    strict = [("top_10_recall_every_task", "top-10 recall on every task", ">="),
              ("latency_mape_overall", "latency MAPE overall", "<="),
              ("latency_mape_every_task", "latency MAPE on every task (worst)", "<=")]
    for key, label, relation in strict:
        if key in goals:
            goal = goals[key]
            click.echo(f"{label}: {_fmt(goal['ours'], '%')} (goal {relation} "
                       f"{goal['goal']:.0%}) {'MET' if goal['met'] else 'NOT MET'}")
    reused = {name: entry["latency"].get("timed_at") for name, entry in report["tasks"].items()
              if entry["latency"].get("from_cache")}
    if reused:
        click.echo("latency chains read from the cache (timed at "
                   + ", ".join(f"{name} {when}" for name, when in reused.items())
                   + "); --no-cache times everything again")
    for name, entry in report["tasks"].items():
        useful = entry["latency"].get("usefulness")
        if useful:  # per task: beat the mean by a third and r >= 0.9, unless it is all noise
            click.echo(f"latency estimate useful on {name}: {useful['verdict']} (MAPE "
                       f"{_fmt(entry['latency'].get('mape'), '%')} vs mean-only "
                       f"{_fmt(entry['latency'].get('mean_baseline_mape'), '%')}, r "
                       f"{_fmt(entry['latency'].get('pearson_r'))} of at most "
                       f"{_fmt(useful.get('r_ceiling'))} given chain noise "
                       f"{_fmt(useful['noise_ms'], 'ms')} on a spread of "
                       f"{_fmt(useful['spread_ms'], 'ms')})")
    _echo_failures(report["failures"])


def _echo_failures(failures: list[dict[str, Any]]) -> None:
    from sparseloom.profile.measure import ProfileFailure

    for failure in failures:
        click.echo(f"warning: {ProfileFailure(**failure).describe()}", err=True)


def _command_line(ctx: click.Context) -> str:
    """The command as typed, reduced to the options that differ from their defaults."""
    words = ["sparseloom", "profile", str(ctx.params["workload"])]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or value in (param.default, None, (), False):
            continue
        flag = param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]
        if param.is_flag:
            words.append(flag)
        else:
            for item in value if isinstance(value, tuple) else (value,):
                words += [flag, str(item)]
    return " ".join(shlex.quote(w) for w in words)


@click.command("profile")
@click.argument("workload")
@processors_option("Processor spec (repeat); default: the workload's, else all available.")
@click.option("--accuracy-estimator", default=None,
              help="Accuracy estimator by name (default: the workload's, else xgboost).")
@click.option("--latency-estimator", default=None,
              help="Latency estimator by name (default: the workload's, else additive-fitted).")
@click.option("--samples", type=SAMPLES, default=None,
              help="N: stitched variants measured exactly per task to train on.")
@click.option("--features", type=click.Choice(["extended", "paper"]), default=None,
              help="Accuracy features: paper (source accuracies) or extended (default).")
@click.option("--repeats", type=MEASUREMENTS.at_least(3), default=20, show_default=True,
              help="Timed rounds per subgraph.")
@click.option("--warmup", type=MEASUREMENTS.at_least(0), default=3, show_default=True,
              help="Untimed runs per subgraph before the timed rounds (loads caches, JITs).")
@click.option("--statistic", type=click.Choice(["median", "p25", "p10", "min"]),
              default="p25", show_default=True,
              help="What of the timed rounds a latency records; p25 resists a busy machine.")
@click.option("--burst", type=MEASUREMENTS.at_least(1), default=None,
              help="Calls per timed sample: 1 times a cold call; N > 1 the median of calls 2..N "
                   "of N back to back (hot), as a busy worker makes them (default: the "
                   "profiler's, docs/profile.md).")
@click.option("--subgraphs", "-S", type=SUBGRAPHS, default=None,
              help="S (default: one per processor).")
@click.option("--variants", default=None,
              help="The zoo's variants, comma-separated, dense first, as `zoo build --variants` "
                   "takes them (default: the workload file's 'variants', else the default "
                   "list of docs/zoo.md).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seeds the sampling of stitched variants and the estimators' training.")
@click.option("--validate", is_flag=True,
              help="Measure the ground truth and report how good the estimates are.")
@click.option("--latency-samples", type=SAMPLES, default=60, show_default=True,
              help="Random stitched variants × orders run end to end for validation.")
@click.option("--exhaustive-chains", type=SAMPLES.at_least(0), default=250, show_default=True,
              help="Time every (stitched variant, order) chain when there are at most this "
                   "many, so exhaustive profiling is measured; 0 never does.")
@click.option("--redraws", type=ROUNDS, default=10, show_default=True,
              help="Training sets drawn per task when validating accuracy.")
@click.option("--no-ablation", is_flag=True, help="Skip the other estimators / features.")
@click.option("--refresh", type=click.Choice(["rescale", "full"]), is_flag=False,
              flag_value="rescale", default=None,
              help="Re-time a sample of the cached profile's subgraphs; rescale the latencies "
                   "of processors that drifted (or re-time them all: --refresh full).")
@click.option("--refresh-sample", type=SAMPLES, default=4, show_default=True,
              help="Subgraphs re-timed per task by --refresh (each on every processor).")
@click.option("--refresh-rounds", type=ROUNDS.at_least(3), default=None,
              help="Timed rounds of the --refresh sample (default: the profile's --repeats).")
@click.option("--drift-threshold", type=click.FloatRange(min=0, min_open=True), default=0.25,
              show_default=True, help="Relative change that counts as drift (0.25 = 25%).")
@click.option("--no-cache", is_flag=True, help="Measure everything again.")
@click.option("--strict", is_flag=True, help="Exit 1 when any subgraph failed to profile.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write report.json, the profile table and the plots here.")
@executor_options
def profile_command(workload: str, processors: tuple[str, ...], accuracy_estimator: str | None,
                    latency_estimator: str | None, samples: int | None, features: str | None,
                    repeats: int, warmup: int, statistic: str, burst: int | None,
                    subgraphs: int | None, seed: int,
                    validate: bool, latency_samples: int, exhaustive_chains: int,
                    redraws: int, no_ablation: bool, refresh: str | None,
                    refresh_sample: int, refresh_rounds: int | None,
                    drift_threshold: float,
                    no_cache: bool, strict: bool, as_json: bool, out: Path | None,
                    variants: str | None = None,
                    executor_settings: dict[str, Any] | None = None) -> None:
    """Profile WORKLOAD: per-subgraph latencies and estimated accuracy of stitched variants.

    Measures every subgraph on every processor and a sample of stitched variants exactly,
    trains the accuracy estimator and writes the profile table (docs/profile.md). With
    --validate it also measures every stitched variant's accuracy and random end-to-end
    chains, and reports top-K recall, Spearman, MAE, latency MAE/MAPE and profiling cost.
    """
    from sparseloom.api import build_profile, load_workload
    from sparseloom.profile.measure import ProfilerConfig

    _check_mode_options(click.get_current_context(), refresh=refresh is not None,
                        validate=validate)
    if out is not None:  # before minutes of measuring, not after
        ensure_output_dir(out, "--out")
    _check_stitched_fit(subgraphs or len(processors) or None,
                        click.get_current_context().params.get("variants"))
    loaded = load_workload(workload, progress=not as_json)
    options = profile_options(
        loaded, accuracy_estimator=accuracy_estimator, latency_estimator=latency_estimator,
        samples=samples, feature_set=features,
        config=ProfilerConfig(warmup=warmup, repeats=repeats, statistic=statistic,
                              **({} if burst is None else {"burst": burst})),
        subgraphs=subgraphs, seed=seed, variants=_variant_list(variants),
        **(executor_settings or {}))
    progress = sys.stderr.isatty()
    if refresh is not None:
        from sparseloom.cli.profile_refresh import run_refresh

        if drift_threshold >= 1:
            click.echo(f"Warning: --drift-threshold {drift_threshold:g} means a change of "
                       f"{drift_threshold:.0%} before a processor counts as drifted; for "
                       f"{drift_threshold:g}% write {drift_threshold / 100:g}", err=True)

        run_refresh(loaded, processors=processors, options=options, mode=refresh,
                    sample=refresh_sample, rounds=refresh_rounds, threshold=drift_threshold,
                    as_json=as_json, out=out)
        return
    if validate:
        from sparseloom.profile.report import validate as run_validation

        table, result = run_validation(
            loaded, processors=processors or None, options=options,
            latency_samples=latency_samples, exhaustive_chain_limit=exhaustive_chains,
            repeats=redraws, ablation=not no_ablation,
            use_cache=not no_cache, progress=progress)
        result["command"] = _command_line(click.get_current_context())
    else:
        table = build_profile(loaded, processors=processors or None, options=options,
                              use_cache=not no_cache, progress=progress)
        result = _table_summary(table)
    if out is not None:
        from sparseloom.cli.profile_plots import write_plots

        out.mkdir(parents=True, exist_ok=True)
        table.save(out / "profile")
        (out / "report.json").write_text(json.dumps(result, indent=2, default=str))
        if validate:
            result["plots"] = [str(p) for p in write_plots(result, out)]
    if as_json:
        echo_json(result)
    elif validate:
        _echo_validation(result)
    else:
        echo_table(["task", "S", "V", "stitched", "samples", "best metric", "seconds"], [
            [name, t["positions"], t["variants"], t["stitched"], t["samples"],
             _fmt(t["best_accuracy"]), _fmt(t["seconds"], "s")]
            for name, t in result["tasks"].items()])
        click.echo(f"profile table: {table.meta['table_directory']}")
        from sparseloom.profile.numerics import describe_unfaithful

        for line in describe_unfaithful(table, options.evaluation_processor):
            click.echo(line)
        _echo_failures(table.meta["failures"])
    if strict and table.meta["failures"]:
        raise click.ClickException(
            f"{len(table.meta['failures'])} subgraph(s) failed to profile; see the warnings")


# Options that only one mode of ``profile`` reads; given to another mode they would be
# ignored without a word, so they are refused instead.
_VALIDATE_ONLY = ("latency_samples", "exhaustive_chains", "redraws", "no_ablation")
_REFRESH_ONLY = ("refresh_sample", "refresh_rounds", "drift_threshold")
_NOT_WITH_REFRESH = ("no_cache", "strict")


def _check_mode_options(ctx: click.Context, *, refresh: bool, validate: bool) -> None:
    """Refuse an option given on the command line that the chosen mode would ignore."""
    def given(names: tuple[str, ...]) -> list[str]:
        return [f"--{name.replace('_', '-')}" for name in names
                if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]

    if refresh and validate:
        raise click.UsageError("--refresh and --validate do not combine; run them apart")
    if not validate and (stray := given(_VALIDATE_ONLY)):
        raise click.UsageError(f"{', '.join(stray)} apply to --validate only; add --validate "
                               f"or leave them out")
    if not refresh and (stray := given(_REFRESH_ONLY)):
        raise click.UsageError(f"{', '.join(stray)} apply to --refresh only; add --refresh "
                               f"or leave them out")
    if refresh and (stray := given(_NOT_WITH_REFRESH)):
        raise click.UsageError(f"{', '.join(stray)} do not apply to --refresh (it re-times "
                               f"the cached profile; --refresh full re-times all of it)")


COMMANDS = (profile_command,)
