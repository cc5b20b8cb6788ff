"""The recurrent cell found by neural architecture search (Zoph & Le 2017),
unrolled over a sequence, as TASO's NasRNN example builds it: every step forms
eight gate pre-activations x W_i + h U_i and combines them through a fixed tree
of ReLU, sigmoid, tanh, additions and products into the next state."""

from __future__ import annotations

from taso.ir import Graph, Tensor


def nas_cell(g: Graph, x: Tensor, h: Tensor, weights: list[tuple[Tensor, Tensor]]) -> Tensor:
    t = [g.add(g.matmul(x, w), g.matmul(h, u)) for w, u in weights]
    m0 = g.add(g.relu(t[0]), g.sigmoid(t[3]))
    m1 = g.add(g.sigmoid(t[1]), g.tanh(t[2]))
    m2 = g.mul(g.sigmoid(t[4]), g.tanh(t[5]))
    m3 = g.mul(g.sigmoid(t[6]), g.relu(t[7]))
    m4 = g.add(g.sigmoid(m1), g.tanh(m2))
    m5 = g.mul(g.tanh(m0), g.tanh(m3))
    return g.tanh(g.mul(g.tanh(m4), g.tanh(m5)))


def nasrnn(batch_size: int = 1, seq_len: int = 5, hidden_size: int = 512,
           small: bool = False, seed: int = 0) -> Graph:
    """NasRNN over `seq_len` steps; inputs x0.. (batch, hidden) and the initial
    state h0; the output is the final state. The eight gate weight pairs are
    shared by all steps, as in a recurrent network. small=True: hidden 32, 3
    steps."""
    if small:
        seq_len, hidden_size = 3, 32
    g = Graph(seed)
    s = (1.0 / hidden_size) ** 0.5
    weights = [(g.new_weight((hidden_size, hidden_size), scale=s),
                g.new_weight((hidden_size, hidden_size), scale=s)) for _ in range(8)]
    xs = [g.new_input((batch_size, hidden_size), name=f"x{i}") for i in range(seq_len)]
    h = g.new_input((batch_size, hidden_size), name="h0")
    for x in xs:
        h = nas_cell(g, x, h, weights)
    g.mark_output(h, "h")
    return g
