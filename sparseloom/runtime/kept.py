"""Loaded models kept across runtimes (:func:`keep_loaded`), within a memory bound.

``sparseloom bench serve`` runs every contender many times, interleaved. Without a pool each
run would compile and load every model again (seconds per run, and a GIL-holding session build
per model); with an unbounded one every contender's models stay loaded together (3.2 GiB for
the demo's seven contenders on ``default``, AMD EPYC, 2026-12-03). The pool keeps what fits
``max_bytes`` and, when a run ends over it, unloads the idle models that are cheapest to load
again per byte they free (a cyclic A, B, C, A, … order defeats least-recently-used eviction:
it would evict exactly what runs next).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

__all__ = ["KeptModels", "keep_loaded", "kept", "not_kept", "release"]


@attrs.define(eq=False)
class _Entry:
    backend: Any
    loaded: Any
    bytes: int
    load_s: float
    users: int = 0


@attrs.define(eq=False)
class KeptModels:
    """The models a :func:`keep_loaded` block keeps, by (model file, processor).

    Attributes:
        max_bytes: the backend-measured bytes the idle models may hold together when a run
            ends (``None``: no bound). Models in use are never unloaded, so a single run may
            hold more.
        evicted: models unloaded to stay within it.
        reloads: loads of a model this block had kept before and evicted.
    """

    max_bytes: int | None = None
    evicted: int = 0
    reloads: int = 0
    _entries: dict[tuple[str, Any], _Entry] = attrs.field(factory=dict)
    _gone: set[tuple[str, Any]] = attrs.field(factory=set)

    def take(self, key: tuple[str, Any]) -> tuple[Any, Any] | None:
        """(backend, loaded model) kept for ``key``, now used by one more runtime; or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry.users += 1
        return entry.backend, entry.loaded

    def add(self, key: tuple[str, Any], backend: Any, loaded: Any, load_s: float) -> None:
        """Keep a model one runtime just loaded (and uses) for ``key``."""
        self.reloads += key in self._gone
        self._entries[key] = _Entry(backend, loaded, int(getattr(loaded, "memory_bytes", 0)),
                                    load_s, users=1)

    def drop(self, key: tuple[str, Any]) -> None:
        """Forget ``key`` without unloading it (its loader unloads it)."""
        self._entries.pop(key, None)

    def holds(self, loaded: Any) -> bool:
        """Whether ``loaded`` is one of the kept models."""
        return any(e.loaded is loaded for e in self._entries.values())

    @property
    def total_bytes(self) -> int:
        """Backend-measured bytes of every kept model."""
        return sum(e.bytes for e in self._entries.values())

    def release(self, loaded: Any) -> None:
        """A runtime no longer uses ``loaded``; unload idle models while over :attr:`max_bytes`."""
        for entry in self._entries.values():
            if entry.loaded is loaded:
                entry.users = max(0, entry.users - 1)
        self._trim()

    def _trim(self) -> None:
        if self.max_bytes is None:
            return
        total = self.total_bytes
        idle = sorted((k for k, e in self._entries.items() if e.users == 0),
                      key=lambda k: self._entries[k].load_s / max(1, self._entries[k].bytes))
        for key in idle:
            if total <= self.max_bytes:
                break
            entry = self._entries.pop(key)
            total -= entry.bytes
            self.evicted += 1
            self._gone.add(key)
            with contextlib.suppress(Exception):  # it is no longer served
                entry.backend.unload(entry.loaded)

    def close(self) -> None:
        """Unload every kept model."""
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            with contextlib.suppress(Exception):  # the models are no longer served
                entry.backend.unload(entry.loaded)


_KEPT: KeptModels | None = None


def kept() -> KeptModels | None:
    """The pool of the :func:`keep_loaded` block this process is in, or ``None``."""
    return _KEPT


@contextlib.contextmanager
def keep_loaded(max_bytes: int | None = None) -> Iterator[KeptModels]:
    """Within the block, a model loaded by any runtime stays loaded when that runtime stops,
    and a later runtime loading the same file on the same processor reuses it.

    :param max_bytes: bound the idle kept models' backend-measured bytes (``None``: keep every
        model until the block ends); see :class:`KeptModels`.
    :raises ValueError: ``max_bytes`` is negative.

    Leaving the block unloads them. A nested block shares the outer one's pool.
    """
    global _KEPT
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0 bytes, got {max_bytes}")
    if _KEPT is not None:
        yield _KEPT
        return
    _KEPT = KeptModels(max_bytes)
    try:
        yield _KEPT
    finally:
        pool, _KEPT = _KEPT, None
        pool.close()


@contextlib.contextmanager
def not_kept() -> Iterator[None]:
    """Within the block, runtimes load and unload their own models as if no
    :func:`keep_loaded` block were open (one-off loads, such as the configurations a tuned
    stock runtime measures once, do not fill the pool). Its models are untouched."""
    global _KEPT
    saved, _KEPT = _KEPT, None
    try:
        yield
    finally:
        _KEPT = saved


def release(backend: Any, loaded: Any) -> None:
    """A runtime is done with ``loaded``: hand it back to the pool that keeps it, else unload
    it (errors are ignored: it is no longer served)."""
    if _KEPT is not None and _KEPT.holds(loaded):
        _KEPT.release(loaded)
        return
    with contextlib.suppress(Exception):
        backend.unload(loaded)
