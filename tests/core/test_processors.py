"""Processor specs, discovery across the registered backends, the default set, lookups."""

from __future__ import annotations

import os

import pytest

from sparseloom.core.errors import BackendError, ConfigError, UnknownNameError
from sparseloom.core.processors import (
    default_processors,
    discover_processors,
    format_processor_spec,
    get_processor,
    load_processors,
    parse_cores,
    parse_processor_spec,
)


def test_plain_name():
    spec = parse_processor_spec("ort:CUDA:0")
    assert (spec.backend, spec.device, spec.name) == ("ort", "CUDA:0", "ort:CUDA:0")
    assert spec.threads is None and spec.cores is None and spec.options == {}


def test_query_sets_fields_and_options():
    spec = parse_processor_spec(
        "ort:CPU?threads=2&cores=0-1&streams=3&session.intra_op.allow_spinning=0&on_fallback=warn")
    assert (spec.threads, spec.cores, spec.streams) == (2, (0, 1), 3)
    assert spec.options == {"session.intra_op.allow_spinning": "0", "on_fallback": "warn"}


def test_table_spec():
    spec = parse_processor_spec({"name": "ov:CPU", "threads": 1, "cores": [1],
                                 "options": {"PERFORMANCE_HINT": "LATENCY"}, "on_fallback": "warn"})
    assert spec.cores == (1,)
    assert spec.options == {"PERFORMANCE_HINT": "LATENCY", "on_fallback": "warn"}


@pytest.mark.parametrize(("value", "cores"), [("0", (0,)), ("0,2", (0, 2)), ("1-3,0", (0, 1, 2, 3)),
                                              ([2, 1], (1, 2)), (3, (3,))])
def test_parse_cores(value, cores):
    assert parse_cores(value) == cores


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("CPU", "must start with <backend>:<device>"),
        ("ort:", "must start with <backend>:<device>"),
        ("ort:CPU?threads=0", "threads='0' must be a positive integer"),
        ("ort:CPU?threads=two", "threads='two' must be a positive integer"),
        ("ort:CPU?cores=a-b", "is not a core list"),
        ("ort:CPU?threads", "key=value pairs"),
    ],
)
def test_malformed_specs_name_the_problem(spec, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        parse_processor_spec(spec)


def test_discovery_lists_both_cpu_processors_with_disjoint_cores():
    found = {p.name: p for p in discover_processors()}
    assert found["ov:CPU"].available and found["ort:CPU"].available
    assert found["ov:CPU"].threads == found["ort:CPU"].threads == 1
    if len(os.sched_getaffinity(0)) >= 2:
        assert not set(found["ov:CPU"].cores) & set(found["ort:CPU"].cores)


def test_default_set_has_two_backends():
    defaults = default_processors()
    assert {p.backend for p in defaults} >= {"ov", "ort"}
    assert all(p.available for p in defaults)


def test_default_openvino_cpu_computes_in_openvino_s_own_default_precision():
    """bf16 where OpenVINO computes bf16 by default on this CPU (AMX, AVX512-BF16), else the
    backend's f32; the same set for every command, so ``ov:CPU`` named alone stays f32."""
    import openvino

    own = openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    ov_cpu = next(p for p in default_processors() if p.name == "ov:CPU")
    expected = "bf16" if own == "bf16" else None
    assert ov_cpu.options.get("INFERENCE_PRECISION_HINT") == expected
    assert "INFERENCE_PRECISION_HINT" not in get_processor("ov:CPU").options
    ort_cpu = next(p for p in default_processors() if p.name == "ort:CPU")
    assert not ort_cpu.options


def test_get_processor_applies_overrides():
    base = get_processor("ort:CPU")
    tuned = get_processor("ort:CPU?threads=2&cores=0&graph_optimization_level=basic")
    assert (tuned.threads, tuned.cores) == (2, (0,))
    assert tuned.options["graph_optimization_level"] == "basic"
    assert tuned.full_name == base.full_name


def test_unknown_processor_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as caught:
        get_processor("ort:TPU")
    assert "unknown processor 'ort:TPU'" in str(caught.value)
    assert "ov:CPU" in str(caught.value) and "ort:CPU" in str(caught.value)


def test_unusable_cores_are_refused():
    with pytest.raises(ConfigError, match="not usable by this process"):
        get_processor("ov:CPU?cores=4096")


def test_unavailable_processor_says_why(monkeypatch):
    import attrs

    import sparseloom.core.processors as processors

    found = processors.discover_processors()
    ghost = attrs.evolve(found[0], name="ov:NPU", device="NPU", available=False,
                         reason="driver not loaded")
    monkeypatch.setattr(processors, "_discovered", [*found, ghost])
    with pytest.raises(BackendError, match="ov:NPU is not available: driver not loaded"):
        get_processor("ov:NPU")
    assert get_processor("ov:NPU", require_available=False) is ghost


def test_format_round_trips():
    tuned = get_processor("ort:CPU?threads=2&cores=1&on_fallback=warn")
    again = get_processor(format_processor_spec(tuned))
    assert again == tuned


def test_load_processors_from_toml(tmp_path):
    path = tmp_path / "processors.toml"
    path.write_text('[processors."ov:CPU"]\nthreads = 1\ncores = "0"\n'
                    '[processors."ort:CPU"]\ncores = [0]\nstreams = 2\n'
                    'options = { "session.intra_op.allow_spinning" = "0" }\n')
    loaded = {p.name: p for p in load_processors(path)}
    assert loaded["ov:CPU"].cores == (0,) and loaded["ort:CPU"].streams == 2
    assert loaded["ort:CPU"].options["session.intra_op.allow_spinning"] == "0"


def test_load_processors_rejects_an_empty_file(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("title = 'nothing'\n")
    with pytest.raises(ConfigError, match="has no"):
        load_processors(path)
