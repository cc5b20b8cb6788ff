"""Hashes that every process computes alike.

Python's `hash()` of a string is salted per interpreter (PYTHONHASHSEED), so a
key built from it means nothing in another process: a spawned worker, a Ray
worker on another node, or a later run. Keys that cross processes, are
bucketed or are compared between workers use these instead.

`stable_hash` takes nested tuples of str, int, bool, float, bytes and None. Equal
values (by ==, so ``1 == 1.0 == True``) hash alike, as with `hash()`, and the
result is an unsigned 64-bit integer: 8 bytes of BLAKE2b over a canonical
encoding. Results are memoized by value, since callers hash the same small
tuples many times over (the canonical form of a rule hashes each node once per
variable permutation).

`node_hash` and `output_hash` are the one structural (Merkle) hash of graphs:
a node by its operator, attributes and input tensors' hashes, a tensor by its
node's hash and output index. `Graph.hash` and the generator's class keys both
build on them.
"""

from __future__ import annotations

import hashlib
import numbers
import struct
from collections.abc import Iterable, Sequence
from typing import Any

_MEMO: dict[Any, int] = {}
_MEMO_LIMIT = 1 << 18  # entries; the memo is dropped whole when it grows past this


def _encode(x: Any, out: list[str]) -> None:
    t = type(x)
    if t is str:
        out.append(repr(x))  # quoted and escaped: no two strings collide with a separator
    elif t is tuple:
        out.append("(")
        for u in x:
            _encode(u, out)
            out.append(",")
        out.append(")")
    elif t is int or t is bool:
        out.append(str(int(x)))
    elif t is float:
        # an integral float equals the int (1.0 == 1), so it must hash like it
        out.append(str(int(x)) if x.is_integer() else repr(x))
    elif x is None:
        out.append("None")
    elif t is bytes:
        out.append(repr(x))
    elif isinstance(x, numbers.Integral):  # numpy integers
        out.append(str(int(x)))
    elif isinstance(x, numbers.Real):
        _encode(float(x), out)
    else:
        raise TypeError(f"stable_hash: cannot hash a {t.__name__}")


def stable_hash(x: Any) -> int:
    """A 64-bit hash of `x` that is the same in every process and on every run."""
    try:
        return _MEMO[x]
    except KeyError:
        pass
    parts: list[str] = []
    _encode(x, parts)
    h = int.from_bytes(hashlib.blake2b("".join(parts).encode(), digest_size=8).digest(),
                       "little")
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[x] = h
    return h


_PACKERS: dict[int, struct.Struct] = {}


def ints_hash(values: Sequence[int]) -> int:
    """A 64-bit hash of a sequence of unsigned 64-bit integers (fingerprint
    digests, other stable hashes): cheaper than `stable_hash` for flat keys that
    rarely repeat. Not memoized."""
    n = len(values)
    p = _PACKERS.get(n)
    if p is None:
        p = _PACKERS[n] = struct.Struct(f"<{n}Q")
    return int.from_bytes(hashlib.blake2b(p.pack(*values), digest_size=8).digest(), "little")


# ---- structural hashes ----------------------------------------------------------------
_TYPE_CODE: dict[tuple, int] = {}


def node_hash(op: str, attrs: Any, inputs: Iterable[int]) -> int:
    """Structural hash of a node from its operator, its attributes (any value
    `stable_hash` takes) and its input tensors' hashes, in order."""
    key = (op, attrs)
    code = _TYPE_CODE.get(key)
    if code is None:
        if len(_TYPE_CODE) >= _MEMO_LIMIT:
            _TYPE_CODE.clear()
        code = _TYPE_CODE[key] = stable_hash(key)
    return ints_hash((code, *inputs))


def output_hash(node: int, index: int) -> int:
    """Structural hash of output `index` of a node whose hash is `node`."""
    return ints_hash((node, index))
