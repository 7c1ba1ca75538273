"""Stage 2 — the subgraph zoo: partition each dense model, compress every piece, stitch.

:mod:`.graph` and :mod:`.tensors` are the ONNX plumbing, :mod:`.cost` the per-node costs,
:mod:`.partition` and :mod:`.extract` cut the dense model into layer-aligned subgraphs,
:mod:`.build` builds and loads the zoo on disk (:mod:`.manifest`, :mod:`.types`),
:mod:`.stitch` runs stitched variants, :mod:`.evaluate` measures them exactly with shared
prefixes and :mod:`.pareto` compares them with the originals.
"""
