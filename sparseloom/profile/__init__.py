"""Stage 3 — the profile: per-subgraph latency on every processor and estimated accuracy.

:mod:`.measure` times subgraphs, :mod:`.features` and the estimator plugins predict the
accuracy of stitched variants, :mod:`.builder` assembles a :class:`~.table.ProfileTable`
(stored by :mod:`.store`), :mod:`.validation`, :mod:`.metrics`, :mod:`.cost` and :mod:`.report`
check it against measured ground truth.
"""
