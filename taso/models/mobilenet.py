"""MobileNetV2 (Sandler et al. 2018): inverted residual blocks (1x1 expansion,
3x3 depthwise, linear 1x1 projection, residual when shapes agree), ReLU6 as
clip(0, 6), batch norm after every convolution."""

from __future__ import annotations

from taso.ir import Graph, Tensor

from .layers import calibrate_batchnorm, classifier, conv_bn

# (expansion t, output channels c, repeats n, first stride s), from the paper's table 2.
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a scaled channel count to a multiple of `divisor`, never more than
    10% below it (the reference implementation's rule)."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def inverted_residual(g: Graph, x: Tensor, out: int, stride: int, expand: int) -> Tensor:
    hidden = x.shape[1] * expand
    t = conv_bn(g, x, hidden, 1, act="relu6") if expand != 1 else x
    t = conv_bn(g, t, hidden, 3, stride=stride, groups=hidden, act="relu6")
    t = conv_bn(g, t, out, 1, act=None, gamma=0.5)
    return g.add(x, t) if stride == 1 and x.shape[1] == out else t


def mobilenet_v2(batch_size: int = 1, image_size: int = 224, width: float = 1.0,
                 small: bool = False, seed: int = 0) -> Graph:
    """MobileNetV2 with width multiplier `width` (channels rounded to multiples of
    8). small=True: 32x32 images, width 1/4."""
    if small:
        image_size, width = 32, 0.25
    g = Graph(seed)
    x = g.new_input((batch_size, 3, image_size, image_size), name="input")
    x = conv_bn(g, x, make_divisible(32 * width), 3, stride=2, act="relu6")
    for t, c, n, s in SETTINGS:
        for i in range(n):
            x = inverted_residual(g, x, make_divisible(c * width), s if i == 0 else 1, t)
    x = conv_bn(g, x, make_divisible(1280 * max(1.0, width)), 1, act="relu6")
    g.mark_output(classifier(g, x), "logits")
    return calibrate_batchnorm(g)
