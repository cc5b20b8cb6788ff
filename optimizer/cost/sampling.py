"""Timing many programs side by side until each is known well enough.

A batch of programs (columns) is timed round by round: each round runs every
column still being timed, in an order that rotates, as many runs as fill about
`round_ms` after an untimed one. Rounds are not shorter: NasRNN's products
(16 copies of a 1 MiB weight) timed 1.5x their cost in rounds of 2 ms, where
the runs after a neighbour's had not settled into the caches again, and 1.01x
in rounds of 10 ms. A burst of load then falls on the neighbours of one round alike,
not on whichever key happened to be timed during it, and the reference
programs timed in the same rounds (calibrate.py) read the load each key saw.

A column stops when the interval around its median is within its tolerance:
a key whose cost hardly matters to any decision (a microsecond op in a model
of milliseconds) stops after its first rounds, a heavy one runs until its
median is known to a few percent, and none runs more than `max_rounds`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

# The half-width of the interval around a median of n runs, from their
# interquartile range (the notch of a box plot: 1.57 IQR / sqrt(n)); with
# fewer than five runs half their range.
NOTCH = 1.57


@dataclass(frozen=True)
class Sample:
    """What a column's runs say: their median (ms), the half-width of the
    interval around it (ms), how many runs, and their spread (the interquartile
    range over the median)."""

    median: float
    half: float
    runs: int
    spread: float


@dataclass
class Column:
    """A program to time: `run` runs it once; `warm` runs it once, untimed,
    at the start of each of its rounds (the neighbours' runs in between
    evicted its data)."""

    run: Callable[[], object]
    rel: float = 0.0    # done when the half-width is within rel x median,
    floor: float = 0.0  # or within `floor` ms; both 0: it runs while any column does
    warm: bool = True

    def tolerance(self, median: float) -> float:
        return max(self.rel * median, self.floor)


def summarize(times: list[float]) -> Sample:
    med, n = statistics.median(times), len(times)
    if n < 5:  # half the range: each run of a large program averages many
        width = max(times) - min(times)
        half = width / 2 if n > 1 else med
    else:
        q1, _, q3 = statistics.quantiles(times, n=4)
        width = q3 - q1
        half = NOTCH * width / n ** 0.5
    return Sample(med, half, n, width / med if med > 0 else 0.0)


def time_columns(columns: Mapping[Hashable, Column], clock: Callable[[], int],
                 min_rounds: int = 2, max_rounds: int = 8, round_ms: float = 10.0,
                 max_runs: int = 400,
                 on_done: Callable[[Hashable, Sample], None] | None = None
                 ) -> dict[Hashable, Sample]:
    """Each column's sample, timed by `clock` (ns) in interleaved rounds after
    one timed run each (the programs have run once already: a session's
    first run allocates its buffers). A
    column with a tolerance is done once `min_rounds` have run and its
    interval's half-width is within it (after one round where the tolerance
    is over half its median); columns without one (references) run while any
    other does. `on_done(name, sample)` as each finishes."""
    names = list(columns)
    per_round: dict[Hashable, int] = {}
    times: dict[Hashable, list[float]] = {}
    for name in names:  # one timed run (the first sample): how many fill a round
        t = clock()
        columns[name].run()
        times[name] = [(clock() - t) / 1e6]
        per_round[name] = max(1, min(max_runs, int(round_ms / max(times[name][0], 1e-4))))
    done: dict[Hashable, Sample] = {}
    timed = [n for n in names if columns[n].rel > 0 or columns[n].floor > 0]
    for r in range(max_rounds):
        live = [n for n in names if n not in done]
        if not any(n in live for n in timed):
            break
        shift = r % len(live)
        for name in live[shift:] + live[:shift]:
            col = columns[name]
            if col.warm and per_round[name] > 1:  # one run filling a round: no warm-up
                col.run()
            for _ in range(per_round[name]):
                t = clock()
                col.run()
                times[name].append((clock() - t) / 1e6)
        for name in live:
            if name not in timed:
                continue
            s = summarize(times[name])
            tol = columns[name].tolerance(s.median)
            if (r + 1 >= min_rounds and s.half <= tol) or tol >= 0.5 * s.median \
                    or r + 1 == max_rounds:
                done[name] = s
                if on_done is not None:
                    on_done(name, s)
    return {n: done.get(n) or summarize(times[n]) for n in names if times[n]}

