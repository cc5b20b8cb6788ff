"""Constants and enlarge."""

from __future__ import annotations

from ..dsl import (
    SAME,
    SCALARS,
    Arith,
    app,
    concat,
    conv,
    dim,
    enlarge,
    eq,
    ewadd,
    ewmul,
    family,
    ge,
    minus,
    ok,
    rank,
    relu,
    s,
    smul,
    u,
    w,
    x,
)

axiom = family("constant")
_l = ewmul(x, app("const_one", shape="?sh"))
axiom("ewmul-one", "x * 1 = x", _l, x, ok(_l))
axiom("smul-one", "x·1 = x  (the 0-d one)", smul(x, app("const_one", shape=())), x)
_ic = app("const_iconv", shape="?ic")
axiom("iconv-idem", "I * I = I  (the identity kernel is 0/1)", ewmul(_ic, _ic), _ic)
_l = app("enlarge", app("const_iconv", shape=("?c", "?c", "?kh", "?kw")), kernel=("?KH", "?KW"))
axiom("enlarge-iconv", "enlarge(identity kernel) = the larger identity kernel", _l,
      app("const_iconv", shape=("?c", "?c", "?KH", "?KW")), ok(_l))


# The identity kernel used as an input: conv(I, w) only moves (flips, transposes,
# zero-pads) the entries of w, so doing it twice restores w, enlarged.
_I = app("const_iconv", shape=("?c", "?c", "?K", "?K"))
_l = conv(_I, conv(_I, w, g=1, **SAME), g=1, **SAME)
axiom("iconv-input-twice", "conv(I, conv(I, w)) = enlarge(w)  (I an identity kernel as input)",
      _l, enlarge(w, ("?K", "?K")), ok(_l), ok(enlarge(w, ("?K", "?K"))))
_l = ewmul(_I, conv(_I, w, g=1, **SAME))
_Iw = app("const_iconv", shape=("?d0", "?d1", "?d2", "?d3"))
_r = enlarge(ewmul(w, _Iw), ("?K", "?K"))
axiom("iconv-input-mask", "I * conv(I, w) = enlarge(w * I_w)  (I_w the identity kernel of w's "
      "shape: the centre of w's diagonal)", _l, _r, ok(_l), ok(_r),
      *(eq(dim(w, i), f"?d{i}") for i in range(4)), triggers=((_l, _Iw),))
_l = conv(_I, relu(w), g=1, **SAME)
axiom("iconv-input-relu", "conv(I, relu(w)) = relu(conv(I, w))  (entries moved, none summed)",
      _l, relu(conv(_I, w, g=1, **SAME)), ok(_l))


_l = enlarge(w, ("?kh", "?kw"))
axiom("enlarge-identity", "enlarge(w, (kh, kw)) = w  when w is kh x kw already", _l, w, ok(_l),
      eq(dim(w, 2), "?kh"), eq(dim(w, 3), "?kw"))


axiom("enlarge-defined", "enlarge(w, (kh, kw)) is defined for a 4-D w no larger than kh x kw "
      "with sizes of kh's and kw's parity", _l, None, ok(w), eq(rank(w), 4),
      ge(minus("?kh", dim(w, 2)), 0), ge(minus("?kw", dim(w, 3)), 0),
      eq(Arith("%", minus("?kh", dim(w, 2)), 2), 0), eq(Arith("%", minus("?kw", dim(w, 3)), 2), 0),
      rel="ok", triggers=((_l,),))
axiom("enlarge-enlarge", "enlarge(enlarge(w, k1), k2) = enlarge(w, k2)",
      enlarge(enlarge(w, "?k1"), "?k2"), enlarge(w, "?k2"), ok(enlarge(enlarge(w, "?k1"), "?k2")))
for _name, _f in (("ewadd", ewadd), ("ewmul", ewmul)):
    _l = enlarge(_f(w, u))
    axiom(f"enlarge-{_name}", f"enlarge({_name}(w, u)) = {_name}(enlarge(w), enlarge(u))  "
          "(zero padding)", _l, _f(enlarge(w), enlarge(u)), ok(_l))
    _r = _f(enlarge(w), enlarge(u))
    axiom(f"{_name}-enlarge", f"{_name}(enlarge(w), enlarge(u)) = enlarge({_name}(w, u))  "
          "(w, u of one shape)", _r, enlarge(_f(w, u)), ok(_r),
          *(eq(dim(w, i), dim(u, i)) for i in range(4)))
axiom("relu-enlarge", "relu(enlarge(w)) = enlarge(relu(w))  (relu(0) = 0)", relu(enlarge(w)),
      enlarge(relu(w)))
axiom("enlarge-smul", "enlarge(w·s) = enlarge(w)·s", enlarge(smul(w, s)), smul(enlarge(w), s),
      ranks=SCALARS)
_l = enlarge(concat("?a", w, u))
axiom("enlarge-concat", "enlarge(concat_a(w, u)) = concat_a(enlarge(w), enlarge(u))  (a = 0, 1)",
      _l, concat("?a", enlarge(w), enlarge(u)), ok(_l), ge("?a", 0), ge(1, "?a"))
