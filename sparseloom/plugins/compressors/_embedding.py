"""INT8 embedding tables: a Gather from a large float32 table becomes a Gather from an int8 one.

A word embedding is a table of which each request reads a few rows (``sentiment``: 30,522 ×
384 float32, 47 MB of its 91 MB of weights, 48 rows read per request). ONNX Runtime's quantizer
leaves Gather alone in QDQ form, and a ``DequantizeLinear`` on the whole table would be folded
back to float32 when a session is built. So the table is rewritten by hand, as three plain ops
every backend runs::

    Gather(table, ids)  →  Cast(Gather(table_int8, ids), float) · Gather(scale, ids)

Each row has its own symmetric scale (its largest magnitude ÷ 127), so a row of small values
keeps its resolution: the error of an entry is at most half its row's scale. The int8 table is
a quarter of the float32 one on disk and in memory, and a request reads a quarter of the bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

#: Tables with fewer rows are left float32 (a learned position table, a token-type table): the
#: bytes saved would not pay for the two extra ops.
MIN_ROWS = 1024


def quantize_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8 of a 2-D float table: ``(int8 table, float32 scales (rows, 1))``,
    with ``table ≈ int8 table × scales``. An all-zero row gets scale 1 (exactly zero)."""
    peak = np.abs(table).max(axis=1, keepdims=True).astype(np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint(table / scale), -127, 127).astype(np.int8)
    return codes, scale


def quantize_embeddings(model: onnx.ModelProto, min_rows: int = MIN_ROWS) -> list[str]:
    """Rewrite, in place, each Gather (axis 0) from a float32 initializer of rank 2 with at
    least ``min_rows`` rows and no other user into the int8 form above. Returns the names of
    the tables rewritten (empty: the model is unchanged)."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    tables = {init.name: init for init in graph.initializer}
    users: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    outputs = {value.name for value in graph.output}
    rewritten: list[str] = []
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        init = tables.get(node.input[0]) if node.op_type == "Gather" and node.input else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if (init is None or axis != 0 or users.get(init.name) != 1 or init.name in outputs
                or init.data_type != onnx.TensorProto.FLOAT or len(init.dims) != 2
                or init.dims[0] < min_rows):
            nodes.append(node)
            continue
        codes, scale = quantize_rows(numpy_helper.to_array(init))
        stem, ids, out = init.name, node.input[1], node.output[0]
        graph.initializer.remove(init)
        graph.initializer.extend([numpy_helper.from_array(codes, f"{stem}.int8"),
                                  numpy_helper.from_array(scale, f"{stem}.scale")])
        rows, factors, wide = f"{out}.int8_rows", f"{out}.row_scales", f"{out}.float_rows"
        nodes += [
            helper.make_node("Gather", [f"{stem}.int8", ids], [rows], name=f"{node.name}_int8"),
            helper.make_node("Cast", [rows], [wide], to=onnx.TensorProto.FLOAT,
                             name=f"{node.name}_cast"),
            helper.make_node("Gather", [f"{stem}.scale", ids], [factors],
                             name=f"{node.name}_scale"),
            helper.make_node("Mul", [wide, factors], [out], name=f"{node.name}_dequantize"),
        ]
        rewritten.append(stem)
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
    return rewritten
