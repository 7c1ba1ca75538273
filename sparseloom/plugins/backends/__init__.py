"""Inference backends: ``ov`` (OpenVINO: CPU, GPU, NPU) and ``ort`` (ONNX Runtime: CPU, CUDA,
TensorRT). Runtimes are imported inside the backends' methods, never at import time."""
