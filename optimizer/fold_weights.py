"""Fold weight-only subgraphs into initializers.

After the search a graph may compute things from weights alone (a concatenated
or enlarged kernel, a batch-norm-scaled kernel); those run once, here, with the
float32 numpy reference, and become weight nodes carrying the result. (The
operators such rules produce, conv2d_bias, bn_kernel and the like, are defined
in `taso.ops.fold`.)
"""

from __future__ import annotations

import numpy as np

from taso.ir import Graph, Node


def fold_weights(graph: Graph) -> Graph:
    """A copy of `graph` in which every computed constant that a run-time node or
    a graph output reads is a weight node with its value; constants nothing
    else needs are dropped. Graph inputs are kept in order."""
    g = graph.pruned()
    const = g.constant_nodes()
    needed = {p for n in g.topo_order() if n.id not in const
              for p, _ in n.inputs if p in const}
    needed |= {p for p, _ in g.outputs if p in const}
    values = g.values(p for p in needed if g.nodes[p].op != "weight")
    out = Graph()
    remap: dict[tuple[int, int], tuple[int, int]] = {}
    for n in g.topo_order():
        if n.id in const and (n.op != "weight" or n.id not in needed):
            if n.op != "weight" and n.id in needed:
                for i, v in enumerate(values[n.id]):
                    name = f"{n.name or n.op}_folded{n.id}" + (f"_{i}" if i else "")
                    t = out.new_weight(n.shapes[i], data=_as_dtype(v, n.dtypes[i]), name=name)
                    remap[(n.id, i)] = t.ref
            continue
        t = _copy(out, n, [out.tensor(remap[r]) for r in n.inputs])
        for i in range(len(n.shapes)):
            remap[(n.id, i)] = (t, i)
    for ref, name in zip(g.outputs, g.output_names):
        out.mark_output(out.tensor(remap[ref]), name)
    return out


def _as_dtype(v: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(v).astype(dtype, copy=False))


def _copy(out: Graph, n: Node, inputs) -> int:
    return out.add_node(n.op, inputs, name=n.name, data=n.data, **dict(n.attrs))[0].node
