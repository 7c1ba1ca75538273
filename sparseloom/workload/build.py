"""Turn a :class:`TaskDefinition` into a ready :class:`Task`: build and cache, or read files.

A builder task lives in ``<cache_dir>/workloads/<builder>-<hash>/`` where the hash covers
the builder's name, version and full config; it holds ``model.onnx``, ``eval.npz``,
``calibration.npz`` and ``meta.json`` (written last: its presence marks a complete build). A
build runs in a temporary sibling folder that is renamed into place, so an interrupted or
concurrent build never leaves a half-written cache entry.

A file task is checked against its model: the data holds exactly the model's inputs plus
``labels``, with matching ranks, static dimensions and dtypes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sparseloom.core.cache import cache_dir, cache_notice, config_hash, file_hash, file_lock
from sparseloom.core.errors import ConfigError
from sparseloom.workload import checks
from sparseloom.workload.evaluate import evaluate
from sparseloom.workload.held_out import CALIBRATION_FROM_EVAL
from sparseloom.workload.task import Task, TaskBuilder, TaskDefinition

MODEL_FILE = "model.onnx"
EVAL_FILE = "eval.npz"
CALIBRATION_FILE = "calibration.npz"
META_FILE = "meta.json"
LABELS_KEY = "labels"
#: The files of a built task's cache entry, and the meta.json key of their SHA-256 digests.
ENTRY_FILES = (MODEL_FILE, EVAL_FILE, CALIBRATION_FILE)
HASHES_KEY = "sha256"
#: The meta.json keys a cache entry must hold to be read.
_META_KEYS = ("metric", "input_names", "output_names")
#: Calibration samples taken from the eval set when a file task gives no calibration file.
DEFAULT_CALIBRATION_SAMPLES = 128


def builder_cache_key(builder: TaskBuilder, options: Mapping[str, Any]) -> tuple[dict, str]:
    """The full config of a builder task and the folder name it is cached under."""
    config = {**builder.defaults, **options}
    key = config_hash({"builder": builder.name, "version": builder.version, "config": config})
    return config, f"{builder.name}-{key}"


def build_task(
    definition: TaskDefinition, *, progress: bool = True, rebuild: bool = False
) -> Task:
    """The ready task for ``definition``: built (or taken from the cache), or read from files.

    :param rebuild: build a builder task again even when its cache entry is sound.
    """
    if definition.builder is not None:
        return _built_task(definition, definition.builder, progress, rebuild)
    assert definition.model is not None and definition.data is not None
    return load_task_files(
        definition.name,
        model=definition.model,
        data=definition.data,
        calibration=definition.calibration,
        metric=definition.metric,
        slo=definition.slo,
        description=definition.description,
    )


def _built_task(
    definition: TaskDefinition, builder: TaskBuilder, progress: bool, rebuild: bool = False
) -> Task:
    config, folder_name = builder_cache_key(builder, definition.options)
    root = cache_dir() / "workloads"
    folder = root / folder_name
    cache_hit = (folder / META_FILE).is_file() and not rebuild
    if cache_hit:
        problem = entry_problem(folder)
        if problem is not None:
            cache_notice(f"the cached build of task {definition.name!r} in {folder} is damaged "
                         f"({problem}); rebuilding it")
            cache_hit, rebuild = False, True
    if not cache_hit:
        with _build_lock(folder):
            if rebuild:
                shutil.rmtree(folder, ignore_errors=True)
            # Another process may have built it while this one waited for the lock.
            cache_hit = (folder / META_FILE).is_file()
            if not cache_hit:
                _build_into(folder, definition, builder, config, progress)
    meta = json.loads((folder / META_FILE).read_text())
    info = {**meta, "cache_hit": cache_hit, "cache_dir": str(folder)}
    return load_task_files(
        definition.name,
        model=folder / MODEL_FILE,
        data=folder / EVAL_FILE,
        calibration=folder / CALIBRATION_FILE,
        metric=meta["metric"],
        slo=definition.slo,
        description=definition.description or meta.get("description", ""),
        info=info,
        model_io=(meta["input_names"], meta["output_names"]),
    )


def entry_problem(folder: Path) -> str | None:
    """What is wrong with the cache entry ``folder`` (``None`` when it is sound).

    ``meta.json`` must parse and hold its keys, and each file must match the SHA-256 recorded
    at build time. An entry from before digests were recorded is checked by reading its files
    (ONNX and .npz parse) and, when sound, gets its digests recorded.
    """
    meta_path = folder / META_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{META_FILE} is not readable JSON: {error}"
    if not isinstance(meta, dict):
        return f"{META_FILE} holds {type(meta).__name__}, not an object"
    missing = [key for key in _META_KEYS if key not in meta]
    if missing:
        return f"{META_FILE} lacks {', '.join(missing)}"
    from sparseloom.workload.metrics import METRICS

    if meta["metric"] not in METRICS:
        return (f"{META_FILE} names metric {meta['metric']!r}, which is not one of "
                f"{', '.join(sorted(METRICS))}")
    absent = [name for name in ENTRY_FILES if not (folder / name).is_file()]
    if absent:
        return f"{', '.join(absent)} missing"
    hashes = meta.get(HASHES_KEY)
    if isinstance(hashes, dict):
        changed = [name for name in ENTRY_FILES if file_hash(folder / name) != hashes.get(name)]
        return f"{', '.join(changed)} changed since it was built" if changed else None
    try:
        import onnx

        onnx.load(os.fspath(folder / MODEL_FILE))
        for name in (EVAL_FILE, CALIBRATION_FILE):
            with np.load(folder / name, allow_pickle=False) as archive:
                for key in archive.files:
                    archive[key]
    except Exception as error:  # onnx's DecodeError, BadZipFile, EOFError, ValueError, ...
        return f"its files do not read back: {type(error).__name__}: {error}"
    meta[HASHES_KEY] = {name: file_hash(folder / name) for name in ENTRY_FILES}
    temporary = meta_path.with_name(f".{META_FILE}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(meta, indent=2, default=str))
        os.replace(temporary, meta_path)
    except OSError:  # a read-only cache stays usable; it is checked by reading again next time
        temporary.unlink(missing_ok=True)
    return None


def _build_lock(folder: Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on ``<folder>.lock`` so that concurrent runs build a task once."""
    return file_lock(folder.with_name(folder.name + ".lock"))


def _build_into(
    folder: Path,
    definition: TaskDefinition,
    builder: TaskBuilder,
    config: dict[str, Any],
    progress: bool,
) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    scratch.chmod(0o755)  # mkdtemp makes it private; the cache is shared
    try:
        started = time.perf_counter()
        returned = dict(builder.build(config, scratch, progress=progress))
        train_seconds = time.perf_counter() - started
        for required in (MODEL_FILE, EVAL_FILE, CALIBRATION_FILE):
            if not (scratch / required).is_file():
                raise ConfigError(f"builder {builder.name!r} did not write {required}")
        if "metric" not in returned:
            raise ConfigError(f"builder {builder.name!r} returned no 'metric'")
        facts = describe_model(scratch / MODEL_FILE)
        meta = {
            **returned,
            "builder": builder.name,
            "builder_version": builder.version,
            "config": config,
            "input_names": list(facts["inputs"]),
            "output_names": list(facts["outputs"]),
            "params": facts["params"],
            "model_bytes": (scratch / MODEL_FILE).stat().st_size,
        }
        task = load_task_files(
            definition.name,
            model=scratch / MODEL_FILE,
            data=scratch / EVAL_FILE,
            calibration=scratch / CALIBRATION_FILE,
            metric=returned["metric"],
        )
        meta["dense_metric"] = evaluate(task)
        meta["build_seconds"] = round(time.perf_counter() - started, 2)
        meta["train_seconds"] = round(train_seconds, 2)
        meta[HASHES_KEY] = {name: file_hash(scratch / name) for name in ENTRY_FILES}
        (scratch / META_FILE).write_text(json.dumps(meta, indent=2, default=str))
        try:
            os.replace(scratch, folder)
        except OSError:
            if not (folder / META_FILE).is_file():  # not a concurrent build that won the race
                raise
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def describe_model(model: Path) -> dict[str, Any]:
    """Inputs (name → (numpy dtype, shape with None for symbolic dims)), outputs and params."""
    import onnx
    from onnx import helper

    try:
        proto = onnx.load(os.fspath(model))
    except Exception as error:
        raise ConfigError(f"model {model} is not a readable ONNX file: {error}") from None
    initializers = {init.name for init in proto.graph.initializer}
    inputs = {}
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(
            dim.dim_value if dim.HasField("dim_value") else None for dim in tensor.shape.dim
        )
        inputs[value.name] = (np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)), shape)
    params = int(sum(np.prod(init.dims, dtype=np.int64) for init in proto.graph.initializer))
    output_shapes = {
        o.name: tuple(d.dim_value if d.HasField("dim_value") else None
                      for d in o.type.tensor_type.shape.dim)
        for o in proto.graph.output
    }
    return {"inputs": inputs, "outputs": [o.name for o in proto.graph.output], "params": params,
            "output_shapes": output_shapes}


def read_npz(path: Path, where: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` at ``path``; a :class:`ConfigError` starting with ``where``.

    A file that is not a zip archive is called that (``np.load`` would take it for a pickle
    and speak of "pickled (object) data").
    """
    fix = "write one array per name with numpy.savez(path, name=array, ...)"
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read {path}: {error.strerror or error}; check the "
                          "path and its permissions") from None
    if magic != b"PK\x03\x04":
        raise ConfigError(f"{where}: {path} is not an .npz archive (a zip file; it starts with "
                          f"{magic!r}); {fix}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except Exception as error:  # BadZipFile, EOFError, ValueError (object arrays), ...
        raise ConfigError(f"{where}: {path} is not a readable .npz: {error}; {fix}") from None


def _read_npz(path: Path, what: str, task: str) -> dict[str, np.ndarray]:
    return read_npz(path, f"task {task!r}: {what} file")


def _check_arrays(
    arrays: dict[str, np.ndarray],
    inputs: Mapping[str, tuple[np.dtype, tuple[int | None, ...]]],
    where: str,
) -> dict[str, np.ndarray]:
    missing = [name for name in inputs if name not in arrays]
    extra = [name for name in arrays if name not in inputs]
    if missing or extra:
        raise ConfigError(
            f"{where}: arrays {sorted(arrays)} do not match the model inputs {list(inputs)}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unexpected {extra}" if extra else "")
        )
    checked = {}
    sizes = set()
    for name, (dtype, shape) in inputs.items():
        array = arrays[name]
        if array.ndim != len(shape):
            raise ConfigError(
                f"{where}: array {name!r} has shape {array.shape}, the model input wants rank "
                f"{len(shape)} {shape}"
            )
        for axis, (got, want) in enumerate(zip(array.shape[1:], shape[1:], strict=True), start=1):
            if want is not None and got != want:
                raise ConfigError(
                    f"{where}: array {name!r} has shape {array.shape}, the model input wants "
                    f"{shape} (axis {axis}: {got} != {want})"
                )
        if array.dtype != dtype:
            if array.dtype.kind != dtype.kind:
                raise ConfigError(
                    f"{where}: array {name!r} has dtype {array.dtype}, the model input wants "
                    f"{dtype}"
                )
            array = array.astype(dtype)
        sizes.add(array.shape[0])
        checked[name] = array
    if len(sizes) > 1:
        raise ConfigError(f"{where}: the input arrays hold different sample counts {sorted(sizes)}")
    return checked


def load_task_files(
    name: str,
    *,
    model: Path,
    data: Path,
    calibration: Path | None = None,
    metric: str = "accuracy",
    slo: Any = None,
    description: str = "",
    info: Mapping[str, Any] | None = None,
    model_io: tuple[list[str], list[str]] | None = None,
) -> Task:
    """A :class:`Task` read from an ONNX model, an eval ``.npz`` and a calibration ``.npz``.

    ``model_io`` (input and output names, as recorded at build time) skips reading the model;
    without it the data is checked against the model's inputs.
    """
    eval_arrays = _read_npz(data, "data", name)
    if LABELS_KEY not in eval_arrays:
        raise ConfigError(
            f"task {name!r}: data file {data} has no 'labels' array (it holds "
            f"{sorted(eval_arrays)})"
        )
    labels = eval_arrays.pop(LABELS_KEY)
    calibration_arrays = _read_npz(calibration, "calibration", name) if calibration else None
    info = dict(info or {})
    classes = None
    if model_io is None:
        facts = describe_model(model)
        info.setdefault("params", facts["params"])
        info.setdefault("model_bytes", Path(model).stat().st_size)
        input_names, output_names = list(facts["inputs"]), facts["outputs"]
        if output_names:
            classes = checks.output_classes(facts["output_shapes"][output_names[0]])
            info.setdefault("classes", classes)
        eval_arrays = _check_arrays(eval_arrays, facts["inputs"], f"task {name!r}: data {data}")
        if calibration_arrays is not None:
            calibration_arrays = _check_arrays(
                calibration_arrays, facts["inputs"], f"task {name!r}: calibration {calibration}"
            )
    else:
        input_names, output_names = model_io
    where = f"task {name!r}: data file {data}"
    count = checks.check_rows(eval_arrays, where, checks.MIN_EVAL_ROWS,
                              "a metric over N rows moves in steps of 1/N")
    if labels.ndim == 0 or labels.shape[0] != count:
        raise ConfigError(f"{where} holds {count} samples but {labels.size} labels; give one "
                          "label row per sample")
    checks.check_finite(eval_arrays, where)
    checks.check_labels(labels, metric, where, classes)
    if calibration_arrays is None:
        calibration_arrays = {
            key: array[:DEFAULT_CALIBRATION_SAMPLES] for key, array in eval_arrays.items()
        }
        checks.check_calibration(calibration_arrays, f"task {name!r}: calibration rows (taken "
                                 f"from data file {data}; no calibration file given)")
        # the held-out split takes them again from the selection rows (workload.held_out)
        info[CALIBRATION_FROM_EVAL] = DEFAULT_CALIBRATION_SAMPLES
    else:
        checks.check_calibration(calibration_arrays, f"task {name!r}: calibration file "
                                 f"{calibration}")
    return Task(
        name=name,
        model_path=Path(model),
        eval_inputs=eval_arrays,
        labels=labels,
        calibration_inputs=calibration_arrays,
        metric=metric,
        slo=slo,
        input_names=input_names,
        output_names=output_names,
        description=description,
        info=info,
    )
