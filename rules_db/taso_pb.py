"""Reader for TASO's published substitution file (`graph_subst.pb`), decoded by
hand from the protobuf wire format into taso rules.

Wire format (proto2): RuleCollection{rule=1}; Rule{srcOp=1, dstOp=2,
mappedOutput=3}; Operator{type=1, input=2, para=3}; Tensor{opId=1, tsId=2};
Parameter{key=1, value=2}; MapOutput{srcOpId=1, dstOpId=2, srcTsId=3, dstTsId=4}.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from taso.ops import OPS

from .rule import PNode, Rule, RuleSet

# TASO's parameter enumeration (PMParameter). Its operator types, and what an
# operator's parameters mean, each operator says (`Op.taso_type`, `Op.from_taso`).
_KEY = {3: "group", 4: "kernel_h", 5: "kernel_w", 6: "stride_h", 7: "stride_w", 8: "pad",
        9: "acti", 10: "numdim", 11: "axis", 12: "perm", 2: "num_outputs", 1: "num_inputs"}


def _by_type() -> dict[int, str]:
    return {op.taso_type: n for n, op in OPS.items() if op.taso_type is not None}


def _varint(b: bytes, i: int) -> tuple[int, int]:
    r = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated protobuf (a varint runs past the end)")
        c = b[i]
        i += 1
        r |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            break
    return r, i


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """Decode one message into (field number, value) pairs (varints as signed
    64-bit, length-delimited as bytes)."""
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            out.append((num, v - (1 << 64) if v >= 1 << 63 else v))
        elif wire == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated protobuf (a field runs past the end)")
            out.append((num, b[i:i + n]))
            i += n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


def _get(fields, num: int, default=None):
    for f, v in fields:
        if f == num:
            return v
    return default


def _operator(b: bytes) -> tuple[int, list[tuple[int, int]], dict[str, int]]:
    f = _fields(b)
    ins = []
    for n, v in f:
        if n == 2:
            t = _fields(v)
            ins.append((_get(t, 1, 0), _get(t, 2, 0)))
    params = {}
    for n, v in f:
        if n == 3:
            p = _fields(v)
            params[_KEY.get(_get(p, 1), str(_get(p, 1)))] = _get(p, 2, 0)
    return _get(f, 1), ins, params


def _side(ops: list[bytes], rank: dict[str, int]) -> list[PNode]:
    nodes: list[PNode] = []
    by_type = _by_type()
    for b in ops:
        t, ins, p = _operator(b)
        if t not in by_type:
            raise ValueError(f"TASO operator type {t} has no taso equivalent")
        op = by_type[t]
        refs = [f"x{-o}" if o < 0 else (o, s) for o, s in ins]
        try:
            attrs, operand_rank = OPS[op].from_taso(p)
        except NotImplementedError as e:
            raise ValueError(str(e)) from None
        for r in refs:
            _set_rank(rank, r, operand_rank)
        if OPS[op].undoes:  # split: sizes from the concat it undoes
            attrs = dict(attrs, sizes=_split_sizes(nodes, refs[0], p["axis"]))
        nodes.append(PNode(op, refs, attrs))
    return nodes


def _traced(n: PNode, axis: int):
    """(input ref, axis) whose size node `n`'s output axis has (`Op.dim_source`),
    or None."""
    src = OPS[n.op].dim_source(n.attrs, axis)
    return None if src is None else (n.inputs[src[0]], src[1])


class _Channels:
    """TASO infers a conv's groups from shapes (input channels / kernel channels);
    the file stores none. Channel counts are tracked as multisets of symbols, one
    per variable axis, with the source side's convs (ungrouped: input channels =
    kernel channels) identifying symbols; a target conv then has as many groups as
    its kernel's channel symbol occurs in its input's channels."""

    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, s):
        while self.parent.get(s, s) != s:
            s = self.parent[s]
        return s

    def dims(self, nodes: list[PNode], ref, axis: int) -> Counter:
        if isinstance(ref, str):
            return Counter([self.find((ref, axis))])
        n = nodes[ref[0]]
        if n.op == "concat":
            parts = [self.dims(nodes, r, axis) for r in n.inputs]
            if n.attrs["axis"] == axis:
                return sum(parts, Counter())
            if all(p.total() == 1 for p in parts):  # the other axes agree
                for p in parts[1:]:
                    self.parent[self.find(next(iter(p)))] = self.find(next(iter(parts[0])))
            return parts[0]
        src = _traced(n, axis)
        if src is not None:
            return self.dims(nodes, *src)
        return Counter([(id(n), axis)])  # a size this reader does not trace

    def groups(self, nodes: list[PNode], conv: PNode, source: bool) -> int:
        k = self.dims(nodes, conv.inputs[1], 1)
        x = self.dims(nodes, conv.inputs[0], 1)
        k = Counter({self.find(s): c for s, c in k.items()})
        x = Counter({self.find(s): c for s, c in x.items()})
        if source:  # ungrouped: one input-channel symbol equals one kernel-channel symbol
            if len(x) == 1 and len(k) == 1 and x.total() == k.total() == 1:
                self.parent[next(iter(k))] = next(iter(x))  # already roots
            return 1
        if len(k) == 1 and k.total() == 1 and set(x) == set(k):
            return x.total()
        return 1  # channels not tied to the kernel's by the source side: TASO's default


def _infer_groups(src: list[PNode], dst: list[PNode], vars_: dict[str, dict]) -> None:
    """Set the groups TASO would infer on each target conv. A grouped conv over
    kernels concatenated on axis 0 splits its output channels evenly, so those
    kernels must have as many output channels each: a same_dim constraint (TASO
    leaves it implicit, and its rule is false without it)."""
    ch = _Channels()
    for side, source in ((src, True), (dst, False)):
        for n in side:
            if "groups" in OPS[n.op].attrs:  # TASO's grouped convolution
                g = ch.groups(side, n, source)
                if g == 1:
                    continue
                n.attrs["groups"] = g
                k = n.inputs[1]
                parts = side[k[0]].inputs if not isinstance(k, str) else [k]
                for p in parts[1:]:
                    if isinstance(p, str) and isinstance(parts[0], str):
                        vars_[p].setdefault("same_dim", []).append([0, parts[0], 0])


def _set_rank(rank: dict[str, int], r, n) -> None:
    if isinstance(r, str) and n:
        rank[r] = n


def _split_sizes(nodes: list[PNode], ref, axis: int):
    """TASO's split takes its sizes from the concat that made its input: follow the
    input back to that concat, tracking which axis carries the split one, and
    name the sizes of the concat's inputs."""
    while not isinstance(ref, str):
        n = nodes[ref[0]]
        if n.op == "concat" and n.attrs["axis"] == axis:
            return tuple({"dim": (r, axis)} for r in n.inputs)
        src = _traced(n, axis)
        if src is None:
            break
        ref, axis = src
    raise ValueError("split whose sizes cannot be traced to a concat")


def read_taso_pb(path: str | Path) -> RuleSet:
    """All rules of a TASO substitution file, ids `taso-000` ... in file order."""
    data = Path(path).read_bytes()
    rules = []
    for idx, rb in enumerate(v for n, v in _fields(data) if n == 1):
        f = _fields(rb)
        rank: dict[str, int] = {}
        src = _side([v for n, v in f if n == 1], rank)
        dst = _side([v for n, v in f if n == 2], rank)
        outputs = []
        for n, v in f:
            if n == 3:
                m = _fields(v)
                outputs.append(((_get(m, 1, 0), _get(m, 3, 0)), (_get(m, 2, 0), _get(m, 4, 0))))
        rule = Rule(f"taso-{idx:03d}", src, dst, outputs, provenance={"source": "TASO",
                                                                       "index": idx})
        rule.vars = {v: {"rank": rank.get(v)} for v in rule.variables()}
        _infer_groups(src, dst, rule.vars)
        rules.append(rule)
    return RuleSet(rules, name="taso-graph_subst", provenance={"file": Path(path).name})
