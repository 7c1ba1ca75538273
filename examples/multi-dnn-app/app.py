"""A multi-DNN application on sparseloom: several sensors feed their models at their own rates.

The AR app of the SparseLoom paper's Fig. 1, on the bundled ``default`` workload: a camera
sends frames to ``vision`` at 30/s, a microphone sends audio chunks to ``speech``, a chat box
sends text to ``sentiment`` and an IMU sends sensor windows to ``activity`` — each from its own
client thread, each input drawn from the task's eval data, all served at once by one
``sparseloom.Server``. Halfway through, the app tightens one task's latency SLO (say, the user
opened a latency-critical view); the server re-plans without dropping a request. At the end it
prints, per task and per half, the requests answered, dropped (``Overloaded``) and failed,
the client-side p90 latency, the SLO attainment and the top-1 accuracy of the answers.

    python examples/multi-dnn-app/app.py                     # default, 20 s
    python examples/multi-dnn-app/app.py --seconds 60 --change vision --factor 0.5
    python examples/multi-dnn-app/app.py --workload tiny     # any workload works
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

import sparseloom
from sparseloom.cli.run import load_profiled

#: Requests per second each kind of client sends (others: DEFAULT_RATE).
RATES = {"vision": 30.0, "speech": 10.0, "sentiment": 5.0, "activity": 20.0}
DEFAULT_RATE = 20.0


class Client(threading.Thread):
    """Sends one task's eval inputs at a steady rate and records how each request went."""

    def __init__(self, server: sparseloom.Server, task: Any, rate: float, stop: threading.Event,
                 seed: int) -> None:
        super().__init__(name=f"client-{task.name}", daemon=True)
        self.server, self.task, self.rate, self.stop_event = server, task, rate, stop
        self.rows = list(range(task.num_eval))
        random.Random(seed).shuffle(self.rows)
        self.phase = 0  # 0 before the SLO change, 1 after
        self.outcomes: list[tuple[int, float, bool | None, str]] = []  # phase, ms, correct, err
        self.dropped = [0, 0]
        self._lock = threading.Lock()

    def run(self) -> None:
        period = 1.0 / self.rate
        due = time.perf_counter()
        sent = 0
        while not self.stop_event.is_set():
            row = self.rows[sent % len(self.rows)]
            inputs = {name: values[row:row + 1] for name, values in self.task.eval_inputs.items()}
            phase, started = self.phase, time.perf_counter()
            try:
                future = self.server.submit(self.task.name, inputs)
            except sparseloom.Overloaded:
                self.dropped[phase] += 1  # a real camera drops the frame and goes on
            else:
                future.add_done_callback(
                    lambda done, p=phase, s=started, r=row: self._record(done, p, s, r))
            sent += 1
            due += period
            time.sleep(max(due - time.perf_counter(), 0.0))

    def _record(self, future: Any, phase: int, started: float, row: int) -> None:
        # Runs on a sparseloom worker thread: keep it short.
        latency_ms = (time.perf_counter() - started) * 1e3
        error = future.exception()
        correct = None
        if error is None and self.task.labels.ndim == 1:
            output = next(iter(future.result().values()))
            correct = bool(np.argmax(output[0]) == self.task.labels[row])
        with self._lock:
            self.outcomes.append((phase, latency_ms, correct, str(error or "")))


def _report(clients: Mapping[str, Client], slos: list[dict[str, Any]]) -> None:
    print(f"\n{'task':<10} {'half':<5} {'answered':>8} {'dropped':>7} {'failed':>6} "
          f"{'p90 ms':>8} {'SLO ms':>7} {'attained':>8} {'top-1':>6}")
    for name, client in clients.items():
        for phase in (0, 1):
            rows = [o for o in client.outcomes if o[0] == phase]
            ok = [o for o in rows if not o[3]]
            latencies = sorted(o[1] for o in ok)
            p90 = latencies[max(int(np.ceil(0.9 * len(latencies))) - 1, 0)] if ok else float("nan")
            slo = slos[phase][name]
            attained = sum(o[1] <= slo.latency_ms for o in ok) / max(
                len(rows) + client.dropped[phase], 1)  # dropped and failed requests are misses
            scored = [o[2] for o in ok if o[2] is not None]
            top1 = f"{np.mean(scored):.3f}" if scored else "-"
            print(f"{name:<10} {phase + 1:<5} {len(ok):>8} {client.dropped[phase]:>7} "
                  f"{len(rows) - len(ok):>6} {p90:>8.2f} {slo.latency_ms:>7.2f} "
                  f"{attained:>8.1%} {top1:>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--seconds", type=float, default=20.0, help="How long the app runs.")
    parser.add_argument("--change", default=None,
                        help="The task whose latency SLO is tightened halfway (default: vision, "
                             "else the first task).")
    parser.add_argument("--factor", type=float, default=0.5,
                        help="The new latency SLO as a fraction of the old.")
    args = parser.parse_args()

    # The workload and the profile `sparseloom run` uses (its [profile] options; cached).
    workload, profile = load_profiled(args.workload, progress=True)
    names = list(workload.task_names)
    change = args.change or ("vision" if "vision" in names else names[0])
    print(f"planning and preloading {', '.join(names)} (the first run builds and profiles "
          f"the workload; later runs read the cache) ...")
    with sparseloom.Server(workload, profile, progress=True) as server:
        before = {name: server.stats().tasks[name].slo for name in names}
        stop = threading.Event()
        clients = {task.name: Client(server, task, RATES.get(task.name, DEFAULT_RATE), stop,
                                     seed) for seed, task in enumerate(workload.tasks)}
        for client in clients.values():
            client.start()
        for name, client in clients.items():
            print(f"  {name:<10} {client.rate:g} requests/s, SLO {before[name].latency_ms:.2f} "
                  f"ms, served by {server.stats().tasks[name].route}")
        time.sleep(args.seconds / 2)
        old = before[change].latency_ms
        for client in clients.values():
            client.phase = 1
        new = server.set_slo(change, latency_ms=old * args.factor)
        print(f"halfway: {change}'s latency SLO {old:.2f} -> {new.latency_ms:.2f} ms; now served "
              f"by {server.stats().tasks[change].route}")
        time.sleep(args.seconds / 2)
        stop.set()
        for client in clients.values():
            client.join()
        stats = server.stats()
    # Leaving the block answered every request still in flight.
    after = dict(before, **{change: new})
    _report(clients, [before, after])
    print(f"\nserver: submitted {stats.submitted} = completed {stats.completed} + failed "
          f"{stats.failed} (+ in flight at the last look); refused {stats.rejected}; "
          + ", ".join(f"{p.processor} {p.utilisation:.0%} busy"
                      for p in stats.processors.values()))


if __name__ == "__main__":
    main()
