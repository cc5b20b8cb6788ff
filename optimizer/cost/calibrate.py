"""Calibration: a fixed set of reference programs timed beside every batch of
keys, so that a cost carries the state of the machine it was measured in.

A busy neighbour does not slow every program alike: on this 2-core VM a
microsecond ReLU ran 9x slower under load where a 512x512 concatenation ran
1.1x. The references therefore span the durations costs have, from an empty run
to a 512^3 product, and a cost is carried between two readings by the ratio of
the references nearest to it in duration (interpolated in log time).

A reading maps each reference's name to its milliseconds (overhead included).
Every cache entry records the reading of its batch; the cache keeps the
quietest reading seen per device (each reference's minimum). Costs are priced
as they would be in that quiet state (`carry`), so keys measured at different
moments, loaded or not, compare as if measured together.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping

from .chains import Link

Reading = dict[str, float]

# An entry whose reading differs from now by more than this (either way, at
# its duration) is out of calibration.
TOLERANCE = 0.10
# Above this factor over the quiet reading the machine is said to be busy.
BUSY = 1.25

_f = "float32"
REFERENCES: dict[str, list[Link]] = {
    "run": [("relu", {}, (("x", (1,), _f),))],
    "ewise": [("relu", {}, (("x", (1, 2048), _f),))],
    "conv": [("conv2d", {"pads": (1, 1, 1, 1)},
              (("x", (1, 32, 28, 28), _f), ("w", (32, 32, 3, 3), _f)))],
    "matmul": [("matmul", {}, (("x", (512, 512), _f), ("w", (512, 512), _f)))],
}


def valid_reading(r: object) -> bool:
    return isinstance(r, Mapping) and bool(r) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
        and math.isfinite(v) and v > 0 for k, v in r.items())


def factor(then: Mapping[str, float] | None, now: Mapping[str, float] | None,
           ms: float) -> float:
    """How much longer a program of `ms` (timed in reading `then`) takes in
    reading `now`: the ratio now/then of the references, interpolated in log
    duration between the two nearest (the nearest alone beyond the ends); 1
    where either reading is missing."""
    if not then or not now:
        return 1.0
    points = sorted((math.log(then[k]), math.log(now[k] / then[k]))
                    for k in then if k in now and then[k] > 0 and now[k] > 0)
    if not points:
        return 1.0
    x = math.log(max(ms, 1e-6))
    if x <= points[0][0]:
        return math.exp(points[0][1])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            w = (x - x0) / (x1 - x0) if x1 > x0 else 1.0
            return math.exp(y0 + w * (y1 - y0))
    return math.exp(points[-1][1])


def carry(then: Mapping[str, float] | None, quiet: Mapping[str, float] | None,
          ms: float) -> float:
    """The factor a cost of `ms` timed in reading `then` is carried to the
    quiet state by: `factor`, where it moves by more than TOLERANCE; else 1.
    Within that a reading is the quiet state: the references' own noise would
    otherwise move every key of a batch with them (SqueezeNet's predictions
    moved by -12 to +5% from one fresh pricing to the next)."""
    f = factor(then, quiet, ms)
    return f if abs(f - 1) > TOLERANCE else 1.0


def quietest(*readings: Mapping[str, float] | None) -> Reading | None:
    """Each reference's least time over `readings` (None where there are none)."""
    out: Reading = {}
    for r in readings:
        for k, v in (r or {}).items():
            out[k] = min(v, out.get(k, v))
    return out or None


def slowdown(now: Mapping[str, float] | None, quiet: Mapping[str, float] | None) -> float:
    """How much slower the references run now than at their quietest: the
    geometric mean of their ratios (1 where unknown)."""
    if not now or not quiet:
        return 1.0
    ratios = [now[k] / quiet[k] for k in now if k in quiet and quiet[k] > 0]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0


def _own_running() -> int:
    """Threads of this process running or ready to run (this one included): a
    helper thread of ours (a timing session's, a copy) is no other process."""
    n = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as f:
                n += f.read().rsplit(")", 1)[1].split()[0] == "R"
    except (OSError, IndexError):
        return 1
    return max(n, 1)


def others_running(samples: int = 5, every: float = 0.01) -> float | None:
    """How many other processes are running or ready to run now (the kernel's
    count in /proc/loadavg, less this process's running threads), averaged over
    a few samples; None where the OS does not say. The load average lags by a
    minute: after one heavy job it called an idle machine busy."""
    counts = []
    for k in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        counts.append(max(running - _own_running(), 0))
        if k + 1 < samples:
            time.sleep(every)
    return sum(counts) / len(counts)
