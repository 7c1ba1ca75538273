"""Ctrl-C that must not get lost: remembered, delivered again where Python dropped it, and
checked where long work loops.

Python raises ``KeyboardInterrupt`` in whatever Python code the main thread runs when the
signal is handled. Three things lose it:

- code whose exceptions Python drops — a garbage-collector callback, a ``__del__`` method, a
  weakref callback: it prints "Exception ignored in ..." and goes on. Long commands make that
  likely: a full collection walks the heap for tens of milliseconds while the signal waits,
  and the first Python code to run after it is the collector's callback
  (:class:`~sparseloom.runtime.heap.SurvivorFreeze`'s). Ctrl-C during ``sparseloom bench
  serve``'s start-up was lost two times in three that way;
- native code that turns it into another error (pybind11 turns one raised while a module
  initialises into an ``ImportError``), which a caller then handles;
- code that catches it and goes on (a benchmark that recorded the run it cut as INVALID and
  started the next).

:func:`redeliver_lost_interrupts` installs a :data:`sys.unraisablehook` that interrupts the
main thread again a few milliseconds after a dropped ``KeyboardInterrupt``, once the dropping
code has returned. :func:`remember_interrupts` (the command line installs it) records every
Ctrl-C, so that :func:`check` — called where work loops: between benchmark runs, while a load
is offered — and the command line's exit status see it whatever became of the exception.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Delay before a dropped Ctrl-C is delivered again: the code that dropped it (a collector
#: callback, a finaliser) returns within microseconds, so the main thread is back in code
#: that can raise.
REDELIVER_AFTER_S = 0.01

_previous_hook: Any = None
_pressed = threading.Event()


def redeliver_lost_interrupts() -> None:
    """Install the unraisable hook (idempotent): the command line and the survivor freeze
    call it."""
    global _previous_hook
    if _previous_hook is not None:
        return
    _previous_hook = sys.unraisablehook
    sys.unraisablehook = _hook


@contextmanager
def remember_interrupts() -> Iterator[None]:
    """Within the block, every Ctrl-C is recorded (:func:`pressed`) as well as raised; the
    handler that was there before comes back after it. A no-op off the main thread, or when
    SIGINT has a handler of its own (an application's) or none (ignored)."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
        else:
            previous = None
    _pressed.clear()
    try:
        yield
    finally:
        _pressed.clear()  # a Ctrl-C of this block says nothing about code after it
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def pressed() -> bool:
    """Whether Ctrl-C was pressed inside the :func:`remember_interrupts` block that runs now
    (``False`` once it has ended)."""
    return _pressed.is_set()


def check() -> None:
    """Raise ``KeyboardInterrupt`` when Ctrl-C was pressed, wherever its exception went."""
    if _pressed.is_set():
        raise KeyboardInterrupt


def _on_sigint(signum: int, frame: Any) -> None:
    _pressed.set()
    raise KeyboardInterrupt


def _hook(unraisable: Any) -> None:
    if isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type,
                                                            KeyboardInterrupt):
        timer = threading.Timer(REDELIVER_AFTER_S, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
        return
    _previous_hook(unraisable)
