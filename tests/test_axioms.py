"""Every axiom against the numpy reference of the operator library; false
axioms must be caught."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from taso.verifier.axioms import (
    AXIOMS,
    Axiom,
    app,
    b,
    b2,
    check_axiom,
    check_seeds,
    concat,
    conv,
    dim,
    ewadd,
    iv,
    matmul,
    ok,
    relu,
    split,
    transpose,
    u,
    w,
    x,
    y,
    z,
)
from taso.verifier.axioms.dsl import (
    NCHW,
    SAME,
    Arith,
    Var,
    avgpool,
    enlarge,
    ewmul,
    ge,
    s,
    smul,
)
from taso.verifier.prove import formula

NAMES = [a.name for a in AXIOMS]


@pytest.mark.parametrize("ax", AXIOMS, ids=NAMES)
def test_axiom_holds_on_reference(ax):
    """Deterministic seeds: never violated, and compared on well-shaped values at
    least once (a check that never meets its guard would test nothing). The
    seeds alternate fixed and free ranks and two value scales (check_axiom);
    bench/axiom_mutants.py scores these seeds against mutated axioms."""
    outcomes = [check_axiom(ax, seed) for seed in range(check_seeds(ax))]
    bad = [o.detail for o in outcomes if o.status == "violated"]
    assert not bad, f"{ax}: counterexample {bad[0]}"
    assert any(o.status == "held" for o in outcomes), f"{ax}: guard never met"


@pytest.mark.parametrize("ax", AXIOMS, ids=NAMES)
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_axiom_random_shapes(ax, seed):
    o = check_axiom(ax, seed)
    assert o.status != "violated", f"{ax}: counterexample {o.detail}"


def _false(name, lhs, rhs, *when, **kw):
    return Axiom(name, name, iv(lhs), iv(rhs), tuple(when), **kw)


FALSE = [
    _false("relu-additive", relu(ewadd(x, y)), ewadd(relu(x), relu(y))),
    _false("matmul-comm", matmul(x, y), matmul(y, x)),
    _false("concat-wrong-axis", concat(0, x, y), concat(1, x, y), ok(concat(0, x, y))),
    _false("conv-transposed-kernel", conv(x, w), conv(x, transpose(w, (1, 0, 2, 3))),
           ok(conv(x, w))),
    _false("enlarge-any-stride", conv(x, app("enlarge", w, kernel="?k"), p="same"),
           conv(x, w, p="same"), ok(conv(x, app("enlarge", w, kernel="?k"), p="same"))),
    _false("kernel-concat-grouped", conv(x, concat(0, w, u)),
           concat(1, conv(x, w), conv(x, u)), ok(conv(x, concat(0, w, u)))),
    _false("concat-ewadd-unguarded", concat("?a", ewadd(x, y), ewadd(z, u)),
           ewadd(concat("?a", x, z), concat("?a", y, u))),
    _false("concat-dim-any-axis", dim(concat("?a", x, y), "?i"), dim(x, "?i"),
           ok(concat("?a", x, y))),
    _false("split-any-sizes", split(concat(0, x, y), 0, ("?s1", "?s2"), 0), x,
           ok(split(concat(0, x, y), 0, ("?s1", "?s2"), 0))),
    _false("transpose-involution-unguarded", transpose(transpose(x)), x),
    _false("add-bias-concat-any-lengths", app("add", concat(1, x, y), concat(0, b, b2)),
           concat(1, app("add", x, b), app("add", y, b2)),
           ok(app("add", concat(1, x, y), concat(0, b, b2)))),
]


# False neighbours of the axioms added for the 4-operator set: a guard or a
# condition dropped, an axis or a count changed.
_I = app("const_iconv", shape=("?c", "?c", "?KH", "?KW"))
_xa, _xb, _ya, _yb = (Var(n) for n in ("xa", "xb", "ya", "yb"))
_g = conv(concat(1, concat(1, _xa, _xb), concat(1, _ya, _yb)), concat(1, w, u), g=2)
_cs = conv(_I, conv(x, w, g=1, **SAME), g=1, **SAME)
_big = app("const_iconv", shape=("?c", "?c", "?kh", "?kw"))
_small = app("const_iconv", shape=("?c", "?c", 1, 1))
_same1 = {"s": (1, 1), "p": "same"}


def _ones(*sh):
    return app("const_one", shape=sh)


FALSE += [
    _false("split-sizes-other-axis", Arith("+", iv("?s1"), iv("?s2")), dim(x, 0),
           ok(split(x, "?a", ("?s1", "?s2"), 0)), ge("?a", 0)),
    _false("conv-dim-any-stride", dim(conv(x, w, p="same"), "?i"), dim(x, "?i"),
           ok(conv(x, w, p="same")), ge("?i", 2), ge(3, "?i"), ranks=NCHW),
    _false("conv-grouped-channel-concat-unguarded", _g,
           ewadd(conv(concat(1, _xa, _ya), w, g=2), conv(concat(1, _xb, _yb), u, g=2)), ok(_g),
           ranks={"xa": 4, "xb": 4, "ya": 4, "yb": 4, "w": 4, "u": 4}),
    _false("iconv-input-conv-any-size", _cs, conv(enlarge(w, ("?KH", "?KW")), x, g=1, **SAME),
           ok(_cs), ok(conv(enlarge(w, ("?KH", "?KW")), x, g=1, **SAME)), ranks=NCHW),
    _false("conv-iconv-size-valid", conv(x, _big, p="valid", s=(1, 1), d=(1, 1)),
           conv(x, _small, p="valid", s=(1, 1), d=(1, 1)),
           ok(conv(x, _big, p="valid", s=(1, 1), d=(1, 1))), ranks=NCHW),
    _false("avgpool-conv-any-kernel", avgpool(conv(x, w, **_same1)),
           conv(avgpool(x), w, **_same1), ok(avgpool(conv(x, w, **_same1))), ranks=NCHW),
    _false("matmul-ones-3-as-2", matmul(_ones("?d0", 3), _ones(3, "?d1")),
           ewadd(_ones("?d0", "?d1"), _ones("?d0", "?d1")),
           ok(matmul(_ones("?d0", 3), _ones(3, "?d1")))),
    _false("relu-smul-any", relu(smul(x, s)), smul(x, relu(s)), ranks={"s": 0}),
    _false("iconv-diagonal-conv-enlarged-unmasked",
           conv(enlarge(ewmul(x, _I), ("?kh", "?kw")), w, g=1, **SAME),
           enlarge(ewmul(ewmul(x, w), _I), ("?kh", "?kw")),
           ok(conv(enlarge(ewmul(x, _I), ("?kh", "?kw")), w, g=1, **SAME)), ranks=NCHW),
    _false("iconv-diagonal-conv-unmasked", conv(ewmul(_I, x), w, g=1, **SAME),
           ewmul(_I, ewmul(x, w)), ok(conv(ewmul(_I, x), w, g=1, **SAME)), ranks=NCHW),
]


@pytest.mark.parametrize("ax", FALSE, ids=[a.name for a in FALSE])
def test_false_axiom_is_caught(ax):
    assert any(check_axiom(ax, seed).status == "violated" for seed in range(30))


def test_every_axiom_compiles_with_triggers():
    for ax in AXIOMS:
        f = formula(ax)
        assert f.is_forall() and f.num_patterns() + f.num_no_patterns() >= 1, ax.name


def test_axioms_cover_tasos_families():
    families = {a.family for a in AXIOMS}
    assert {"elementwise", "scalar", "activation", "fusion", "transpose", "concat", "matmul",
            "conv", "pool", "shape", "strict"} <= families
    assert len(AXIOMS) >= 44
