"""ResNet-50 (He et al. 2016) and ResNeXt-50 32x4d (Xie et al. 2017): bottleneck
residual networks, with batch norm after every convolution.

The stride of a downsampling block sits on its 3x3 convolution (ResNet "v1.5",
as in torchvision and TASO's examples; ResNeXt places it there too).
"""

from __future__ import annotations

from collections.abc import Sequence

from taso.ir import Graph, Tensor

from .layers import calibrate_batchnorm, classifier, conv_bn, scaled

# A small gamma on each block's last batch norm keeps the residual sums O(1)
# over 16 blocks of random weights.
RESIDUAL_GAMMA = 0.3


def bottleneck(g: Graph, x: Tensor, width: int, out_channels: int, stride: int,
               groups: int = 1) -> Tensor:
    """1x1 (width) -> 3x3 (width, grouped, strided) -> 1x1 (out), plus the
    shortcut (a strided 1x1 projection when the shape changes), then ReLU."""
    t = conv_bn(g, x, width, 1)
    t = conv_bn(g, t, width, 3, stride=stride, groups=groups)
    t = conv_bn(g, t, out_channels, 1, act=None, gamma=RESIDUAL_GAMMA)
    if stride != 1 or x.shape[1] != out_channels:
        x = conv_bn(g, x, out_channels, 1, stride=stride, act=None)
    return g.relu(g.add(x, t))


def _stem(g: Graph, batch_size: int, image_size: int, channels: int) -> Tensor:
    x = g.new_input((batch_size, 3, image_size, image_size), name="input")
    x = conv_bn(g, x, channels, 7, stride=2)
    return g.maxpool2d(x, kernel=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))


def _resnet(g: Graph, x: Tensor, blocks: Sequence[int], widths: Sequence[int],
            outs: Sequence[int], groups: int) -> Graph:
    for stage, n in enumerate(blocks):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            x = bottleneck(g, x, widths[stage], outs[stage], stride, groups)
    g.mark_output(classifier(g, x), "logits")
    return calibrate_batchnorm(g)


def resnet50(batch_size: int = 1, image_size: int = 224, width: float = 1.0,
             blocks: Sequence[int] = (3, 4, 6, 3), small: bool = False,
             seed: int = 0) -> Graph:
    """ResNet-50: a 7x7 stem, four stages of bottlenecks (3, 4, 6, 3 blocks;
    widths 64..512, outputs 256..2048), global pooling and a 1000-way classifier.
    `width` scales every channel count. small=True: 32x32 images, width 1/4,
    one block per stage."""
    if small:
        image_size, width, blocks = 32, 0.25, (1, 1, 1, 1)
    g = Graph(seed)
    x = _stem(g, batch_size, image_size, scaled(64, width))
    widths = [scaled(64 * 2 ** i, width) for i in range(4)]
    return _resnet(g, x, blocks, widths, [4 * w for w in widths], groups=1)


def resnext50(batch_size: int = 1, image_size: int = 224, groups: int = 32,
              group_width: int = 4, blocks: Sequence[int] = (3, 4, 6, 3),
              small: bool = False, seed: int = 0) -> Graph:
    """ResNeXt-50 (32x4d): ResNet-50 with grouped 3x3 convolutions of `groups`
    groups of `group_width` channels in the first stage (doubling per stage) and
    twice that width at each block's output. small=True: 32x32 images, 8 groups
    of 2, one block per stage."""
    if small:
        image_size, groups, group_width, blocks = 32, 8, 2, (1, 1, 1, 1)
    g = Graph(seed)
    x = _stem(g, batch_size, image_size, 64 if not small else 16)
    widths = [groups * group_width * 2 ** i for i in range(4)]
    return _resnet(g, x, blocks, widths, [2 * w for w in widths], groups=groups)
