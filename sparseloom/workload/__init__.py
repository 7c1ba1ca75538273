"""Stage 1 — workloads: tasks (a dense ONNX model, labelled eval data, SLOs) and their sets.

:mod:`.task` holds the records, :mod:`.file` reads workload TOML files, :mod:`.build` builds and
caches tasks, :mod:`.load` resolves a name or path into a ready :class:`~.task.Workload`,
:mod:`.evaluate` scores a model on a task and :mod:`.metrics` holds the task metrics.
"""
