"""The hand-written rewrites real models need, stated as rules (rules_db/fusion.json
is written from here: `python -m taso.optimizer.fusion_rules`), so the
verifier proves them like any generated rule:

- conv + bias add, conv + batch norm  ->  conv2d_bias with folded parameters;
- conv / matmul + activation          ->  the fused activation;
- parallel convs sharing an input     ->  one conv over concatenated kernels
  (the smaller kernel enlarged when sizes differ), split after;
- parallel matmuls sharing an input   ->  one matmul, split after (with their
                                         bias adds, for dense layers);
- matmuls (or Gemms) sharing a weight ->  one over the stacked rows, split after;
- a grouped conv                      ->  one with a half or a quarter of the
                                         groups (MERGE_GCONV);
- a dense layer + residual add (3-D)  ->  the same over the matrix of rows.

Two kinds carry tags (`rules_db.pattern.TAGS`) that the search reads from the
rules it is given: `across_pieces` (the stacked products, whose matches lie
in different pieces of a partitioned graph) and `fused_gain` (the 3-D dense
layer, whose gain only a fusion-aware cost sees).
"""

from __future__ import annotations

import sys
from pathlib import Path

from taso.rules_db import PNode, Rule, RuleSet

from taso.ops import ACTIVATIONS

CONV_VARS = {"strides": "?s", "pads": "?p", "dilations": "?d", "groups": "?g"}
GEMM = {"alpha": "?al", "beta": "?be", "trans_a": 0, "trans_b": "?tb"}  # A not transposed
ACTS = tuple(a for a in ACTIVATIONS if a != "none")  # what conv2d and matmul fuse
GROUPS = (2, 4, 8, 16, 32, 64)


def _dim(ref, axis: int) -> dict:
    return {"dim": [ref, axis]}


MODULE = "taso.optimizer.fusion_rules"  # __name__ is "__main__" under python -m


def _rule(rid: str, src: list[PNode], dst: list[PNode], outputs, *, tags: tuple[str, ...] = (),
          **vars_) -> Rule:
    r = Rule(rid, src, dst, [tuple(o) for o in outputs],
             provenance={"source": "hand-written", "module": MODULE}, tags=list(tags))
    r.vars = {v: dict(vars_.get(v, {})) for v in r.variables()}
    return r


W = {"weight": True}


def bias_rules() -> list[Rule]:
    conv = dict(CONV_VARS, activation="none")
    bn = {"epsilon": "?e"}
    return [
        _rule("fusion-conv-bias",
              [PNode("conv2d", ["x", "w"], conv),
               PNode("reshape", ["b"], {"shape": [1, _dim("w", 0), 1, 1]}),
               PNode("add", [(0, 0), (1, 0)])],
              [PNode("conv2d_bias", ["x", "w", "b"], conv)],
              [[(2, 0), (0, 0)]], x={"rank": 4}, b={"rank": 1, "weight": True}),
        _rule("fusion-conv-batchnorm",
              [PNode("conv2d", ["x", "w"], conv),
               PNode("batchnorm", [(0, 0), "scale", "bias", "mean", "var"], bn)],
              [PNode("bn_kernel", ["w", "scale", "var"], bn),
               PNode("bn_bias", ["scale", "bias", "mean", "var"], bn),
               PNode("conv2d_bias", ["x", (0, 0), (1, 0)], conv)],
              [[(1, 0), (2, 0)]], x={"rank": 4}, w=W, scale=W, bias=W, mean=W, var=W),
        _rule("fusion-conv-bias-batchnorm",
              [PNode("conv2d_bias", ["x", "w", "b"], conv),
               PNode("batchnorm", [(0, 0), "scale", "bias", "mean", "var"], bn)],
              [PNode("sub", ["mean", "b"]),
               PNode("bn_kernel", ["w", "scale", "var"], bn),
               PNode("bn_bias", ["scale", "bias", (0, 0), "var"], bn),
               PNode("conv2d_bias", ["x", (1, 0), (2, 0)], conv)],
              [[(1, 0), (3, 0)]], x={"rank": 4}, w=W, b=W, scale=W, bias=W, mean=W, var=W),
    ]


def activation_rules() -> list[Rule]:
    rules = []
    for act in ACTS:
        for op, ins in (("conv2d", ["x", "w"]), ("conv2d_bias", ["x", "w", "b"]),
                        ("matmul", ["x", "w"])):
            lin = dict(CONV_VARS) if op != "matmul" else {}
            rules.append(_rule(
                f"fusion-{op}-{act}",
                [PNode(op, ins, dict(lin, activation="none")), PNode(act, [(0, 0)])],
                [PNode(op, ins, dict(lin, activation=act))],
                [[(1, 0), (0, 0)]]))
    return rules


def merge_rules() -> list[Rule]:
    rules = []
    for op, has_bias in (("conv2d", False), ("conv2d_bias", True)):
        a = dict(CONV_VARS, groups=1, activation="?a")
        ins1, ins2 = (["x", "w1", "b1"], ["x", "w2", "b2"]) if has_bias else \
            (["x", "w1"], ["x", "w2"])
        bias_cat = [PNode("concat", ["b1", "b2"], {"axis": 0})] if has_bias else []
        kb = len(bias_cat)

        def merged(kernel_node: list[PNode], attrs: dict, op=op, bias_cat=bias_cat, kb=kb):
            k = len(kernel_node) - 1  # index of the merged kernel
            cat = [*kernel_node, *[PNode(b.op, b.inputs, b.attrs) for b in bias_cat]]
            ins = ["x", (k, 0)] + ([(k + 1, 0)] if kb else [])
            n = len(cat)
            return cat + [PNode(op, ins, attrs),
                          PNode("split", [(n, 0)], {"axis": 1,
                                                     "sizes": [_dim("w1", 0), _dim("w2", 0)]})]

        dst = merged([PNode("concat", ["w1", "w2"], {"axis": 0})], a)
        s = len(dst) - 1
        rules.append(_rule(f"fusion-merge-{op}", [PNode(op, ins1, a), PNode(op, ins2, a)], dst,
                           [[(0, 0), (s, 0)], [(1, 0), (s, 1)]], x={"rank": 4}))
        same = {"strides": [1, 1], "pads": "same", "dilations": [1, 1], "groups": 1,
                "activation": "?a"}
        dst = merged([PNode("enlarge", ["w1"], {"kernel": [_dim("w2", 2), _dim("w2", 3)]}),
                      PNode("concat", [(0, 0), "w2"], {"axis": 0})], same)
        s = len(dst) - 1
        rules.append(_rule(f"fusion-merge-{op}-enlarge",
                           [PNode(op, ins1, same), PNode(op, ins2, same)], dst,
                           [[(0, 0), (s, 0)], [(1, 0), (s, 1)]], x={"rank": 4}))
    for rank in (2, 3):
        act = {"activation": "?a"}
        rules.append(_rule(
            f"fusion-merge-matmul-rank{rank}",
            [PNode("matmul", ["x", "w1"], act), PNode("matmul", ["x", "w2"], act)],
            [PNode("concat", ["w1", "w2"], {"axis": 1}),
             PNode("matmul", ["x", (0, 0)], act),
             PNode("split", [(1, 0)], {"axis": rank - 1,
                                       "sizes": [_dim("w1", 1), _dim("w2", 1)]})],
            [[(0, 0), (2, 0)], [(1, 0), (2, 1)]],
            x={"rank": rank}, w1={"rank": 2}, w2={"rank": 2}))
        # Dense layers: x @ w + b (b broadcast over the last axis).
        rules.append(_rule(
            f"fusion-merge-matmul-bias-rank{rank}",
            [PNode("matmul", ["x", "w1"], act), PNode("add", [(0, 0), "b1"]),
             PNode("matmul", ["x", "w2"], act), PNode("add", [(2, 0), "b2"])],
            [PNode("concat", ["w1", "w2"], {"axis": 1}),
             PNode("concat", ["b1", "b2"], {"axis": 0}),
             PNode("matmul", ["x", (0, 0)], act),
             PNode("add", [(2, 0), (1, 0)]),
             PNode("split", [(3, 0)], {"axis": rank - 1,
                                       "sizes": [_dim("w1", 1), _dim("w2", 1)]})],
            [[(1, 0), (4, 0)], [(3, 0), (4, 1)]],
            x={"rank": rank}, w1={"rank": 2}, w2={"rank": 2},
            # a bias as long as its layer is wide (a broadcast one would not split)
            b1={"rank": 1, "same_dim": [[0, "w1", 1]]},
            b2={"rank": 1, "same_dim": [[0, "w2", 1]]}))
    return rules + stacked_rows_rules()


STACK_MAX = 8  # rows of a stack at most (the verifier's n-ary concat axioms)
# Products by one weight that can run over stacked rows: (name, operator, its
# attributes, the inputs after the rows and the weight).
PRODUCTS = (("matmul", "matmul", {"activation": "?a"}, []), ("gemm", "gemm", GEMM, []),
            ("gemm-bias", "gemm", GEMM, ["b"]))


def stacked_rows_rules() -> list[Rule]:
    """Products by one weight (a recurrent layer's input weights over its time
    steps) -> one product over the stacked rows, which reads the weight once.
    Two products start a stack (`fusion-merge-*-rows`); a stack of n rows then
    grows by one more product (`fusion-stack-*-rows-n`, listed first so that
    they are tried first), and stays one Concat and one Split instead of a tree
    of pairs. The stack's concatenation is kept for its other readers (the
    stacks of other weights over the same rows)."""
    stacks, pairs = [], []
    for name, op, attrs, c in PRODUCTS:
        ranks = {"w": {"rank": 2, "weight": True}, **({"b": {"rank": 1}} if c else {})}
        for n in range(1, STACK_MAX):
            xs = [f"x{i}" for i in range(n)]
            sizes = [_dim(x, 0) for x in [*xs, "y"]]
            if n == 1:
                src = [PNode(op, ["x0", "w", *c], attrs), PNode(op, ["y", "w", *c], attrs)]
                outputs = [[(0, 0), (2, 0)], [(1, 0), (2, 1)]]
            else:  # (0) the stack's rows, (1) their product, (2) its split, (3) one more
                src = [PNode("concat", xs, {"axis": 0}), PNode(op, [(0, 0), "w", *c], attrs),
                       PNode("split", [(1, 0)], {"axis": 0, "sizes": sizes[:-1]}),
                       PNode(op, ["y", "w", *c], attrs)]
                outputs = [*[[(2, i), (2, i)] for i in range(n)], [(3, 0), (2, n)],
                           [(0, 0), (3, 0)]]
            dst = [PNode("concat", [*xs, "y"], {"axis": 0}), PNode(op, [(0, 0), "w", *c], attrs),
                   PNode("split", [(1, 0)], {"axis": 0, "sizes": sizes})]
            if n > 1:
                dst.append(PNode("concat", xs, {"axis": 0}))
            # A recurrent layer's steps lie in different pieces: across_pieces.
            rule = _rule(f"fusion-merge-{name}-rows" if n == 1 else
                         f"fusion-stack-{name}-rows-{n}", src, dst, outputs,
                         tags=("across_pieces",), **{x: {"rank": 2} for x in [*xs, "y"]},
                         **ranks)
            (pairs if n == 1 else stacks).append(rule)
    return stacks + pairs


def group_rules() -> list[Rule]:
    """Halve a grouped conv's groups, and quarter them: onnxruntime's cost by
    group count is uneven (ResNeXt-50's 128-channel 3x3 at 56x56 on a CPU: 1.63
    ms at 32 groups, 2.07 at 16, 0.92 at 8), and the search's alpha would not
    cross the dearer half-way point to reach the cheaper one."""
    rules = []
    for op, ins in (("conv2d", ["x", "w"]), ("conv2d_bias", ["x", "w", "b"])):
        for count, name in ((2, "gconv"), (4, "gconv4")):
            for g in GROUPS:
                if g % count:
                    continue
                a = dict(CONV_VARS, groups=g, activation="?a")
                rules.append(_rule(
                    f"fusion-merge-{name}-{op}-{g}",
                    [PNode(op, ins, a)],
                    [PNode("merge_gconv", ["w"], {"groups": g, "count": count}),
                     PNode(op, ["x", (0, 0), *ins[2:]], dict(a, groups=g // count))],
                    [[(0, 0), (1, 0)]], x={"rank": 4}))
    return rules


def row_rules() -> list[Rule]:
    """A dense layer with a residual add, over a 3-D tensor, run over the matrix of
    its rows and reshaped back: onnxruntime then multiplies without reshaping
    around its Gemm, and no longer fuses the residual add into a following
    layer normalization (SkipLayerNormalization only matches 3-D inputs), which
    on a CPU ran 5x slower than the two apart. A sum of node costs sees only
    the reshapes it adds: fused_gain."""
    dense = {"activation": "none"}
    return [_rule(
        "rows-dense-residual",
        [PNode("matmul", ["x", "w"], dense), PNode("add", [(0, 0), "b"]),
         PNode("ewadd", ["r", (1, 0)])],
        [PNode("flatten", ["x"], {"axis": 2}), PNode("matmul", [(0, 0), "w"], dense),
         PNode("add", [(1, 0), "b"]), PNode("flatten", ["r"], {"axis": 2}),
         PNode("ewadd", [(3, 0), (2, 0)]),
         PNode("reshape", [(4, 0)], {"shape": [_dim("r", 0), _dim("r", 1), _dim("r", 2)]})],
        [[(2, 0), (5, 0)]], tags=("fused_gain",),
        x={"rank": 3}, w={"rank": 2}, r={"rank": 3},
        b={"rank": 1, "same_dim": [[0, "w", 1]]})]


def fusion_rules() -> RuleSet:
    rules = bias_rules() + activation_rules() + merge_rules() + group_rules() + row_rules()
    rs = RuleSet(rules, name="fusion", provenance={"source": "hand-written", "module": MODULE})
    return RuleSet.from_json(rs.to_json())  # in the form a loaded rule set has


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "rules_db" / \
        "fusion.json"
    fusion_rules().save(path)
    print(f"wrote {len(fusion_rules())} rules to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
