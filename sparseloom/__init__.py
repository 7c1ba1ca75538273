"""sparseloom: multi-DNN inference of stitched sparse models on heterogeneous edge SoCs.

``import sparseloom`` is deliberately light: no inference runtime, training framework or
estimator library is imported here. The plugins import them when they are used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
