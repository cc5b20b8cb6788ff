"""NASNet-A, mobile configuration (Zoph et al. 2018), after the cell structure of
the authors' released model: a strided 3x3 stem, two stem reduction cells, then
three stacks of N normal cells separated by reduction cells; global pooling and
a classifier. TensorFlow's "SAME" padding throughout, average pools that do not
count padding, separable convolutions as a depthwise then a pointwise
convolution.

Each cell takes the two previous cell outputs (prev, cur). Its base applies
ReLU -> 1x1 conv -> BN to cur and matches prev to it (a factorized reduction when
prev has twice the resolution, a 1x1 conv when only channels differ). Five
blocks then each add two operations on earlier states; the cell concatenates
the states no block used. Normal cell (F filters, output 6F channels):
  b1 = sep5x5(cur) + sep3x3(prev)      b2 = sep5x5(prev) + sep3x3(prev)
  b3 = avg3x3(cur) + prev              b4 = avg3x3(prev) + avg3x3(prev)
  b5 = sep3x3(cur) + cur               out = concat(prev, b1, ..., b5)
Reduction cell (stride 2 on operations reading cur or prev, output 4F):
  b1 = sep5x5(cur) + sep7x7(prev)      b2 = max3x3(cur) + sep7x7(prev)
  b3 = avg3x3(cur) + sep5x5(prev)      b4 = b2 + avg3x3(b1)
  b5 = sep3x3(b1) + max3x3(cur)        out = concat(b2, b3, b4, b5)
A separable operation is ReLU -> separable conv (strided) -> BN -> ReLU ->
separable conv -> BN.
"""

from __future__ import annotations

from taso.ir import Graph, Tensor

from .layers import batchnorm, calibrate_batchnorm, classifier, conv, conv_bn


class _Cells:
    def __init__(self, g: Graph):
        self.g = g

    def sep_conv(self, x: Tensor, filters: int, kernel: int, stride: int) -> Tensor:
        g = self.g
        for s in (stride, 1):
            x = g.relu(x)
            x = conv(g, x, x.shape[1], kernel, stride=s, padding="same", groups=x.shape[1])
            x = batchnorm(g, conv(g, x, filters, 1, gain=1.0), epsilon=1e-3)
        return x

    def pool(self, x: Tensor, kind: str, stride: int) -> Tensor:
        if kind == "max":
            return self.g.maxpool2d(x, kernel=(3, 3), strides=(stride, stride), padding="same")
        return self.g.avgpool2d(x, kernel=(3, 3), strides=(stride, stride), padding="same",
                                count_include_pad=0)

    def relu_conv_bn(self, x: Tensor, filters: int) -> Tensor:
        return conv_bn(self.g, self.g.relu(x), filters, 1, act=None, epsilon=1e-3)

    def factorized_reduction(self, x: Tensor, filters: int) -> Tensor:
        """Halve the resolution without dropping pixels: two stride-2 1x1 paths, the
        second shifted by one pixel (pad bottom/right, drop the first row/column)."""
        g = self.g
        if filters % 2:
            raise ValueError(f"factorized reduction needs an even filter count, got {filters}")
        x = g.relu(x)
        p1 = g.avgpool2d(x, kernel=(1, 1), strides=(2, 2))
        shifted = g.slice(g.pad(x, (0, 0, 0, 0, 0, 0, 1, 1)), (1, 1), (x.shape[2] + 1,
                                                                       x.shape[3] + 1),
                          axes=(2, 3))
        p2 = g.avgpool2d(shifted, kernel=(1, 1), strides=(2, 2))
        both = g.concat(1, [conv(g, p1, filters // 2, 1), conv(g, p2, filters // 2, 1)])
        return batchnorm(g, both, epsilon=1e-3)

    def base(self, prev: Tensor | None, cur: Tensor, filters: int) -> tuple[Tensor, Tensor]:
        if prev is None:
            prev = cur
        elif prev.shape[2] != cur.shape[2]:
            prev = self.factorized_reduction(prev, filters)
        elif prev.shape[1] != filters:
            prev = self.relu_conv_bn(prev, filters)
        return prev, self.relu_conv_bn(cur, filters)

    def normal(self, prev: Tensor | None, cur: Tensor, filters: int) -> Tensor:
        g = self.g
        prev, cur = self.base(prev, cur, filters)
        sep = self.sep_conv
        b1 = g.add(sep(cur, filters, 5, 1), sep(prev, filters, 3, 1))
        b2 = g.add(sep(prev, filters, 5, 1), sep(prev, filters, 3, 1))
        b3 = g.add(self.pool(cur, "avg", 1), prev)
        b4 = g.add(self.pool(prev, "avg", 1), self.pool(prev, "avg", 1))
        b5 = g.add(sep(cur, filters, 3, 1), cur)
        return g.concat(1, [prev, b1, b2, b3, b4, b5])

    def reduction(self, prev: Tensor | None, cur: Tensor, filters: int) -> Tensor:
        g = self.g
        prev, cur = self.base(prev, cur, filters)
        sep = self.sep_conv
        b1 = g.add(sep(cur, filters, 5, 2), sep(prev, filters, 7, 2))
        b2 = g.add(self.pool(cur, "max", 2), sep(prev, filters, 7, 2))
        b3 = g.add(self.pool(cur, "avg", 2), sep(prev, filters, 5, 2))
        b4 = g.add(b2, self.pool(b1, "avg", 1))
        b5 = g.add(sep(b1, filters, 3, 1), self.pool(cur, "max", 2))
        return g.concat(1, [b2, b3, b4, b5])


def nasnet_a(batch_size: int = 1, image_size: int = 224, num_cells: int = 4,
             filters: int = 44, stem_filters: int = 32, small: bool = False,
             seed: int = 0) -> Graph:
    """NASNet-A; the default is the paper's mobile model (4 @ 1056: N = 4 normal
    cells per stack, F = 44 filters). `num_cells` sets N (fewer cells, same cell
    structure). Filters double at each reduction; the stem cells use F/4 and F/2.
    small=True: 32x32 images, N = 1, F = 8, 8 stem filters."""
    if small:
        image_size, num_cells, filters, stem_filters = 32, 1, 8, 8
    g = Graph(seed)
    cells = _Cells(g)
    x = g.new_input((batch_size, 3, image_size, image_size), name="input")
    x = conv_bn(g, x, stem_filters, 3, stride=2, padding="valid", act=None, epsilon=1e-3,
                gain=1.0)
    states: list[Tensor | None] = [None, x]
    for scale in (4, 2):  # the stem reduction cells
        states.append(cells.reduction(states[-2], states[-1], filters // scale))
    f = filters
    for stack in range(3):
        if stack > 0:
            f *= 2
            states.append(cells.reduction(states[-2], states[-1], f))
        for _ in range(num_cells):
            states.append(cells.normal(states[-2], states[-1], f))
    g.mark_output(classifier(g, g.relu(states[-1])), "logits")
    return calibrate_batchnorm(g)
