"""The dependency-light core of sparseloom: records, hooks, registry and algorithms.

Nothing in ``sparseloom.core`` imports openvino, onnxruntime, torch, xgboost or lightgbm at
module level; the plugins that need them import them inside their functions.
"""
