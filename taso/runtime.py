"""onnxruntime in one place: the settings a session runs under, sessions, the
feeds a session takes, and timed runs. Every other module runs a model here.

Three kinds of session, by what they are for:
- checks and evaluation (`session_options()`: one thread, quiet, failures as
  exceptions); the equivalence check runs the graph as written
  (`optimize=False`), since onnxruntime's own rewrites are not under test;
- measurement and benchmarks (`benchmark_options(threads)`: ORT_ENABLE_ALL,
  sequential, a stated number of intra-op threads), the settings the optimized
  model will run under;
- onnxruntime's defaults (`session_options(None)`), for checks written apart
  from the library's (taso.fuzz).

Timing: `Runner` binds a session's inputs and outputs once, `time_runs` and
`median_ms` time calls by a clock (`clock_for`), `time_interleaved` times
several runners against each other round by round, and `compare_interleaved`
times one model against another until a confidence interval for their ratio
decides whether the second is faster (a `Verdict`).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from math import comb
from typing import Any, TypeVar

import numpy as np
import onnx
import onnxruntime as ort

PROVIDERS = ["CPUExecutionProvider"]
VERSION = ort.__version__
Model = onnx.ModelProto | bytes | str | os.PathLike


# ---- settings and sessions ---------------------------------------------------------------
def session_options(threads: int | None = 1, *, optimize: bool = True,
                    log_level: int = 4) -> ort.SessionOptions:
    """Sequential execution with `threads` intra-op threads (None: onnxruntime's
    default), its graph optimizations on (ORT_ENABLE_ALL) or off. Log level 4
    by default: failures are exceptions, and the log would only repeat them."""
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    so.log_severity_level = log_level
    return so


def benchmark_options(threads: int) -> ort.SessionOptions:
    """The settings under which costs are measured and models are benchmarked."""
    return session_options(threads, log_level=3)


def default_threads() -> int:
    """Intra-op threads of timed sessions: $TASO_ORT_THREADS, else 1 (one thread
    times steadily on a shared machine)."""
    return int(os.environ.get("TASO_ORT_THREADS", "1"))


def session(model: Model, options: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """A CPU session of `model` (a ModelProto, its bytes or a path), under
    `options` (default `session_options()`). The only place one is created."""
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif not isinstance(model, bytes):
        model = os.fspath(model)
    return ort.InferenceSession(model, options or session_options(), providers=PROVIDERS)


def accepted(sess: ort.InferenceSession, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """The feeds `sess` takes: its inputs and its overridable initializers
    (onnxruntime lists those apart from the inputs, by IR version)."""
    names = {i.name for i in (*sess.get_inputs(), *sess.get_overridable_initializers())}
    return {k: v for k, v in feeds.items() if k in names}


def run(model: Model | ort.InferenceSession, feeds: Mapping[str, Any],
        options: ort.SessionOptions | None = None,
        outputs: list[str] | None = None) -> list[np.ndarray]:
    """One run of `model` (or of an open session) on the feeds it takes."""
    sess = model if isinstance(model, ort.InferenceSession) else session(model, options)
    return sess.run(outputs, accepted(sess, feeds))


def optimized_model(model: Model, options: ort.SessionOptions) -> onnx.ModelProto:
    """The graph onnxruntime's optimizer makes of `model` under `options` (it
    writes it to a temporary file, named in `options` only meanwhile)."""
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        try:
            session(model, options)
            return onnx.load(options.optimized_model_filepath, load_external_data=False)
        finally:
            options.optimized_model_filepath = ""


# ---- timing --------------------------------------------------------------------------------
class Runner:
    """One onnxruntime session with its inputs bound once and its outputs
    written into buffers allocated once, so a call times the kernels and not
    the allocator."""

    def __init__(self, sess: ort.InferenceSession, feeds: dict[str, np.ndarray]):
        self.session = sess
        self.binding = sess.io_binding()
        names = [o.name for o in sess.get_outputs()]
        first = sess.run(names, feeds)  # the outputs' real shapes and dtypes
        self._keep = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
                      for v in feeds.values()]
        for name, v in zip(feeds, self._keep):
            self.binding.bind_ortvalue_input(name, v)
        self._keep += [ort.OrtValue.ortvalue_from_numpy(np.empty_like(y)) for y in first]
        for name, v in zip(names, self._keep[len(feeds):]):
            self.binding.bind_ortvalue_output(name, v)

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)


def clock_for(threads: int) -> Callable[[], int]:
    """The clock a session with `threads` intra-op threads is timed by, in ns.

    With one thread onnxruntime computes on the calling thread, so that thread's
    CPU time is the run's latency less the time the OS gave to other processes:
    on a shared machine it stays steady where wall time doubles. More threads
    work elsewhere, so they are timed by the wall clock."""
    return time.thread_time_ns if threads == 1 else time.perf_counter_ns


def time_runs(fn: Callable[[], Any], warmup: int = 2, repeats: int = 10,
              min_seconds: float = 0.0, max_repeats: int = 1000,
              clock: Callable[[], int] = time.perf_counter_ns) -> list[float]:
    """Milliseconds of each timed call of `fn` by `clock`: `warmup` untimed
    calls, then at least `repeats` calls, more (up to `max_repeats`) until
    `min_seconds` of wall time pass."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_seconds
                                   and len(times) < max_repeats):
        t = clock()
        fn()
        times.append((clock() - t) / 1e6)
    return times


def median_ms(fn: Callable[[], Any], **timing: Any) -> float:
    return statistics.median(time_runs(fn, **timing))


T = TypeVar("T")


def balanced_order(items: Iterable[T], session: int) -> list[T]:
    """The order to create the `session`-th session of each of `items` in:
    forward, then backward, and so on. Sessions created later tended to run a
    few percent faster on this VM (NasRNN, NasNet-A), which would favour
    whichever model is created last."""
    items = list(items)
    return items if session % 2 == 0 else items[::-1]


def time_interleaved(runners: dict[Hashable, Runner], rounds: int, round_ms: float,
                     threads: int) -> dict[Hashable, float]:
    """Median milliseconds per column; each round runs every column in turn (as
    many runs as fill about `round_ms`, at least one), the starting column
    rotating from round to round. Timed by `clock_for(threads)`."""
    clock = clock_for(threads)
    names = list(runners)
    samples: dict[Hashable, list[float]] = {n: [] for n in names}
    first = {n: time_runs(runners[n], warmup=2, repeats=1, clock=clock)[0] for n in names}
    per_round = max(1, int(round_ms / max(max(first.values()), 1e-3)))
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name] += time_runs(runners[name], warmup=0, repeats=per_round,
                                       clock=clock)
    return {n: statistics.median(s) for n, s in samples.items()}


# ---- deciding an A/B comparison ------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """Whether model B (an optimized one) runs faster than model A (its original):
    "faster", "not faster" (it cannot clear the margin), "undecided" (the time
    ran out first) or "unchanged" (nothing to time: B is A)."""

    verdict: str
    ratio: float | None = None  # median over rounds of B's time over A's
    low: float | None = None    # the confidence interval of that median (None: none)
    high: float | None = None
    rounds: int = 0
    seconds: float = 0.0        # wall time of the comparison
    a_ms: float | None = None   # medians over rounds of one run of A, of B
    b_ms: float | None = None
    confidence: float | None = None  # of the interval

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def median_interval(values: Sequence[float],
                    confidence: float = 0.99) -> tuple[float, float] | None:
    """An interval holding the median of the distribution `values` were drawn
    from with probability at least `confidence`: the k-th smallest and k-th
    largest value, for the largest k with P(Binomial(n, 1/2) < k) at most half
    of 1 - confidence (the sign test's interval). None while n is too small to
    give one at that confidence.

    Distribution-free: it assumes only independent draws, not a shape, which
    suits timings whose load bursts give long, lopsided tails."""
    n, tail = len(values), (1 - confidence) / 2
    k, below = 0, 0.0  # below: P(Binomial(n, 1/2) < k)
    while k < n and below + comb(n, k) / 2**n <= tail:
        below += comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def decide(interval: tuple[float, float] | None, margin: float) -> str | None:
    """The verdict of an interval of B/A: "faster" where it lies wholly below
    1 - margin, "not faster" where wholly above, None while it straddles that."""
    if interval is None:
        return None
    if interval[1] < 1 - margin:
        return "faster"
    if interval[0] > 1 - margin:
        return "not faster"
    return None


def _time_round(group: Sequence[Runner], order: Sequence[int], runs: int,
                clock: Callable[[], int]) -> float:
    """One round of a model: each of its sessions `runs` times, in `order`;
    the mean of the sessions' medians."""
    medians = {s: statistics.median(time_runs(group[s], warmup=0, repeats=runs, clock=clock))
               for s in order}
    return statistics.fmean(medians.values())


def _runs_per_round(group: Sequence[Runner], round_ms: float,
                    clock: Callable[[], int]) -> int:
    """Runs per session that fill about `round_ms` for the whole model, at least
    one (after two warm-up runs of every session)."""
    first = max(statistics.median(time_runs(r, warmup=2, repeats=3, clock=clock))
                for r in group)
    return max(1, int(round_ms / len(group) / max(first, 1e-3)))


def compare_interleaved(a_runners: Sequence[Runner], b_runners: Sequence[Runner],
                        margin: float = 0.01, max_seconds: float = 20.0,
                        min_rounds: int = 8, max_rounds: int = 200, round_ms: float = 50.0,
                        confidence: float = 0.99,
                        clock: Callable[[], int] = time.perf_counter_ns) -> Verdict:
    """Time model B (its sessions `b_runners`) against model A (`a_runners`)
    round by round until the ratio B/A is decided against the bar 1 - margin.

    A round runs A then B, the next B then A, each model's sessions filling
    about `round_ms`; its ratio is B's time over A's. The two halves of a round
    run moments apart, so a burst of load mostly hits both and cancels in the
    ratio, where medians taken apart would carry it. From `min_rounds` on, a
    `median_interval` of the rounds' ratios decides as soon as it lies wholly
    below the bar ("faster") or above it ("not faster"); else, once
    `max_seconds` have passed or after `max_rounds`, the verdict is
    "undecided". The time limit is read from `min_rounds` on only, so that a
    slow model still gets the rounds an interval needs.

    The interval is looked at after every round, and each look is another
    chance to decide wrongly: hence 99% per look. Simulated with 5% noise per
    round, a true ratio right at the bar then passes as "faster" about 3% of
    the time over 200 looks (95% per look: 13%)."""
    if min_rounds < 1 or max_rounds < min_rounds:
        raise ValueError(f"need 1 <= min_rounds <= max_rounds, not {min_rounds}, {max_rounds}")
    start = time.perf_counter()
    groups = (list(a_runners), list(b_runners))
    runs = [_runs_per_round(g, round_ms, clock) for g in groups]
    ratios: list[float] = []
    times: tuple[list[float], list[float]] = ([], [])
    verdict = None
    while verdict is None and len(ratios) < max_rounds:
        # Even rounds A then B, odd rounds B then A, sessions mirrored too, so
        # that a drift within a round favours neither.
        turn = 1 if len(ratios) % 2 else 0
        for m in (turn, 1 - turn):
            order = range(len(groups[m]))
            times[m].append(_time_round(groups[m], order[::-1] if turn else order, runs[m],
                                        clock))
        ratios.append(times[1][-1] / times[0][-1])
        if len(ratios) >= min_rounds:
            verdict = decide(median_interval(ratios, confidence), margin)
            if verdict is None and time.perf_counter() - start >= max_seconds:
                break
    interval = median_interval(ratios, confidence) or (None, None)
    return Verdict(verdict or "undecided", statistics.median(ratios), interval[0], interval[1],
                   len(ratios), time.perf_counter() - start, statistics.median(times[0]),
                   statistics.median(times[1]), confidence)


def profile_events(model: Model, feeds: dict[str, np.ndarray], threads: int,
                   runs: int) -> list[dict[str, Any]]:
    """onnxruntime's profiler events (its JSON trace) over one warm-up run and
    `runs` timed runs of `model` under `benchmark_options(threads)`."""
    with tempfile.TemporaryDirectory() as tmp:
        so = benchmark_options(threads)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "p")
        sess = session(model, so)
        time_runs(Runner(sess, feeds), warmup=1, repeats=runs)
        with open(sess.end_profiling()) as f:
            return json.load(f)
