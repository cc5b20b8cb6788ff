"""Small graphs the cost-model tests price (tests/test_costs*.py)."""

from __future__ import annotations

import taso


def merged_matmuls(n: int = 3):
    g = taso.new_graph()
    x = g.new_input((4, 8))
    w = g.concat(1, [g.new_weight((8, 8)) for _ in range(n)])
    for t in g.split(g.matmul(x, w), 1, n):
        g.mark_output(t)
    return g


def conv_block(residual: bool):
    g = taso.new_graph()
    x = g.new_input((1, 4, 8, 8))
    y = g.conv2d(x, g.new_weight((4, 4, 3, 3)), padding="same")
    y = g.batchnorm(y, *[g.new_weight((4,)) for _ in range(4)])
    if residual:
        y = g.ewadd(y, x)
    g.mark_output(g.relu(y))
    return g


def graph_chain():
    g = taso.new_graph()
    x = g.new_input((1, 4, 8, 8))  # 1 KiB
    w = g.new_weight((4, 4, 3, 3))  # 576 B
    y = g.conv2d(x, w, padding="same")
    g.mark_output(g.relu(y))
    return g


def fan_out(relus: int):
    """conv, then `relus` identical relus of it (a runtime's common-subexpression
    elimination keeps one), read by three 1x1 convs."""
    g = taso.new_graph()
    x = g.new_input((1, 4, 8, 8))
    c = g.conv2d(x, g.new_weight((4, 4, 3, 3)), padding="same")
    r = [g.relu(c) for _ in range(relus)]
    for i in range(3):
        g.mark_output(g.conv2d(r[i % relus], g.new_weight((4, 4, 1, 1))))
    return g
