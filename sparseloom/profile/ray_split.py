"""How the Ray executor splits a profile's work and merges the results back (no Ray here).

* Accuracy: the requested stitched variants in groups sharing their first choice (so prefix
  sharing survives inside each Ray task), packed into about as many tasks as there are CPUs;
  merged back with a check that every variant came back exactly once.
* Latency: a device's processors (an SoC's CPU, GPU and NPU) are measured together by one actor,
  on the node that advertises the device's custom resource, so that their subgraphs are
  interleaved and their hand-offs timed exactly as
  :func:`~sparseloom.profile.measure.measure_task` does in one process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from sparseloom.core.errors import ConfigError, ProfileError

if TYPE_CHECKING:
    from sparseloom.core.types import Processor
    from sparseloom.profile.measure import TaskMeasurement


def device_groups(processors: Sequence[Processor], resources: Mapping[str, str],
                  cluster_resources: Mapping[str, float]) -> dict[str | None, list[int]]:
    """Processor indices by the custom resource of the node that measures them (``None``: the
    driver's node), in the order the processors come.

    :param resources: processor name or spec → resource name (``{"ov:NPU": "soc-npu"}``).
    :param cluster_resources: what the cluster advertises (``ray.cluster_resources()``).
    :raises ConfigError: a key that names no profiled processor.
    :raises ProfileError: a resource no node of the cluster advertises.
    """
    from sparseloom.core.processors import format_processor_spec

    names = [{p.name, format_processor_spec(p)} for p in processors]
    for key in resources:
        if not any(key in known for known in names):
            raise ConfigError(
                f"Ray resource given for processor {key!r}, which is not profiled; profiled "
                f"processors: {', '.join(p.name for p in processors)}")
    for resource in dict.fromkeys(resources.values()):
        if cluster_resources.get(resource, 0) < 1:
            advertised = ", ".join(sorted(cluster_resources)) or "none"
            raise ProfileError(
                f"no node of the Ray cluster advertises resource {resource!r} (it advertises: "
                f"{advertised}); start the device's node with `ray start --address HEAD:6379 "
                f"--resources '{{\"{resource}\": 1}}'`")
    groups: dict[str | None, list[int]] = {}
    for index, known in enumerate(names):
        chosen = next((resources[key] for key in resources if key in known), None)
        groups.setdefault(chosen, []).append(index)
    return groups


def merge_measurements(results: Sequence[TaskMeasurement], groups: Sequence[Sequence[int]],
                       count: int) -> TaskMeasurement:
    """One task's measurement over all ``count`` processors from each group's (their
    processors at the indices of ``groups``). Hand-offs between groups stay NaN."""
    from sparseloom.profile.measure import TaskMeasurement

    if len(results) == 1 and list(groups[0]) == list(range(count)):
        return results[0]
    first = results[0]
    cells = (*first.latency_ms.shape[:2], count)
    merged = TaskMeasurement(
        latency_ms=np.full(cells, np.nan), median_ms=np.full(cells, np.nan),
        spread_ms=np.full(cells, np.nan), compile_ms=np.full(cells, np.nan),
        load_ms=np.full(cells, np.nan), memory_bytes=np.zeros(cells, dtype=np.int64),
        handoff_ms=np.full((first.handoff_ms.shape[0], count, count), np.nan), failures=[],
        cold_ms=np.full(cells, np.nan))
    for result, indices in zip(results, groups, strict=True):
        where = np.asarray(indices)
        for field in ("latency_ms", "median_ms", "spread_ms", "compile_ms", "load_ms",
                      "memory_bytes"):
            getattr(merged, field)[:, :, where] = getattr(result, field)
        merged.cold_ms[:, :, where] = result.cold()
        merged.handoff_ms[:, where[:, None], where[None, :]] = result.handoff_ms
        merged.failures.extend(result.failures)
    return merged


def pack_by_first_choice(requested: Sequence[tuple[int, ...]],
                         bins: int) -> list[list[tuple[int, ...]]]:
    """``requested`` in groups sharing their first choice, packed into at most ``bins`` lists
    of about equal subgraph passes (largest group first onto the lightest list)."""
    from sparseloom.zoo.evaluate import prefix_passes

    groups: dict[int, list[tuple[int, ...]]] = {}
    for choices in requested:
        groups.setdefault(choices[0], []).append(choices)
    ordered = sorted(groups.values(), key=prefix_passes, reverse=True)
    packed: list[list[tuple[int, ...]]] = [[] for _ in range(min(bins, len(ordered)))]
    load = [0] * len(packed)
    for group in ordered:
        lightest = load.index(min(load))
        packed[lightest].extend(group)
        load[lightest] += prefix_passes(group)
    return [sorted(chunk) for chunk in packed]


def merge_metrics(requested: Sequence[tuple[int, ...]], chunks: Sequence[Sequence[tuple]],
                  results: Sequence[Mapping[tuple[int, ...], float]],
                  task: str) -> dict[tuple[int, ...], float]:
    """One metric per requested variant from the tasks' results; :class:`ProfileError` when a
    variant is missing, came back twice, or was never asked for."""
    merged: dict[tuple[int, ...], float] = {}
    for chunk, result in zip(chunks, results, strict=True):
        returned = {tuple(int(c) for c in k): float(v) for k, v in result.items()}
        twice = sorted(set(returned) & set(merged))
        unasked = sorted(set(returned) - set(chunk))
        missing = sorted(set(chunk) - set(returned))
        if twice or unasked or missing:
            raise ProfileError(
                f"task {task!r}: a Ray accuracy task returned a wrong set of stitched variants "
                f"(missing {missing[:3]}, returned twice {twice[:3]}, not asked for "
                f"{unasked[:3]}); nothing was cached, run the profile again")
        merged |= returned
    if sorted(merged) != list(requested):  # cannot happen if the chunks cover `requested`
        raise ProfileError(f"task {task!r}: {len(requested) - len(merged)} stitched variant(s) "
                           f"never came back from Ray; run the profile again")
    return dict(sorted(merged.items()))
