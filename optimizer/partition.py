"""Cut a large graph at narrow points into pieces the search handles fast, and
join the optimized pieces back.

A cut between two positions of the evaluation order is narrow when few
computed tensors cross it (are made before and used after). Pieces take
`min_ops` to `max_ops` operators; within that window the cut goes where the
fewest tensors cross: the first place where one tensor crosses, else the
latest of the narrowest. Graph inputs and weights are not
counted: every piece reads them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taso.ir import Graph, Node

SOURCES = ("input", "weight")
_SRC = "__src"  # name prefix of a piece's copy of an original source
_CUT = "__cut"  # name prefix of a piece's input for a tensor an earlier piece computes


@dataclass
class Piece:
    graph: Graph  # boundary tensors as inputs, then weights, then operators
    inputs: list[tuple[int, int]] = field(default_factory=list)  # original tensor per input
    outputs: list[tuple[int, int]] = field(default_factory=list)  # original tensor per output


def cut_points(g: Graph, min_ops: int, max_ops: int) -> list[int]:
    """Positions (in the order of `operators(g)`) after which to cut."""
    ops = operators(g)
    pos = {n.id: i for i, n in enumerate(ops)}
    last = {n.id: pos[n.id] for n in ops}
    for n in ops:
        for p, _ in n.inputs:
            if p in pos:
                last[p] = max(last[p], pos[n.id])
    for p, _ in g.outputs:
        if p in pos:
            last[p] = len(ops)
    # width[i]: computed tensors alive across the cut after position i.
    delta = [0] * (len(ops) + 2)
    for nid, end in last.items():
        if end > pos[nid]:
            delta[pos[nid]] += len(g.nodes[nid].shapes)
            delta[end] -= len(g.nodes[nid].shapes)
    width, w = [], 0
    for i in range(len(ops)):
        w += delta[i]
        width.append(w)
    cuts, start = [], 0
    while len(ops) - start > max_ops:
        window = range(start + min_ops - 1, min(start + max_ops, len(ops) - 1))
        narrow = [i for i in window if width[i] <= 1]
        # The first single-tensor cut keeps repeated blocks aligned, so identical
        # pieces recur; else the narrowest place, the latest among equals.
        cut = narrow[0] if narrow else min(window, key=lambda i: (width[i], -i))
        cuts.append(cut)
        start = cut + 1
    return cuts


def operators(g: Graph) -> list[Node]:
    live = g.live()
    return [n for n in g.topo_order() if n.id in live and n.op not in SOURCES]


def split_graph(g: Graph, min_ops: int = 20, max_ops: int = 60) -> list[Piece]:
    ops = operators(g)
    cuts = cut_points(g, min_ops, max_ops)
    bounds = [0] + [c + 1 for c in cuts] + [len(ops)]
    piece_of = {}
    for k in range(len(bounds) - 1):
        for n in ops[bounds[k]:bounds[k + 1]]:
            piece_of[n.id] = k
    # A tensor leaves its piece if a later piece or a graph output reads it.
    leaving: dict[int, set[tuple[int, int]]] = {}
    for n in ops:
        for ref in n.inputs:
            k = piece_of.get(ref[0])
            if k is not None and k != piece_of[n.id]:
                leaving.setdefault(k, set()).add(ref)
    for ref in g.outputs:
        if ref[0] in piece_of:
            leaving.setdefault(piece_of[ref[0]], set()).add(ref)
    return [_make_piece(g, ops[bounds[k]:bounds[k + 1]], sorted(leaving.get(k, ())))
            for k in range(len(bounds) - 1)]


def _make_piece(g: Graph, members: list[Node], outputs: list[tuple[int, int]]) -> Piece:
    piece = Piece(Graph())
    pg = piece.graph
    local: dict[tuple[int, int], tuple[int, int]] = {}

    def source(ref):
        if ref in local:
            return pg.tensor(local[ref])
        n = g.nodes[ref[0]]
        if n.op in SOURCES:  # named after the original, which `join` restores
            t = pg.add_node(n.op, [], name=f"{_SRC}{n.id}", data=n.data, **dict(n.attrs))[0]
        else:  # computed by an earlier piece
            t = pg.new_input(n.shapes[ref[1]], name=f"{_CUT}{len(piece.inputs)}",
                             dtype=n.dtypes[ref[1]])
            piece.inputs.append(ref)
        local[ref] = t.ref
        return t

    for n in members:
        ins = [source(r) for r in n.inputs]
        for i, t in enumerate(pg.add_node(n.op, ins, name=n.name, data=n.data,
                                          **dict(n.attrs))):
            local[(n.id, i)] = t.ref
    for ref in outputs:
        pg.mark_output(pg.tensor(local[ref]))
        piece.outputs.append(ref)
    return piece


def join(g: Graph, pieces: list[Piece], optimized: list[Graph]) -> Graph:
    """The original graph with each piece replaced by its optimized version.
    A node that computes what an earlier node computes (an operator of the
    library, the same attributes and inputs) is that node: pieces searched
    alike each build, say, the same concatenation of two shared weights, which
    the model should hold once (the search core merges common nodes within a
    piece the same way)."""
    out = Graph()
    tensor: dict[tuple[int, int], tuple[int, int]] = {}
    copied: dict[int, int] = {}  # original source id -> node id in `out`
    made: dict[tuple, int] = {}  # (op, attrs, inputs) -> node id in `out`

    def copy_source(nid: int) -> int:
        if nid not in copied:
            n = g.nodes[nid]
            copied[nid] = out.add_node(n.op, [], name=n.name, data=n.data,
                                       **dict(n.attrs))[0].node
        return copied[nid]

    for n in g.inputs:
        tensor[(n.id, 0)] = (copy_source(n.id), 0)
    for piece, pg in zip(pieces, optimized):
        local: dict[int, int] = {}
        inputs = {f"{_CUT}{i}": ref for i, ref in enumerate(piece.inputs)}
        for n in pg.topo_order():
            if n.op == "input" and n.name in inputs:
                continue
            if n.op in SOURCES:
                local[n.id] = copy_source(_original_source(piece, n))
                continue
            refs = tuple(_resolve(p, i, local, inputs, pg, tensor) for p, i in n.inputs)
            key = (n.op, n.attrs, refs)
            if key not in made or n.op == "opaque":  # an unknown operator may not be pure
                made[key] = out.add_node(n.op, [out.tensor(r) for r in refs], name=n.name,
                                         data=n.data, **dict(n.attrs))[0].node
            local[n.id] = made[key]
        for ref, (p, i) in zip(piece.outputs, pg.outputs):
            tensor[ref] = _resolve(p, i, local, inputs, pg, tensor)
    for ref, name in zip(g.outputs, g.output_names):
        if ref not in tensor:
            tensor[ref] = (copy_source(ref[0]), ref[1])
        out.mark_output(out.tensor(tensor[ref]), name)
    return out


def shared_weights(pieces: list[Piece]) -> list[tuple[int, ...]]:
    """Per piece, the ids of its weights that another piece reads too (a
    recurrent layer's weights, read at every time step): whatever one piece's
    rewrites do with such a weight, the model keeps it."""
    readers: dict[int, int] = {}
    for piece in pieces:
        for n in piece.graph.weights:
            orig = _original_source(piece, n)
            readers[orig] = readers.get(orig, 0) + 1
    return [tuple(n.id for n in piece.graph.weights
                  if readers[_original_source(piece, n)] > 1) for piece in pieces]


def _original_source(piece: Piece, n: Node) -> int:
    return int(n.name[len(_SRC):])


def _resolve(p: int, i: int, local: dict, inputs: dict, pg: Graph, tensor: dict):
    n = pg.nodes[p]
    if n.op == "input" and n.name in inputs:
        return tensor[inputs[n.name]]
    return (local[p], i)


def piece_key(g: Graph) -> tuple:
    """Identical pieces (same structure, attributes and source shapes; weight data
    aside) get equal keys, so one search serves them all."""
    return (tuple((n.op, n.attrs, n.inputs) for n in g.topo_order()), tuple(g.outputs))

