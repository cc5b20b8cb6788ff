"""Constants and enlarge."""

from __future__ import annotations

from ..dsl import (
    NCHW,
    SAME,
    SCALARS,
    Arith,
    app,
    avgpool,
    concat,
    conv,
    dim,
    enlarge,
    eq,
    ewadd,
    ewmul,
    family,
    ge,
    iv,
    matmul,
    minus,
    ok,
    rank,
    relu,
    s,
    smul,
    transpose,
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


# ---- added for the 4-operator set (issue 25) ------------------------------------
_one = app("const_one", shape="?sh")
axiom("relu-smul-one", "relu(1·s) = 1·relu(s)  (the ones are not negative)", relu(smul(_one, s)),
      smul(_one, relu(s)), ranks=SCALARS, triggers=((relu(smul(_one, s)),),))
axiom("relu-smul-iconv", "relu(I·s) = I·relu(s)  (the identity kernel is not negative)",
      relu(smul(_ic, s)), smul(_ic, relu(s)), ranks=SCALARS, triggers=((relu(smul(_ic, s)),),))
_im = app("const_imm", shape=("?d0", "?d1"))
axiom("imm-idem", "I * I = I  (the identity matrix is 0/1)", ewmul(_im, _im), _im,
      triggers=((ewmul(_im, _im),),))
axiom("transpose-imm", "transpose(I) = I  (the identity matrix is symmetric)", transpose(_im), _im,
      triggers=((transpose(_im),),))


def _ones(*sh):
    return app("const_one", shape=sh)


_l = transpose(_ones("?d0", "?d1"))
axiom("transpose-one", "transpose(ones (d0, d1)) = ones (d1, d0)", _l, _ones("?d1", "?d0"), ok(_l),
      triggers=((_l,),))
# A product of ones matrices sums k ones per entry, k the inner size; stated for
# the inner sizes the generator draws (1 to 3), as sums of ones matrices.
for _k in (1, 2, 3):
    _l = matmul(_ones("?d0", _k), _ones(_k, "?d1"))
    _r = _ones("?d0", "?d1")
    for _ in range(_k - 1):
        _r = ewadd(_ones("?d0", "?d1"), _r)
    axiom(f"matmul-ones-{_k}", f"ones (d0, {_k}) ones ({_k}, d1) = {_k} ones (d0, d1)  (as a sum)",
          _l, _r, ok(_l), triggers=((_l,),))

# The identity kernel as an input, continued. I of any odd size (c, c, KH, KW)
# as the input of a convolution (same pads, stride 1) gives each output entry
# one entry of the kernel or 0 (the kernel flipped and transposed): so conv(I, .)
# commutes with products of kernels of one shape and with symmetric pooling,
# and, read as a correlation, conv(I, conv(x, w)) is conv(enlarge(w), x). These
# and the masks below fire left to right only: the products they would build
# right to left feed the ewmul laws without end.
_Ir = app("const_iconv", shape=("?c", "?c", "?KH", "?KW"))


def _ci(v):
    return conv(_Ir, v, g=1, **SAME)


_l = ewmul(_ci(w), _ci(u))
axiom("iconv-input-ewmul", "conv(I, w) * conv(I, u) = conv(I, w * u)  (I an identity kernel as "
      "input; w, u of one shape)", _l, _ci(ewmul(w, u)), ok(_l),
      *(eq(dim(w, i), dim(u, i)) for i in range(4)), triggers=((_l,),), ranks=NCHW)
_l = _ci(conv(x, w, g=1, **SAME))
_r = conv(enlarge(w, ("?KH", "?KW")), x, g=1, **SAME)
axiom("iconv-input-conv", "conv(I, conv(x, w)) = conv(enlarge(w), x)  (I an identity kernel as "
      "input, x of its height and width, w enlarged to them)", _l, _r, ok(_l),
      ok(enlarge(w, ("?KH", "?KW"))), eq(dim(x, 2), "?KH"), eq(dim(x, 3), "?KW"), ranks=NCHW)
_pool = dict(kernel=("?kh", "?kw"), strides=(1, 1), pads="same")
_odd = (eq(Arith("%", iv("?kh"), 2), 1), eq(Arith("%", iv("?kw"), 2), 1), eq(dim(w, 2), "?KH"),
        eq(dim(w, 3), "?KW"))
for _name, _p in (("maxpool", lambda t: app("maxpool2d", t, **_pool)),
                  ("avgpool", lambda t: avgpool(t, **_pool))):
    _l = _ci(_p(w))
    axiom(f"iconv-input-{_name}", f"conv(I, {_name}(w)) = {_name}(conv(I, w))  (I an identity "
          "kernel as input, w of its height and width; odd window, same pads, stride 1)", _l,
          _p(_ci(w)), ok(_l), *_odd, triggers=((_l,),), ranks=NCHW)
_l = conv(ewmul(_Ir, x), ewmul(_Ir, w), g=1, **SAME)
axiom("iconv-diagonal-conv", "conv(I * x, I * w) = I * (x * w)  (I an identity kernel: input and "
      "kernel centred diagonals, one product per output entry)", _l, ewmul(_Ir, ewmul(x, w)),
      ok(_l), triggers=((_l,),), ranks=NCHW)
_l = ewmul(_Ir, enlarge(w, ("?KH", "?KW")))
_r = enlarge(ewmul(w, _Iw), ("?KH", "?KW"))
axiom("iconv-enlarge-mask", "I * enlarge(w) = enlarge(w * I_w)  (I_w the identity kernel of w's "
      "shape)", _l, _r, ok(_l), ok(_r), *(eq(dim(w, i), f"?d{i}") for i in range(4)),
      triggers=((_l, _Iw),), ranks=NCHW)
_l = ewmul(_Ir, conv(ewmul(x, _Ir), w, g=1, **SAME))
_r = ewmul(x, enlarge(ewmul(w, _Iw), ("?KH", "?KW")))
axiom("iconv-data-mask", "I * conv(x * I, w) = x * enlarge(w * I_w)  (a centred diagonal input: "
      "the diagonal of the output's centre is that of x times w's)", _l, _r, ok(_l), ok(_r),
      *(eq(dim(w, i), f"?d{i}") for i in range(4)), triggers=((_l, _Iw),), ranks=NCHW)
_Is = app("const_iconv", shape=("?c", "?c", "?kh", "?kw"))
_l = conv(enlarge(ewmul(x, _Is), ("?KH", "?KW")), ewmul(w, _Is), g=1, **SAME)
axiom("iconv-diagonal-conv-enlarged", "conv(enlarge(x * I_s), w * I_s) = enlarge(x * w * I_s)  "
      "(I_s an identity kernel: input and kernel centred diagonals, one product per output "
      "entry)", _l, enlarge(ewmul(ewmul(x, w), _Is), ("?KH", "?KW")), ok(_l), triggers=((_l,),),
      ranks=NCHW)
_avg = dict(kernel=("?KH", "?KW"), strides=(1, 1), pads="same", count_include_pad=1)
_l = conv(x, avgpool(_Ir, **_avg), g=1, **SAME)
axiom("conv-avgpool-iconv", "conv(x, avgpool(I)) = avgpool(x)  (I an identity kernel averaged "
      "over its own size is the diagonal averaging kernel; same pads, stride 1, padding "
      "counted)", _l, avgpool(x, **_avg), ok(_l), ranks=NCHW)
