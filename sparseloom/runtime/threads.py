"""Which threads serve: every worker, overflow, control and closing thread marks itself here.

A call that waits for the runtime (``Server.infer``, a live change, ``close``) made *on* one
of them — from a future's done-callback, which runs on the worker that ended the request —
would wait for work that thread itself must do: a deadlock, or a thread joining itself. The
:class:`~sparseloom.Server` asks :func:`serving_thread` first and refuses (or, for ``close``,
goes on without waiting).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sparseloom.core.errors import RuntimeServeError

if TYPE_CHECKING:
    from collections.abc import Mapping


class _Waits(Protocol):
    def wait_idle(self, timeout_s: float) -> Any: ...


class Closable(Protocol):
    """What :class:`Closing` needs of a runtime (:class:`~sparseloom.runtime.executor.
    Runtime` is one), named here so that this module does not import the runtime."""

    @property
    def tasks(self) -> Mapping[str, Any]: ...

    @property
    def states(self) -> Mapping[str, Any]: ...

    @property
    def control(self) -> _Waits: ...

    def close_task(self, name: str, reason: str, *, fail_held: Any = ...) -> Any: ...

    def drain(self, timeout_s: float) -> int: ...

    def stop(self) -> Any: ...

_LOCAL = threading.local()


def mark_serving(role: str) -> None:
    """Mark the calling thread as one of the runtime's; ``role`` names it in errors (``the
    worker of ov:CPU``)."""
    _LOCAL.role = role


def serving_thread() -> str | None:
    """The role of the calling thread when it is one of a runtime's, else ``None``."""
    return getattr(_LOCAL, "role", None)


def refuse_on_serving_thread(call: str, instead: str) -> None:
    """Raise at once when the caller runs on a runtime's thread (a done-callback), where
    waiting for the runtime would deadlock (:mod:`sparseloom.runtime.threads`)."""
    role = serving_thread()
    if role is not None:
        raise RuntimeServeError(
            f"{call} called on {role} (a future's done-callback runs there), where waiting for "
            f"the server would deadlock it; {instead}")


@attrs.define(eq=False)
class Closing:
    """A server's close, on a thread of its own (:meth:`Server.close`): close every task,
    drain the requests in flight (failing those left after ``timeout_s``), stop the workers.
    The thread marks itself as serving, so a done-callback run by the drain cannot wait for
    it."""

    runtime: Closable
    timeout_s: float
    failed: int = 0
    error: BaseException | None = None
    done: threading.Event = attrs.field(factory=threading.Event)

    def start(self) -> None:
        """Start the close."""
        threading.Thread(target=self._run, name="sparseloom-run-close", daemon=True).start()

    def wait(self) -> int:
        """Wait for the close; how many requests the drain failed, or its exception."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.failed

    def _run(self) -> None:
        mark_serving("the closing thread")
        runtime = self.runtime
        try:
            for name in runtime.tasks:
                state = runtime.states[name]
                unrouted = state.route is None and state.pending is None
                runtime.close_task(name, "the server is closing", fail_held=(
                    "the server closed before the task was routed" if unrouted else ""))
            try:
                self.failed = runtime.drain(self.timeout_s)
                runtime.control.wait_idle(self.timeout_s)
            finally:
                runtime.stop()
        except BaseException as error:  # handed to the callers of wait()
            self.error = error
        finally:
            self.done.set()
