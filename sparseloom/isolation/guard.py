"""The crash guard: every backend the pipeline uses loads only combinations a probe saw work.

:func:`sparseloom.core.processors.get_backend` hands out each backend behind a
:class:`GuardedBackend`. Its ``compile(model, processor)`` first looks up the combination's
probe outcome (:mod:`sparseloom.isolation.probe`) and probes it in a child process when none
is recorded. When it crashed, the guard tries, in this order and each by probe, the
alternatives the pipeline registered for the model (:func:`register_alternative`: the dynamic
batch model behind a batch-1 copy) and the backend's own safer configurations
(``backend.safer_processors(processor)``: a lower ONNX Runtime graph optimization level), and
uses the first that works, with one ``Warning:`` line. When none works it raises
:class:`~sparseloom.core.errors.NativeCrashError`, which every stage treats as it treats an
unsupported model: the processor is skipped for that subgraph.

Callers that know many models up front (the profiler, exact evaluation, the runtime's loads)
call :func:`prepare` so that the probe processes take them all at once, side by side.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sparseloom.core.errors import NativeCrashError
from sparseloom.core.types import Processor
from sparseloom.isolation.probe import (
    ProbeItem,
    ProbeOutcome,
    combination_key,
    describe,
    run_probes,
    start_probes,
)

#: A batch-1 copy (or other derived model) → the model it was made from, and how to name it.
_ALTERNATIVES: dict[str, tuple[str, str]] = {}
#: How messages name a derived model (``the batch-1 copy of p0_v3.onnx``), by its path.
_LABELS: dict[str, str] = {}
_warned: set[str] = set()
_lock = threading.RLock()


def register_alternative(model: str | os.PathLike[str], original: str | os.PathLike[str],
                         what: str, label: str) -> None:
    """Declare ``original`` a stand-in for ``model`` should ``model`` crash a backend: ``what``
    names the stand-in in the warning (``the model with a dynamic batch``), ``label`` names
    ``model`` (``the batch-1 copy of p0_v3.onnx``)."""
    if os.fspath(model) != os.fspath(original):
        _ALTERNATIVES[os.fspath(model)] = (os.fspath(original), what)
        _LABELS[os.fspath(model)] = label


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    print(f"Warning: {message}", file=sys.stderr, flush=True)


class GuardedBackend:
    """``backend`` (a registered backend instance) behind the crash guard.

    Everything but ``compile`` and ``load`` passes straight through; ``isinstance`` sees the
    backend's own class.
    """

    __slots__ = ("_chosen", "_factory", "_inner", "_version")

    def __init__(self, inner: Any, factory: Callable[[], Any], version: str) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_factory", factory)
        object.__setattr__(self, "_version", version)
        #: id(compiled) → (compiled, the processor asked for, the safer one chosen instead)
        object.__setattr__(self, "_chosen", {})

    @property  # type: ignore[misc]  # isinstance() sees the backend's own class
    def __class__(self) -> type:
        return type(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._inner, name)

    # -- the guarded calls ------------------------------------------------------------------

    def compile(self, model: Any, processor: Processor) -> Any:
        """The backend's ``compile`` of the first combination of ``model`` and ``processor`` (or
        of their alternatives) that a probe saw compile, load and run.

        :raises NativeCrashError: every alternative crashed in its probe.
        """
        path = _model_path(model)
        chosen_path, chosen = self._choose(path, processor)
        compiled = self._inner.compile(chosen_path, chosen)
        if chosen != processor:
            with _lock:
                self._chosen[id(compiled)] = (compiled, processor, chosen)
        return compiled

    def load(self, compiled: Any, processor: Processor) -> Any:
        """The backend's ``load``; of a model ``compile`` gave a safer configuration, with that
        configuration."""
        with _lock:
            entry = self._chosen.get(id(compiled))
        if entry is not None and entry[0] is compiled and entry[1] == processor:
            processor = entry[2]
        return self._inner.load(compiled, processor)

    # -- choosing ---------------------------------------------------------------------------

    def item(self, path: str, processor: Processor) -> ProbeItem:
        """The probe of ``path`` on ``processor`` with this backend."""
        settings = getattr(self._inner, "effective_settings", None)
        label = _LABELS.get(path, Path(path).name)
        return ProbeItem(combination_key(self._version, path, processor), self._factory, path,
                         processor, describe(self._version, label, processor,
                                             settings(processor) if callable(settings) else None))

    def candidates(self, path: str, processor: Processor) -> list[tuple[str, Processor, str]]:
        """(model, processor, how to name it) to try, the asked-for combination first."""
        models = [(path, "")]
        if path in _ALTERNATIVES:
            original, what = _ALTERNATIVES[path]
            models.append((original, what))
        safer = getattr(self._inner, "safer_processors", None)
        configs: list[tuple[Processor, str]] = [(processor, "")]
        if callable(safer):
            configs += list(safer(processor))
        found = []
        for config, config_what in configs:
            for model, model_what in models:
                what = " and ".join(w for w in (model_what, config_what) if w)
                found.append((model, config, what))
        return found

    def _choose(self, path: str, processor: Processor) -> tuple[str, Processor]:
        candidates = self.candidates(path, processor)
        first = self.item(path, processor)
        outcome = run_probes([first])[first.key]
        if outcome.usable:
            if outcome.status == "unprobed":
                _warn_once(first.key, f"{first.description} is loaded without a probe: "
                           f"{outcome.detail}")
            return path, processor
        rest = [self.item(model, config) for model, config, _ in candidates[1:]]
        outcomes = run_probes(rest) if rest else {}
        for (model, config, what), item in zip(candidates[1:], rest, strict=True):
            if outcomes[item.key].status in ("ok", "raised"):
                _warn_once(first.key, f"{_said(outcome, first)}; using {what} instead "
                           f"(outcome cached under the sparseloom cache's probes/)")
                return model, config
        _warn_once(first.key, f"{_said(outcome, first)}; sparseloom does not use "
                   f"{processor.name} for this model")
        raise NativeCrashError(f"{_said(outcome, first)}"
                               + (f", and so did {len(rest)} alternative(s)" if rest else "")
                               + "; the processor is skipped for this model (to probe again, "
                               "delete the sparseloom cache's probes/ folder)")


def _said(outcome: ProbeOutcome, item: ProbeItem) -> str:
    verb = "hung" if outcome.status == "hung" else "crashed"
    return f"{item.description} {verb} in a probe process ({outcome.detail})"


def _model_path(model: Any) -> str:
    """``model`` as a file path; an in-memory ``ModelProto`` is written to the cache once."""
    if isinstance(model, str | os.PathLike):
        return os.fspath(model)
    from sparseloom.core.cache import cache_dir

    data = model.SerializeToString()
    target = cache_dir() / "probes" / "models" / f"{hashlib.sha256(data).hexdigest()[:24]}.onnx"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)
    return str(target)


def prepare(requests: Iterable[tuple[Any, str | os.PathLike[str], Processor]]) -> None:
    """Start probing every (backend, model path, processor) not yet probed, side by side in
    the probe processes, and return at once: a later ``compile`` of one of them waits only for
    its own probe, so the first models load while the next are still probed. Backends that
    are not guarded (isolation off) are skipped. The alternatives of a model that crashed are
    probed when its ``compile`` asks for them."""
    start_probes([backend.item(os.fspath(path), processor)
                  for backend, path, processor in requests if type(backend) is GuardedBackend])


def wait_probed(backend: Any, path: str | os.PathLike[str], processor: Processor) -> None:
    """Wait for the probe of (``backend``, ``path``, ``processor``), probing it if no one has:
    what a caller that times ``compile`` does first, so the time is the compile's alone."""
    if type(backend) is GuardedBackend:
        run_probes([backend.item(os.fspath(path), processor)])


def guard(backend: Any, factory: Callable[[], Any], version: str) -> Any:
    """``backend`` behind the crash guard (as it is when isolation is off)."""
    from sparseloom.isolation.probe import isolation_enabled

    return GuardedBackend(backend, factory, version) if isolation_enabled() else backend
