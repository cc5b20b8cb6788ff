"""The classic superoptimizer model suite, built with the builder API and random
weights. Every builder takes `batch_size`, model-specific size knobs (paper
defaults), `small=True` for a cheap variant of the same structure, and `seed`;
it returns a Graph with its outputs marked."""

from collections.abc import Callable

from taso.ir import Graph

from .bert import bert_base
from .inception import inception_v3
from .mobilenet import mobilenet_v2
from .nasnet import nasnet_a
from .nasrnn import nasrnn
from .resnet import resnet50, resnext50
from .squeezenet import squeezenet

ALL: dict[str, Callable[..., Graph]] = {
    "resnet50": resnet50,
    "resnext50": resnext50,
    "inception_v3": inception_v3,
    "squeezenet": squeezenet,
    "nasnet_a": nasnet_a,
    "nasrnn": nasrnn,
    "bert_base": bert_base,
    "mobilenet_v2": mobilenet_v2,
}

__all__ = ["ALL", "bert_base", "inception_v3", "mobilenet_v2", "nasnet_a", "nasrnn",
           "resnet50", "resnext50", "squeezenet"]
