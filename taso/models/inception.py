"""Inception-v3 (Szegedy et al. 2016) at 299x299, without the auxiliary
classifier (an inference graph): the stem, 3 Inception-A, a grid reduction,
4 Inception-C (factorized 7x7), a second reduction and 2 Inception-E blocks
(expanded 3x3 banks). Every convolution is conv -> batch norm (eps 1e-3) -> ReLU.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso.ir import Graph, Tensor

from .layers import calibrate_batchnorm, classifier, conv_bn, scaled


class _Builder:
    """Convolutions and pools of one Inception graph, channel counts scaled by
    `width`; pads are PyTorch-style explicit (top, left, bottom, right)."""

    def __init__(self, g: Graph, width: float):
        self.g, self.width = g, width

    def conv(self, x: Tensor, out: int, kernel: Sequence[int] = (1, 1), stride: int = 1,
             pad: Sequence[int] = (0, 0)) -> Tensor:
        ph, pw = pad
        return conv_bn(self.g, x, scaled(out, self.width), kernel, stride,
                       padding=(ph, pw, ph, pw), epsilon=1e-3)

    def avgpool(self, x: Tensor) -> Tensor:
        return self.g.avgpool2d(x, kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))

    def maxpool(self, x: Tensor) -> Tensor:
        return self.g.maxpool2d(x, kernel=(3, 3), strides=(2, 2))

    def cat(self, *xs: Tensor) -> Tensor:
        return self.g.concat(1, list(xs))

    # ---- blocks --------------------------------------------------------------
    def stem(self, x: Tensor) -> Tensor:
        x = self.conv(x, 32, (3, 3), stride=2)
        x = self.conv(x, 32, (3, 3))
        x = self.conv(x, 64, (3, 3), pad=(1, 1))
        x = self.maxpool(x)
        x = self.conv(x, 80)
        x = self.conv(x, 192, (3, 3))
        return self.maxpool(x)

    def block_a(self, x: Tensor, pool_features: int) -> Tensor:
        b1 = self.conv(x, 64)
        b5 = self.conv(self.conv(x, 48), 64, (5, 5), pad=(2, 2))
        b3 = self.conv(self.conv(self.conv(x, 64), 96, (3, 3), pad=(1, 1)), 96, (3, 3),
                       pad=(1, 1))
        bp = self.conv(self.avgpool(x), pool_features)
        return self.cat(b1, b5, b3, bp)

    def reduction_b(self, x: Tensor) -> Tensor:
        b3 = self.conv(x, 384, (3, 3), stride=2)
        bd = self.conv(self.conv(self.conv(x, 64), 96, (3, 3), pad=(1, 1)), 96, (3, 3),
                       stride=2)
        return self.cat(b3, bd, self.maxpool(x))

    def block_c(self, x: Tensor, c7: int) -> Tensor:
        b1 = self.conv(x, 192)
        b7 = self.conv(x, c7)
        b7 = self.conv(b7, c7, (1, 7), pad=(0, 3))
        b7 = self.conv(b7, 192, (7, 1), pad=(3, 0))
        bd = self.conv(x, c7)
        for out, k, p in ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)),
                          (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))):
            bd = self.conv(bd, out, k, pad=p)
        bp = self.conv(self.avgpool(x), 192)
        return self.cat(b1, b7, bd, bp)

    def reduction_d(self, x: Tensor) -> Tensor:
        b3 = self.conv(self.conv(x, 192), 320, (3, 3), stride=2)
        b7 = self.conv(x, 192)
        b7 = self.conv(b7, 192, (1, 7), pad=(0, 3))
        b7 = self.conv(b7, 192, (7, 1), pad=(3, 0))
        b7 = self.conv(b7, 192, (3, 3), stride=2)
        return self.cat(b3, b7, self.maxpool(x))

    def block_e(self, x: Tensor) -> Tensor:
        b1 = self.conv(x, 320)
        b3 = self.conv(x, 384)
        b3a = self.conv(b3, 384, (1, 3), pad=(0, 1))
        b3b = self.conv(b3, 384, (3, 1), pad=(1, 0))
        bd = self.conv(self.conv(x, 448), 384, (3, 3), pad=(1, 1))
        bda = self.conv(bd, 384, (1, 3), pad=(0, 1))
        bdb = self.conv(bd, 384, (3, 1), pad=(1, 0))
        bp = self.conv(self.avgpool(x), 192)
        return self.cat(b1, b3a, b3b, bda, bdb, bp)


def inception_v3(batch_size: int = 1, image_size: int = 299, width: float = 1.0,
                 small: bool = False, seed: int = 0) -> Graph:
    """Inception-v3; `width` scales every channel count; images must be at least
    75x75. small=True: 75x75 images, width 1/8."""
    if small:
        image_size, width = 75, 0.125
    g = Graph(seed)
    b = _Builder(g, width)
    x = b.stem(g.new_input((batch_size, 3, image_size, image_size), name="input"))
    for pool_features in (32, 64, 64):
        x = b.block_a(x, pool_features)
    x = b.reduction_b(x)
    for c7 in (128, 160, 160, 192):
        x = b.block_c(x, c7)
    x = b.reduction_d(x)
    x = b.block_e(b.block_e(x))
    g.mark_output(classifier(g, x), "logits")
    return calibrate_batchnorm(g)
