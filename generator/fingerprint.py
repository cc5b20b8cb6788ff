"""Exact fingerprints of tensors: each operator's modular-integer semantics (`Op.fp`)
on the input family, under independent random draws ("streams") of the family.

A value is interned by a 64-bit digest of its shape and residues, so two graphs
compute the same tensor exactly when their digests agree (up to a 2^-64 hash
collision on top of the fingerprint's own collision odds). The enumeration keys
classes by stream 0; the pruner re-checks every class of two or more graphs
under stream 1, the second, independent seed, which costs a fraction of
fingerprinting everything twice. Every
operator application is memoized by (operator, attributes, input digests): a
graph of round k is a representative of round k-1 plus one node, so its cost is
one dictionary lookup or one operator call.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from taso.ops import OPS, P, ShapeError

from .family import Shape, Var

Digest = int
MEMO_LIMIT = 1_000_000  # applications remembered (about 0.6 GB of residues)


def digest(shape: Shape, arrays: tuple[np.ndarray, ...]) -> Digest:
    h = hashlib.blake2b(repr(shape).encode(), digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "little")


def family_values(family: tuple[Var, ...], seed: int, streams: tuple[int, ...] = (0,)
                  ) -> list[tuple[np.ndarray, ...]]:
    """Each family tensor's residues under each stream of the seed."""
    out = []
    for i, v in enumerate(family):
        out.append(tuple(np.random.default_rng([seed, s, i]).integers(0, P, v.shape,
                                                                      dtype=np.int64)
                         for s in streams))
    return out


class Fingerprints:
    """Interned fingerprint values and the memo of operator applications."""

    def __init__(self, family: tuple[Var, ...], seed: int = 0, streams: tuple[int, ...] = (0,)):
        self.values: dict[Digest, tuple[Shape, tuple[np.ndarray, ...]]] = {}
        self.memo: dict[tuple, tuple[Digest, ...] | None] = {}
        self.shape_memo: dict[tuple, tuple[Shape, ...] | None] = {}
        self.inputs: list[Digest] = []
        self.streams = streams
        for v, arrs in zip(family, family_values(family, seed, streams)):
            self.inputs.append(self._intern(v.shape, arrs))
        self.calls = 0

    def trim(self, limit: int | None = None) -> None:
        """Forget every application past `limit` remembered ones (keeping the
        family): a worker's memo otherwise grows with all it has seen, 12 GB
        over round 4 of TASO's set. Digests are of contents, so nothing else
        changes."""
        if len(self.memo) > (MEMO_LIMIT if limit is None else limit):
            self.memo.clear()
            keep = set(self.inputs)
            self.values = {d: v for d, v in self.values.items() if d in keep}

    def _intern(self, shape: Shape, arrs: tuple[np.ndarray, ...]) -> Digest:
        d = digest(shape, arrs)
        self.values.setdefault(d, (shape, arrs))
        return d

    def shape(self, d: Digest) -> Shape:
        return self.values[d][0]

    def out_shapes(self, op: str, attrs: tuple, shapes: tuple[Shape, ...]
                   ) -> tuple[Shape, ...] | None:
        key = (op, attrs, shapes)
        try:
            return self.shape_memo[key]
        except KeyError:
            pass
        try:
            out = tuple(OPS[op].out_shapes(dict(attrs), list(shapes)))
        except ShapeError:
            out = None
        self.shape_memo[key] = out
        return out

    def apply(self, op: str, attrs: tuple, ins: tuple[Digest, ...]) -> tuple[Digest, ...]:
        """Output digests of `op` on these values (shapes already checked)."""
        key = (op, attrs, ins)
        out = self.memo.get(key)
        if out is None:
            self.calls += 1
            o = OPS[op]
            a: dict[str, Any] = dict(attrs)
            vals = [self.values[d][1] for d in ins]
            per = [o.run_fp(a, [v[s] for v in vals]) for s in range(len(self.streams))]
            out = tuple(self._intern(tuple(per[0][k].shape), tuple(p[k] for p in per))
                        for k in range(len(per[0])))
            self.memo[key] = out
        return out

