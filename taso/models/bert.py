"""BERT-base encoder (Devlin et al. 2019) from already-embedded tokens: 12
post-norm transformer layers of hidden size 768, 12 attention heads and a 3072
feed-forward with exact (erf) GELU; no attention mask."""

from __future__ import annotations

import numpy as np

from taso.ir import Graph, Tensor

from .layers import dense, layernorm


def attention(g: Graph, x: Tensor, heads: int) -> Tensor:
    """Multi-head self-attention: project, split heads, softmax(q k^T / sqrt(d)) v,
    merge heads, project."""
    b, s, d = x.shape
    dh = d // heads

    def split_heads(t: Tensor, perm: tuple[int, ...]) -> Tensor:
        return g.transpose(g.reshape(t, (b, s, heads, dh)), perm)

    q = split_heads(dense(g, x, d), (0, 2, 1, 3))
    k = split_heads(dense(g, x, d), (0, 2, 3, 1))  # already transposed for q @ k
    v = split_heads(dense(g, x, d), (0, 2, 1, 3))
    inv_sqrt = g.new_weight((), data=np.array(dh ** -0.5, np.float32))
    p = g.softmax(g.mul(g.matmul(q, k), inv_sqrt), axis=-1)
    ctx = g.reshape(g.transpose(g.matmul(p, v), (0, 2, 1, 3)), (b, s, d))
    return dense(g, ctx, d)


def encoder_layer(g: Graph, x: Tensor, heads: int, ffn: int) -> Tensor:
    x = layernorm(g, g.add(x, attention(g, x, heads)), epsilon=1e-12)
    h = dense(g, g.gelu(dense(g, x, ffn)), x.shape[-1], gain=2.0)
    return layernorm(g, g.add(x, h), epsilon=1e-12)


def bert_base(batch_size: int = 1, seq_len: int = 64, hidden: int = 768,
              num_layers: int = 12, heads: int = 12, ffn: int = 3072,
              small: bool = False, seed: int = 0) -> Graph:
    """The encoder on an embedded input "input" of shape (batch, seq_len, hidden);
    the output is the last layer's hidden states. small=True: 2 layers of hidden
    64, 4 heads, feed-forward 256, 16 tokens."""
    if small:
        seq_len, hidden, num_layers, heads, ffn = 16, 64, 2, 4, 256
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
    g = Graph(seed)
    x = g.new_input((batch_size, seq_len, hidden), name="input")
    for _ in range(num_layers):
        x = encoder_layer(g, x, heads, ffn)
    g.mark_output(x, "hidden_states")
    return g
