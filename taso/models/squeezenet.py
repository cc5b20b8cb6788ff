"""SqueezeNet v1.1 (Iandola et al. 2016; the v1.1 layout of the reference
implementation): a 3x3 stem, eight fire modules between three max pools, and a
1x1 convolution classifier averaged globally. Convolutions carry biases and no
batch norm, as in the original."""

from __future__ import annotations

from taso.ir import Graph, Tensor

from .layers import conv_bias, scaled


def fire(g: Graph, x: Tensor, squeeze: int, expand: int) -> Tensor:
    """Squeeze with 1x1 convolutions, then expand with parallel 1x1 and 3x3 ones
    whose outputs are concatenated along channels."""
    s = conv_bias(g, x, squeeze, 1)
    return g.concat(1, [conv_bias(g, s, expand, 1), conv_bias(g, s, expand, 3)])


def squeezenet(batch_size: int = 1, image_size: int = 224, width: float = 1.0,
               classes: int = 1000, small: bool = False, seed: int = 0) -> Graph:
    """SqueezeNet v1.1; `width` scales every channel count but the classes.
    small=True: 64x64 images, width 1/4, 100 classes."""
    if small:
        image_size, width, classes = 64, 0.25, 100
    g = Graph(seed)
    x = g.new_input((batch_size, 3, image_size, image_size), name="input")
    x = conv_bias(g, x, scaled(64, width), 3, stride=2, padding=(0, 0, 0, 0))

    def pool(t: Tensor) -> Tensor:
        return g.maxpool2d(t, kernel=(3, 3), strides=(2, 2))

    x = pool(x)
    for i, (sq, ex) in enumerate(((16, 64), (16, 64), (32, 128), (32, 128),
                                  (48, 192), (48, 192), (64, 256), (64, 256))):
        x = fire(g, x, scaled(sq, width), scaled(ex, width))
        if i in (1, 3):
            x = pool(x)
    x = conv_bias(g, x, classes, 1)
    g.mark_output(g.flatten(g.global_avgpool(x), 1), "logits")
    return g
