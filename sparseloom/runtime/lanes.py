"""Lanes: a task's own serving thread, free to run on every core the processors have.

A processor's worker serves its tasks' calls one after another: a short task's request waits
for the call running ahead of it, however long. Where the latency SLOs are tight next to
the calls (the grid's k = 2 on ``default``: vision's 0.37 ms beside sentiment's 2.3 ms call),
no queue order helps, because a running call cannot be interrupted. The kernel can: a plan
that names a task in ``Plan.lanes`` serves it on a *lane* — a worker of its own, on the
processor the plan placed it on (same backend, options and precision, one thread), whose
thread may run on the cores of every processor. The lanes share the cores and the kernel
time-slices them, pre-empting a long call for a short one that wakes, as it does for the
threads of a stock runtime with one session per task.

A plan with ``Plan.lanes_pinned`` pins each lane to the cores of its own processor instead: the
tasks that share a processor then each have a thread there, and the kernel shares the core
among them by time — a short task's call no longer waits out a longer one's, and the fastest
task makes the most calls — while the processor's worker still serves its other tasks (and may
borrow the idle cores for them). Such a lane is named ``P@t`` + :data:`PINNED_MARK`.

A task of ``Plan.spares`` keeps its processor's worker and gets a *spare*: a lane pinned to the
cores of the *other* processors (named ``P@t`` + :data:`SPARE_MARK`), holding the same merged
model, listed as its route's replica (``Route.replicas``). A request goes to the spare only
when waiting at the processor would make it miss its latency SLO and the spare has fewer
requests (:func:`sparseloom.runtime.replicas.spare_or_own`): with one request in flight it
never runs; where requests queue (Poisson arrivals) the task runs on two cores at once once
its processor falls behind, as a stock runtime's two sessions of one model do. (One compiled
OpenVINO model called from two threads runs one call at a time: a second server needs a model
of its own.)

A lane of processor ``P`` for task ``t`` is the worker named ``P@t`` (:func:`lane_name`) whose
``lane_of`` is ``P``; it is created the first time a plan asks for it
(:func:`sparseloom.runtime.switching.ensure_lane`) and serves until the runtime stops. The
profile's figures for it are ``P``'s (:func:`profiled_as`); its call times, time-sliced by
design, are kept out of the processors' online calibration. A lane is known by ``lane_of``,
never by its name: a stock runtime's per-task processors are named ``P@t`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Separates a lane's processor from its task in the lane's name (``ort:CPU@vision``).
LANE_SEPARATOR = "@"
#: Ends the name of a lane pinned to its own processor's cores (``ort:CPU@vision/pinned``).
PINNED_MARK = "/pinned"
#: Ends the name of a task's spare, on the other processors' cores (``ov:CPU@sentiment/spare``).
SPARE_MARK = "/spare"


def lane_name(processor: str, task: str, pinned: bool = False, spare: bool = False) -> str:
    """The name of ``task``'s lane on ``processor`` (``pinned``: on its cores only;
    ``spare``: its spare, on the other processors' cores)."""
    mark = SPARE_MARK if spare else PINNED_MARK if pinned else ""
    return f"{processor}{LANE_SEPARATOR}{task}{mark}"


def is_spare(name: str) -> bool:
    """Whether the worker named ``name`` is a task's spare (``Plan.spares``)."""
    return name.endswith(SPARE_MARK)


def profiled_as(workers: Mapping[str, Any], name: str) -> str:
    """The processor whose profiled figures the worker named ``name`` has: a lane's
    processor, else ``name`` (also a name that is not a worker's)."""
    worker = workers.get(name)
    return getattr(worker, "lane_of", None) or name
