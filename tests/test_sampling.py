"""Timing programs side by side (optimizer/cost/sampling.py), on a clock the
test drives: each program advances it by what it 'takes', so every decision
is exact."""

from __future__ import annotations

import itertools

import pytest
from taso.optimizer.cost.sampling import Column, summarize, time_columns


class Clock:
    """Nanoseconds that only the programs below advance."""

    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def program(self, ms_runs):
        """A program whose runs take the milliseconds `ms_runs` yields, in turn."""
        runs = iter(ms_runs)
        calls = []

        def run():
            calls.append(1)
            self.ns += int(next(runs) * 1e6)
        run.calls = calls
        return run


def test_a_steady_column_stops_after_the_fewest_rounds():
    clock = Clock()
    steady = clock.program(itertools.repeat(20.0))  # 20 ms: one run a round, no warm-up
    done = []
    out = time_columns({"k": Column(steady, rel=0.03)}, clock, min_rounds=2,
                       on_done=lambda name, s: done.append(name))
    assert out["k"].median == 20.0 and out["k"].half == 0.0
    assert out["k"].runs == 3 and len(steady.calls) == 3 and done == ["k"]


def test_a_noisy_column_runs_to_the_most_rounds_and_references_keep_pace():
    clock = Clock()
    noisy = clock.program(itertools.cycle([10.0, 30.0]))
    ref = clock.program(itertools.repeat(50.0))
    out = time_columns({"k": Column(noisy, rel=0.03), "ref": Column(ref)}, clock,
                       max_rounds=5)
    assert out["k"].runs == 1 + 5 and out["ref"].runs == 1 + 5  # one first run, five rounds
    assert out["k"].spread > 0.5


def test_a_key_that_hardly_matters_is_timed_once():
    clock = Clock()
    tiny = clock.program(itertools.cycle([0.01, 0.03]))  # 10-30 us, spread 100%
    out = time_columns({"k": Column(tiny, rel=0.03, floor=1.0)}, clock, round_ms=0.1)
    assert out["k"].runs < 20  # the first round answered within the 1 ms floor


def test_a_small_program_is_warmed_at_each_round():
    clock = Clock()
    small = clock.program(itertools.repeat(1.0))  # 1 ms: 10 runs fill a 10 ms round
    out = time_columns({"k": Column(small, rel=0.03)}, clock, min_rounds=2)
    # the first run, then two rounds of one untimed and ten timed runs
    assert out["k"].runs == 21 and len(small.calls) == 23


def test_the_interval_of_a_median():
    s = summarize([1.0, 1.0, 1.0, 1.0, 1.0])
    assert s.median == 1.0 and s.half == 0.0 and s.runs == 5
    s = summarize([1.0, 2.0, 3.0])  # under five runs: half the range
    assert s.half == pytest.approx(1.0) and s.spread == pytest.approx(1.0)  # range 2, median 2
    many = summarize([float(x) for x in range(1, 101)])
    q1, q3 = 25.25, 75.75  # statistics.quantiles' exclusive method
    assert many.half == pytest.approx(1.57 * (q3 - q1) / 10)
