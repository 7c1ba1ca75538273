"""An example sparseloom plugin: one implementation of every kind a third party can add.

Installed, it registers through the ``sparseloom`` entry-point group (see ``pyproject.toml``),
so ``sparseloom plugins`` lists:

=========  ===============  =========================================================
kind       name             what it is
=========  ===============  =========================================================
backend    ``ortx``         ONNX Runtime on the CPU, written against the protocol only
compressor ``rounding``     rounds weight matrices to ``2**bits`` levels (bits 2..8)
estimator  ``knn``          k nearest measured stitched variants, averaged
policy     ``fastest-dense`` all-dense variants on the fastest processor order
=========  ===============  =========================================================

Each lives in its own module; this one only registers them. ``docs/plugins.md`` walks through
every line.
"""

from __future__ import annotations

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom_example_plugin.backend import OrtxBackend
from sparseloom_example_plugin.compressor import RoundingCompressor
from sparseloom_example_plugin.estimator import KnnEstimator
from sparseloom_example_plugin.policy import FastestDensePolicy

__all__ = ["FastestDensePolicy", "KnnEstimator", "OrtxBackend", "RoundingCompressor"]


@hookimpl
def sparseloom_register_backends(register: RegisterFn) -> None:
    """Register the ``ortx`` backend: its processor is ``ortx:CPU``."""
    register("ortx", OrtxBackend, description="ONNX Runtime on the CPU (example plugin)",
             capabilities=("CPU",))


@hookimpl
def sparseloom_register_compressors(register: RegisterFn) -> None:
    """Register the ``rounding`` compressor (variants ``rounding``, ``rounding-4``, ...)."""
    register("rounding", RoundingCompressor,
             description="round weight matrices to 2**bits evenly spaced values",
             capabilities=("rounding",))


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ``knn`` accuracy estimator."""
    register("knn", KnnEstimator, description="mean metric of the k nearest measured variants",
             capabilities=("accuracy",))


@hookimpl
def sparseloom_register_policies(register: RegisterFn) -> None:
    """Register the ``fastest-dense`` placement policy."""
    register("fastest-dense", FastestDensePolicy,
             description="all-dense variants on the fastest processor order")
