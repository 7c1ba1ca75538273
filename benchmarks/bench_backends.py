"""Backends benchmark: infer_async overhead versus the bare runtime call, and the parallel
speed-up of two CPU processors, side by side in one run.

    .venv/bin/python benchmarks/bench_backends.py [--requests 200] [--channels 32] [--json]

The same as ``sparseloom bench backends``; the logic lives in
:mod:`sparseloom.plugins.backends._bench`.
"""

from __future__ import annotations

import sys

from sparseloom.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "backends", *sys.argv[1:]]))
