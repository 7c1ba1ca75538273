"""The dependency-light core of sparseloom: records, hooks, registry and algorithms.

Nothing in ``sparseloom.core`` imports openvino, onnxruntime, torch, xgboost or lightgbm at
module level; the plugins that need them import them inside their functions.

``__version__`` is here so that every layer can read it: ``sparseloom.__version__`` re-exports
it, and a module inside the package imports it from here, since importing ``sparseloom`` itself
would import its whole Python API (``sparseloom.api``) and close an import cycle through every
stage. ``pyproject.toml`` reads it from here too.
"""

__version__ = "0.1.0"
