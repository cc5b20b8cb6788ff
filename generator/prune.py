"""From classes of equivalent graphs to a small set of rules.

Stages, each counted:
  raw             every pair of graphs in a class, its fingerprints checked
                  again under the second seed (a graph whose outputs are
                  family tensors also pairs with those bare variables; a class
                  of constants, the same under both seeds, goes);
  common subgraph TASO's criterion: the two sides share an operator applied to
                  the same inputs (structurally), so a smaller rule does the work;
  implied         detectable consequences of smaller rules: both sides end in
                  the same operator on pairwise-equivalent inputs (the rule is
                  that operator applied to a smaller rule), or both sides are two
                  unrelated operators side by side; also gone here: pairs where
                  neither side reads every variable the other does (no rewrite);
  renaming        one rule per canonical form (variable renaming, node order,
                  direction; `taso.rules_db.canonical`), ranks merged;
  special cases   a rule that is another with two variables identified (an
                  instance of a more general rule) goes;
  float           confirmed on the float32 reference;
  general         the symbolic rule re-instantiated at the family's alternative
                  sizes still holds (where it type-checks there): no rule true
                  only at the family's sizes.
The cheap, renaming-invariant criteria run first so that canonical forms are
computed only for the pairs that survive them; the final set does not depend on
the order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from taso.rules_db import PNode, Rule
from taso.rules_db.canonical import canonical

from taso.executor import Executor, SerialExecutor
from taso.ops import OPS
from taso.stablehash import node_hash, output_hash

from .checkpoint import PruneCheckpoint
from .enumerate import (
    Enumeration,
    TaskContext,
    _context,
    analyze,
    init_worker,
)
from .family import GenConfig
from .fingerprint import Fingerprints, digest, family_values
from .rules import confirmed, float_inputs, holds_elsewhere, to_rule
from .store import Member, SpillBucket, read_bucket


@dataclass
class Stages:
    split_by_second_seed: int = 0  # classes the second seed told apart
    raw: int = 0
    common_subgraph: int = 0  # left after the criterion
    implied: int = 0
    renaming: int = 0
    special_cases: int = 0
    float: int = 0
    general: int = 0

    def rows(self) -> list[tuple[str, int]]:
        return [("raw pairs", self.raw), ("after common-subgraph", self.common_subgraph),
                ("after implied-by-smaller", self.implied),
                ("after variable renaming", self.renaming),
                ("after instances of general rules", self.special_cases),
                ("after float confirmation", self.float),
                ("after other-size check (final)", self.general)]


@dataclass
class _Info:
    """What the criteria read of one graph."""

    member: Member
    merkle: list[int]  # structural hash of each node (family tensors by id)
    producer: dict[int, tuple[int, int]] = field(default_factory=dict)  # tensor -> node, out
    n_comps: int = 1


def _info(m: Member, n_in: int) -> _Info:
    from taso.ops import OPS
    tm: list[int] = list(range(n_in))
    merkle: list[int] = []
    producer: dict[int, tuple[int, int]] = {}
    parent = list(range(len(m.graph)))

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for j, (op, attrs, ins) in enumerate(m.graph):
        h = node_hash(op, attrs, (tm[t] for t in ins))
        merkle.append(h)
        for t in ins:
            if t >= n_in:
                parent[find(producer[t][0])] = find(j)
        for o in range(OPS[op].num_outputs(dict(attrs))):
            producer[len(tm)] = (j, o)
            tm.append(output_hash(h, o))
    return _Info(m, merkle, producer, len({find(j) for j in range(len(m.graph))}))


def _value(m: Member, t: int, inputs: list[int]) -> int:
    return inputs[t] if t < len(inputs) else m.vals[t - len(inputs)]


def common_subgraph(a: _Info, b: _Info) -> bool:
    """Do both sides hold the same operator applied to the same inputs?"""
    return bool(set(a.merkle) & set(b.merkle))


def implied(a: _Info, b: _Info, inputs: list[int], commutative: set | None = None) -> bool:
    """Both sides end (at every output) in the same operator on equivalent inputs
    (in either order for a commutative one), or both are two unrelated operators."""
    if a.n_comps > 1 and b.n_comps > 1:
        return True
    ma, mb = a.member, b.member
    by_val = {v: t for t, v in zip(mb.sinks, mb.sink_vals)}
    same_tail = 0
    for t, v in zip(ma.sinks, ma.sink_vals):
        u = by_val[v]
        if t not in a.producer or u not in b.producer:
            continue
        (ja, oa), (jb, ob) = a.producer[t], b.producer[u]
        opa, atta, insa = ma.graph[ja]
        opb, attb, insb = mb.graph[jb]
        if (opa, atta, oa) != (opb, attb, ob):
            continue
        va = [_value(ma, x, inputs) for x in insa]
        vb = [_value(mb, y, inputs) for y in insb]
        swapped = commutative and (opa, atta) in commutative and va == vb[::-1] and \
            not all(x < len(inputs) for x in insa + insb)  # else: commutativity itself
        if va == vb or swapped:
            same_tail += 1
    return same_tail == len(ma.sinks)


def _binds(src: _Info, dst: _Info, n_in: int) -> bool:
    """Does `src` read every family tensor `dst` reads (a rule src => dst can
    bind its target)? Sides that share no input are equal only as constants,
    such as the mean of a softmax, and make no rewrite."""
    def reads(m: Member) -> set[int]:
        return {t for _, _, ins in m.graph for t in ins if t < n_in} | \
            {t for t in m.sinks if t < n_in}
    return reads(dst.member) <= reads(src.member)


def _class_id(vals: tuple[int, ...]) -> str:
    return hashlib.blake2b(repr(sorted(vals)).encode(), digest_size=8).hexdigest()


def commutative_ops(cfg) -> set[tuple[str, tuple]]:
    """The binary operator instances whose fingerprint does not depend on operand
    order (found on the family, not declared)."""
    from .enumerate import _full_attrs
    from .family import operator_instances
    ev = Fingerprints(cfg.family, cfg.seed)
    out = set()
    for ins in operator_instances(cfg):
        if ins.arity != 2:
            continue
        for i, a in enumerate(ev.inputs):
            b = next((d for d in ev.inputs[i + 1:] if ev.shape(d) == ev.shape(a)), None)
            if b is None:
                continue
            sh = (ev.shape(a), ev.shape(b))
            at = ins.concrete(sh)
            if at is None or ev.out_shapes(ins.op, _full_attrs(ins.op, at), sh) is None:
                continue
            attrs = _full_attrs(ins.op, at)
            if ev.apply(ins.op, attrs, (a, b)) == ev.apply(ins.op, attrs, (b, a)):
                out.add((ins.op, attrs))
            break
    return out


def class_members(classes, inputs: list[int]) -> Iterator[list[Member]]:
    """Each class with at least two members, smallest graphs first; a class whose
    outputs are family tensors includes those bare variables (a graph of no node)."""
    index = {d: i for i, d in enumerate(inputs)}
    for key, members in classes:
        ms = list(members)
        if all(v in index for v in key):
            v0 = ms[0].sink_vals
            ms.insert(0, Member((), tuple(index[v] for v in v0), v0, ()))
        if len(ms) >= 2:
            yield ms


def family_digests(enum: Enumeration) -> list[int]:
    fam = enum.cfg.family
    return [digest(v.shape, arrs) for v, arrs in zip(fam, family_values(fam, enum.cfg.seed))]


def second_seed(ms: list[Member], ev: Fingerprints, n_in: int) -> list[list[Member]]:
    """Split a class by the fingerprints under the second, independent seed.
    A group with an output the same under both seeds computes a constant (the
    mean of a softmax row is 1/n): its graphs are equal only as constants,
    which no rule is about, and it goes."""
    groups: dict[tuple, list[Member]] = {}
    for m in ms:
        vals = analyze(m.graph, ev).vals
        key = tuple(sorted(zip(m.sink_vals, (vals[t] for t in m.sinks))))
        groups.setdefault(key, []).append(m)
    return [g for k, g in groups.items() if len(g) >= 2 and all(a != b for a, b in k)]


def _pairs_of_classes(ctx: TaskContext, batch: list[list[Member]] | SpillBucket
                      ) -> tuple[list[int], list[tuple]]:
    """Task: the pairs of these classes (or of the classes of a spilled bucket,
    read here) through the cheap criteria, and the survivors' rules with their
    canonical forms."""
    init_worker(ctx)
    cfg = _context()[0]
    n_in = len(cfg.family)
    inputs, comm, ev1 = _prune_context(cfg)
    ev1.trim()
    if isinstance(batch, SpillBucket):
        batch = list(class_members(read_bucket(batch).items(), inputs))
    counts = [0, 0, 0, 0]
    best: dict[tuple, list] = {}  # canonical key -> [rank, entry, rank vectors seen]
    groups = []
    for c in batch:
        g = second_seed(c, ev1, n_in)
        counts[3] += len(g) != 1 or len(g[0]) != len(c)
        groups += g
    for ms in groups:
        infos = [_info(m, n_in) for m in ms]
        for j in range(1, len(infos)):
            for i in range(j):
                counts[0] += 1
                a, b = infos[j], infos[i]  # source: the later (larger) graph
                if common_subgraph(a, b):
                    continue
                counts[1] += 1
                if implied(a, b, inputs, comm):
                    continue
                if not _binds(a, b, n_in):
                    if not _binds(b, a, n_in):
                        continue  # no rewrite: e.g. the mean of any softmax
                    a, b = b, a
                counts[2] += 1
                rule = to_rule("", a.member, b.member, cfg.family, {})
                key, order, _ = canonical(rule)
                ranks = tuple(rule.vars[v]["rank"] for v in order)
                rank = (len(a.member.graph) + len(b.member.graph), len(a.member.graph))
                entry = (key, order, rule, a.member, b.member)
                got = best.get(key)
                if got is None:
                    best[key] = [rank, entry, {ranks}]
                    continue
                got[2].add(ranks)
                if rank < got[0]:  # strictly: the first of equals stays
                    got[0], got[1] = rank, entry
    # One candidate per canonical form leaves the task (a 4-operator round
    # finds tens of millions of pairs), in the order found, with every rank
    # vector its form was found with: what `_prune` needs to pick the same.
    return counts, [(r, e, rs) for r, e, rs in best.values()]


def _check(ctx: TaskContext, batch: list[tuple[Rule, Member, Member]]
           ) -> list[tuple[bool, bool]]:
    """Task: (float-confirmed, not refuted at the other sizes) for each rule."""
    init_worker(ctx)
    cfg = _context()[0]
    xs = float_inputs(cfg.family, cfg.seed)
    res = []
    for rule, src, dst in batch:
        ok = confirmed(src, dst, xs)
        res.append((ok, ok and holds_elsewhere(rule, cfg.family, cfg.seed) is not False))
    return res


_PRUNE_CTX: dict[GenConfig, tuple] = {}


def _prune_context(cfg: GenConfig) -> tuple[list[int], set, Fingerprints]:
    key = cfg  # by value: each task brings its own copy
    if key not in _PRUNE_CTX:
        ev = Fingerprints(cfg.family, cfg.seed)
        _PRUNE_CTX.clear()
        _PRUNE_CTX[key] = (list(ev.inputs), commutative_ops(cfg),
                           Fingerprints(cfg.family, cfg.seed, streams=(1,)))
    return _PRUNE_CTX[key]


def _batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# Told (stage, tasks done, tasks) as each pruning task ends.
PruneProgress = Callable[[str, int, int], None]


def prune(enum: Enumeration, executor: Executor | None = None,
          progress: PruneProgress | None = None, checkpoint: PruneCheckpoint | None = None
          ) -> tuple[list[Rule], Stages]:
    """The generated rule set (deterministic for a given configuration) and the
    count left after each stage; `progress` hears of each task done. With a
    `checkpoint` (spilled classes only), each bucket's result is kept there as
    it arrives, and a bucket already kept there is not pruned again."""
    own = executor is None
    ex = executor or SerialExecutor()
    try:
        return _prune(enum, ex, progress or (lambda *_: None), checkpoint)
    finally:
        if own:
            ex.close()


def _counted(results: Iterable, stage: str, total: int, progress: PruneProgress) -> Iterator:
    """`results`, telling `progress` of each one as it arrives."""
    progress(stage, 0, total)
    for done, res in enumerate(results, 1):
        yield res
        progress(stage, done, total)


def _bucket_results(tasks: list[SpillBucket], ex: Executor, ctx: TaskContext,
                    checkpoint: PruneCheckpoint) -> Iterator[tuple[list[int], list[tuple]]]:
    """Each bucket's result in bucket order: from the checkpoint where kept
    there (read when its turn comes: a bucket's candidates take some 700 MB
    in memory), else pruned now (and kept)."""
    kept = [checkpoint.has(t.path) for t in tasks]
    fresh = ex.map(_pairs_of_classes, [t for t, k in zip(tasks, kept) if not k], ctx)
    for t, k in zip(tasks, kept):
        if k:
            yield checkpoint.get(t.path)
        else:
            result = next(fresh)
            checkpoint.put(t.path, result)
            yield result


def _prune(enum: Enumeration, ex: Executor, progress: PruneProgress,
           checkpoint: PruneCheckpoint | None = None) -> tuple[list[Rule], Stages]:
    inputs = family_digests(enum)
    ctx = TaskContext.of(enum.cfg)
    st = Stages()
    # The simplest candidate of each canonical form (fewest nodes, then the
    # source smaller, then the order found: stable), and every rank vector.
    kept_by: dict[tuple, tuple] = {}
    ranks: dict[tuple, list[set]] = {}
    if enum.classes.spilled:  # each task reads its bucket from the spill folder
        tasks: list = enum.classes.bucket_files()
    else:
        classes = [c for bucket in enum.classes.groups() for c in class_members(bucket, inputs)]
        tasks = _batches(classes, 200)
    if checkpoint is not None and enum.classes.spilled:
        results = _bucket_results(tasks, ex, ctx, checkpoint)
    else:
        results = ex.map(_pairs_of_classes, tasks, ctx)
    seq = 0
    for counts, out in _counted(results, "classes", len(tasks), progress):
        st.raw += counts[0]
        st.common_subgraph += counts[1]
        st.implied += counts[2]
        st.split_by_second_seed += counts[3]
        for rank, entry, rank_vectors in out:
            seq += 1
            key = entry[0]
            if key not in kept_by:
                ranks[key] = [set() for _ in entry[1]]
            if key not in kept_by or (*rank, seq) < kept_by[key][0]:
                kept_by[key] = ((*rank, seq), entry)
            for r in rank_vectors:
                for s, x in zip(ranks[key], r):
                    s.add(x)
    # Canonical dedup, smallest rules first, so the kept form is the simplest.
    kept = {key: (rule, src, dst, order) for key, (_, (_, order, rule, src, dst))
            in sorted(kept_by.items(), key=lambda kv: kv[1][0])}
    st.renaming = len(kept)
    for key, (rule, _, _, order) in kept.items():
        for v, rs in zip(order, ranks[key]):
            rule.vars[v]["rank"] = next(iter(rs)) if len(rs) == 1 else None
    items = list(kept.items())
    drop = special_cases([r for _, (r, _, _, _) in items], [k for k, _ in items], ex, progress)
    items = [it for i, it in enumerate(items) if i not in drop]
    st.special_cases = len(items)
    batches = _batches([(r, s, d) for _, (r, s, d, _) in items], 100)
    checks = [c for res in _counted(ex.map(_check, batches, ctx), "checks", len(batches),
                                    progress) for c in res]
    rules: list[Rule] = []
    for (_, (rule, src, dst, _)), (ok, general) in zip(items, checks):
        st.float += ok
        if not general:
            continue
        rule.id = f"gen-{len(rules):05d}"
        rule.provenance = {"generator": "taso-gen", "ops": [len(src.graph), len(dst.graph)],
                           "fingerprint": _class_id(src.sink_vals),
                           "family": rule.provenance["family"]}
        rules.append(rule)
    st.general = len(rules)
    return rules, st


# ---- special cases of more general rules --------------------------------------------
def merged(rule: Rule, a: str, b: str) -> Rule | None:
    """The rule with variable `b` identified with `a` (identical nodes merged), or
    None when that makes two outputs one."""
    def side(nodes):
        out: list[PNode] = []
        seen: dict[tuple, int] = {}
        remap: dict[tuple, tuple] = {}

        def ref(r):
            if isinstance(r, str):
                return a if r == b else r
            return remap[tuple(r)]

        def attr(v):
            if isinstance(v, dict) and "dim" in v:
                return {"dim": (ref(v["dim"][0]), v["dim"][1])}
            return tuple(attr(u) for u in v) if isinstance(v, tuple) else v

        for i, n in enumerate(nodes):
            ins = [ref(r) for r in n.inputs]
            attrs = {k: attr(v) for k, v in n.attrs.items()}
            key = (n.op, repr(ins), repr(sorted(attrs.items())))
            j = seen.setdefault(key, len(out))
            if j == len(out):
                out.append(PNode(n.op, ins, attrs))
            for o in range(OPS[n.op].num_outputs(attrs)):  # reads counts only
                remap[(i, o)] = (j, o)
        return out, ref

    src, rs = side(rule.src)
    dst, rd = side(rule.dst)
    outs = [(rs(s), rd(d)) for s, d in rule.outputs]
    if len({s for s, _ in outs}) < len(outs):
        return None
    return Rule(rule.id, src, dst, outs, {v: c for v, c in rule.vars.items() if v != b})


def _merged_keys(_: None, batch: list[Rule]) -> list[list]:
    """Task: the canonical forms of each rule with two same-rank variables
    identified."""
    out = []
    for r in batch:
        names = r.variables()
        keys = []
        for x in range(len(names)):
            for y in range(x + 1, len(names)):
                ra, rb = r.vars[names[x]].get("rank"), r.vars[names[y]].get("rank")
                if ra != rb:
                    continue
                m = merged(r, names[x], names[y])
                if m is not None:
                    keys.append(canonical(m)[0])
        out.append(keys)
    return out


def special_cases(rules: list[Rule], keys: list, ex: Executor,
                  progress: PruneProgress = lambda *_: None) -> set[int]:
    """Indices of rules that are another rule with two variables identified: an
    instance of a more general rule, which the optimizer applies just as well."""
    index = {k: i for i, k in enumerate(keys)}
    drop: set[int] = set()
    batches = _batches(rules, 200)
    merged_keys = [m for res in _counted(ex.map(_merged_keys, batches, None), "general rules",
                                         len(batches), progress) for m in res]
    ranks = [{c.get("rank") for c in r.vars.values()} for r in rules]
    for i, ms in enumerate(merged_keys):
        for k in ms:
            j = index.get(k)
            # Only where the general rule covers the instance's ranks too.
            if j is not None and j != i and (ranks[i] == {None} or ranks[i] == ranks[j]):
                drop.add(j)
    return drop
