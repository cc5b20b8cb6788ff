"""When two float results count as equal: every closeness test and its tolerance.

Two questions, two tests:
- whole models (the optimizer's check of every result, the fuzzing harness):
  element by element, |b - a| <= MODEL_ATOL + MODEL_RTOL * |a| with `a` the
  original's output; float32 reassociation and folded batch norms change
  rounding, nothing more. Equal infinities and NaN on both sides agree (random
  inputs give Sqrt or Log a NaN that a faithful rewrite keeps);
- the two sides of a rule, or of an axiom, on random inputs: the largest
  difference against the reference side's largest magnitude (at least 1), a
  few operators deep. REFUTE_RTOL where a side is float32 (the refuter's
  counterexamples), CONFIRM_RTOL where both run in float64 (the generator's
  confirmation of a candidate) and for the numeric check of the axioms, which
  must catch a false axiom however small its error. The benchmark's sanity
  check of other tools' outputs bounds the same relative error by MODEL_RTOL.
"""

from __future__ import annotations

import numpy as np

MODEL_ATOL = 1e-3
MODEL_RTOL = 1e-3
REFUTE_RTOL = 1e-3
CONFIRM_RTOL = 1e-4
AXIOM_RTOL = 1e-4


def elementwise_errors(a: np.ndarray, b: np.ndarray, atol: float = MODEL_ATOL,
                       rtol: float = MODEL_RTOL) -> tuple[np.ndarray, float]:
    """(mask of the elements of `b` outside the tolerance around `a`, largest
    difference) for two arrays of one shape. Non-float arrays must be equal."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind not in "fc":
        bad = a != b
        return bad, float(np.any(bad))
    wide = np.result_type(a.dtype, b.dtype, np.float64)  # complex stays complex
    af, bf = a.astype(wide), b.astype(wide)
    with np.errstate(invalid="ignore"):
        same = (af == bf) | (np.isnan(af) & np.isnan(bf))
        diff = np.where(same, 0.0, np.abs(bf - af))
    bad = ~(same | (np.isfinite(af) & (diff <= atol + rtol * np.abs(af))))
    return bad, float(diff.max()) if diff.size else 0.0


def scaled_mismatch(u: np.ndarray, v: np.ndarray, rtol: float,
                    nan_agrees: bool = True) -> float | None:
    """The largest difference of two results if it exceeds `rtol` times the
    reference `u`'s largest magnitude (at least 1), else None. A shape that
    differs, or NaN on one side only, is a mismatch (inf); NaN where both
    sides are NaN agrees (both undefined there) unless not `nan_agrees` (the
    generator confirms a candidate only where both sides are defined)."""
    u, v = np.asarray(u), np.asarray(v)
    if u.shape != v.shape:
        return float("inf")
    nu, nv = np.isnan(u), np.isnan(v)
    if np.any(nu != nv) or not nan_agrees and np.any(nu):
        return float("inf")
    keep = ~nu
    diff, scale = _diff_and_scale(u[keep], v[keep])
    return diff if not diff <= rtol * scale else None


def relative_error(u: np.ndarray, v: np.ndarray) -> float:
    """The largest difference of two same-shaped results over the reference
    `u`'s largest magnitude (at least 1): what `scaled_mismatch` bounds."""
    diff, scale = _diff_and_scale(np.asarray(u), np.asarray(v))
    return diff / scale


def _diff_and_scale(u: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    a, b = u.astype(np.float64), v.astype(np.float64)
    diff = float(np.max(np.abs(a - b), initial=0.0))
    return diff, max(1.0, float(np.max(np.abs(a), initial=0.0)))
