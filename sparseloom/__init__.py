"""sparseloom: multi-DNN inference of stitched sparse models on heterogeneous edge SoCs.

``import sparseloom`` is deliberately light: no inference runtime, training framework or
estimator library is imported here; the functions below import them when they are called.

The Python API (see ``docs/api.md``), in the order data flows:

* :func:`load_workload` — tasks: a dense ONNX model, labelled eval data, SLOs;
* :func:`build_zoos` — each task's model partitioned and compressed into a subgraph zoo;
* :func:`build_profile` / :func:`load_profile` — latency of every subgraph on every processor
  and the estimated accuracy of every stitched variant;
* :func:`refresh_profile` — re-time a sample of a cached profile, rescale it if it drifted;
* :func:`make_plan` — a processor order and a stitched variant per task under the SLOs, and the
  hot subgraphs to preload;
* :func:`serve` — all tasks served at once across the processors, with a run summary;
* :class:`Server` — an application's own requests served through futures, with live SLOs and
  tasks joining and leaving (:class:`Overloaded` past a task's queue bound,
  :class:`RequestFailed` for a request that could not be served).
"""

from __future__ import annotations

from sparseloom.api import (
    build_profile,
    build_zoos,
    load_profile,
    load_workload,
    make_plan,
    refresh_profile,
    serve,
)
from sparseloom.core import __version__
from sparseloom.core.errors import Overloaded, RequestFailed
from sparseloom.core.processors import set_backend_wrapper
from sparseloom.isolation.guard import guard

# Every backend the package hands out is behind the crash guard. It is installed here, where
# the package is first imported (before any of its modules runs), so that core/ does not
# import the isolation layer built on top of it.
set_backend_wrapper(guard)

__all__ = [
    "Overloaded",
    "RequestFailed",
    "Server",
    "__version__",
    "build_profile",
    "build_zoos",
    "load_profile",
    "load_workload",
    "make_plan",
    "refresh_profile",
    "serve",
]


def __getattr__(name: str) -> object:
    # ``Server`` is imported on first use: ``import sparseloom`` loads no runtime.
    if name == "Server":
        from sparseloom.runtime.server import Server

        return Server
    raise AttributeError(f"module 'sparseloom' has no attribute {name!r}")
