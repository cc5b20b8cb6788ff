"""Where sharded work runs: in this process, a local process pool, or a Ray cluster.

An executor has an ordered `map(fn, items, shared)` that calls `fn(shared,
item)` for each item somewhere and yields the results in item order. Every task
carries what it needs (`shared` is sent along with it, once per task for a pool,
once per run through the object store for Ray), so no worker relies on state
inherited by fork: the pool works under any start method, and a Ray worker on
another node computes what a local one does. `fn` must be a module-level
function (workers import it by name).

Interruptions: `taso.interrupt.signals_as_interrupts()` turns SIGINT and
SIGTERM into an `Interrupted` exception in the main thread (then ignores both
while the caller cleans up); an executor's `abort()` kills its workers at once.
Pool workers ignore SIGINT, so a Ctrl-C sent to the whole terminal group
reaches only the parent, which ends them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

from .interrupt import _SIGNALS, _on_signal, signals_deferred

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    workers: int

    def map(self, fn: Callable[[Any, Any], Any], items: Iterable[Any],
            shared: Any = None) -> Iterator[Any]:
        """`fn(shared, item)` for each item; results in item order."""
        ...

    def close(self) -> None:
        """Release the workers after the work is done."""
        ...

    def abort(self) -> None:
        """Stop now: cancel what is queued and kill the workers."""
        ...


class ExecutorError(RuntimeError):
    """An executor could not start (Ray missing, no cluster at the address)."""


def _worker_signals(driver: int | None = None) -> None:
    """Pool worker set-up: a terminal's Ctrl-C is for the parent, which ends us;
    and a worker ends itself once the driver process is gone (killed outright,
    or a script with no handler ended by SIGTERM), rather than work on alone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if driver is not None:
        threading.Thread(target=_end_with, args=(driver,), daemon=True).start()


def _end_with(driver: int, every: float = 1.0) -> None:
    while True:
        time.sleep(every)
        try:
            os.kill(driver, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # alive, someone else's: cannot be ours
            pass


@contextmanager
def sigint_blocked_for_children() -> Iterator[None]:
    """Block SIGINT in this thread while it starts worker processes: they inherit
    the mask (through fork and exec, and a forkserver passes it on), so a Ctrl-C
    to the terminal's group cannot interrupt one while it is still importing, to
    print a traceback. A SIGINT meant for us stays pending and arrives after."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # multiprocessing starts its resource tracker on first use, and unblocks
    # SIGINT in this thread when it has: have it started before we block.
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ---- ordered map over a bounded window --------------------------------------------------
_END = object()


def _ordered(submit: Callable[[Any], Any], wait: Callable[[Any], Any], items: Iterable[Any],
             window: int) -> Iterator[Any]:
    """Submit items keeping at most `window` in flight; results in order. The
    first window is submitted now, not at the first `next`, so the workers
    start while the caller still works on something else (a resumed prune
    reads its kept buckets first)."""
    it = iter(items)
    pending: deque = deque()
    for item in it:
        pending.append(submit(item))
        if len(pending) >= window:
            break

    def results() -> Iterator[Any]:
        while pending:
            head = pending.popleft()
            nxt = next(it, _END)
            if nxt is not _END:
                pending.append(submit(nxt))
            yield wait(head)
    return results()


# ---- executors -----------------------------------------------------------------------------
class SerialExecutor:
    """Runs everything in this process (tests, debugging, one core)."""

    workers = 1

    def map(self, fn, items, shared=None):
        return (fn(shared, item) for item in items)

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def default_start_method() -> str:
    """forkserver where there is one: workers start from a clean server process
    (no copy of the parent's threads or state, unlike fork) and cheaply; spawn
    elsewhere."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


class LocalExecutor:
    """A process pool on this machine."""

    def __init__(self, workers: int | None = None, start_method: str | None = None):
        self.workers = workers or os.cpu_count() or 1
        # No forkserver preload: the server imports before it takes the parent's
        # sys.path (Python 3.11), so a `taso/` folder in the working directory
        # would shadow the installed package there. Each worker imports once.
        ctx = mp.get_context(start_method or default_start_method())
        self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx,
                                         initializer=_worker_signals,
                                         initargs=(os.getpid(),))

    def map(self, fn, items, shared=None):
        call = functools.partial(fn, shared)

        def submit(item):
            # A submit may start a worker: with SIGINT blocked (it inherits
            # that) and an interruption held until the pool has it on its
            # list, where abort() finds it.
            with sigint_blocked_for_children(), signals_deferred():
                return self._pool.submit(call, item)
        return _ordered(submit, lambda f: f.result(), items, 4 * self.workers)

    def close(self) -> None:
        self._pool.shutdown()

    def abort(self) -> None:
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        for p in procs:
            p.kill()
        for p in procs:
            p.join(5)
        # A worker killed while sending its result leaves half a message in the
        # result pipe, and the pool's manager thread waits in recv() for the
        # rest for ever (and with it the interpreter's exit). With the workers
        # gone, ours is the last write end: closing it turns that wait into an
        # end of file, which the manager takes for a broken pool and cleans up.
        results = getattr(self._pool, "_result_queue", None)
        if results is not None:
            try:
                results._writer.close()
            except OSError:
                pass
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        # Let the pool's manager thread see its workers gone and close its
        # pipes before the interpreter exits: otherwise the pool's exit hook
        # can write to a closed pipe and print a traceback after our one line.
        if manager is None:
            return
        manager.join(5)
        if manager.is_alive():
            # Stuck: the call queue's feeder blocks writing a task no worker
            # will read. Closing our end of that pipe fails the write. Only now:
            # the manager closes it itself on its usual way out, and two closes
            # at once fail one of them with a traceback.
            call_queue = getattr(self._pool, "_call_queue", None)
            try:
                if call_queue is not None:
                    call_queue._reader.close()
            except OSError:
                pass
            manager.join(5)


def _ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError("the ray executor needs Ray: pip install 'taso[cluster]'") from None
    return ray


def connect_ray(address: str | None = None, workers: int | None = None) -> bool:
    """Join the Ray cluster at `address` ("auto": the one `ray start` began on
    this machine), or start a private local one with `workers` CPUs when
    `address` is None. Returns whether this call connected (the caller then
    disconnects); an existing connection is used as it is."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is not None:
        _probe(address)
    quiet = dict(log_to_driver=False, include_dashboard=False, configure_logging=True,
                 logging_level=logging.ERROR)
    # ray.init installs its own SIGTERM handler (sys.exit, or kill the runtime's
    # processes and sys.exit(1)): a SIGTERM while it starts would skip our
    # clean-up and exit 15 or 1. Keep ours in force while it runs, and restore
    # both handlers after it, whatever it changed.
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    utils = importlib.import_module("ray._private.utils")
    set_sigterm = getattr(utils, "set_sigterm_handler", None)
    ours = threading.current_thread() is threading.main_thread() and \
        handlers[signal.SIGTERM] is _on_signal
    # Ray puts the driver's working directory first on its workers' sys.path: from
    # a checkout's root, the bare `taso/` folder would shadow the installed
    # package there. Connect from the folder that holds the installed package.
    cwd = os.getcwd()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        if ours and set_sigterm is not None:
            utils.set_sigterm_handler = lambda handler: None
        with signals_deferred():
            if address is None:
                # Ray runs its workers at nice 15 by default (to keep drivers
                # responsive); ours do the work the driver waits for, and a local
                # pool's run at 0: so do these, else any other load starves them.
                ray.init(address="local", num_cpus=workers or os.cpu_count() or 1,
                         _system_config={"worker_niceness": 0}, **quiet)
            else:
                ray.init(address=address, **quiet)
    except BaseException as e:
        # Whatever ray.init had started (a private instance's GCS and raylet,
        # when interrupted half-way) goes with it.
        with contextlib.suppress(Exception):
            ray.shutdown()
        if not isinstance(e, (ConnectionError, ValueError, RuntimeError)):
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExecutorError(f"cannot connect to a Ray cluster at {address!r}: {msg}") from None
    finally:
        if set_sigterm is not None:
            utils.set_sigterm_handler = set_sigterm
        os.chdir(cwd)
        if threading.current_thread() is threading.main_thread():
            for s, h in handlers.items():
                if h is not None:
                    signal.signal(s, h)
    return True


def _probe(address: str, seconds: float = 5.0) -> None:
    """Refuse an address where nothing answers: ray.init would wait on it for
    minutes. "auto" is resolved the way Ray does (RAY_ADDRESS, then the cluster
    `ray start` began on this machine)."""
    target = address.split("://", 1)[-1]
    if target == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address_or_die
            target = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError:
            raise ExecutorError("--address auto: no Ray cluster found on this machine "
                                "(start one with `ray start --head`)") from None
        except Exception:  # Ray's private helper moved: let ray.init decide
            return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--address {address!r}: expected HOST:PORT or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as e:
        raise ExecutorError(f"no Ray cluster answers at {address!r}: "
                            f"{e.strerror or type(e).__name__}") from None


def disconnect_ray() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def ray_cpus() -> int:
    """CPUs of the connected cluster."""
    return max(1, int(_ray().cluster_resources().get("CPU", 1)))


def _call(fn: Callable[[Any, Any], Any], shared: Any, item: Any) -> Any:
    return fn(shared, item)


class RayExecutor:
    """Tasks on a Ray cluster: one CPU each, at most two per worker in flight."""

    def __init__(self, address: str | None = None, workers: int | None = None):
        ray = _ray()
        self._own = connect_ray(address, workers)
        try:
            self.workers = workers or ray_cpus()
            self._task = ray.remote(num_cpus=1)(_call)
        except BaseException:
            self.close()
            raise
        self._inflight: set = set()

    def map(self, fn, items, shared=None):
        ray = _ray()
        ref = ray.put(shared)  # sent to each node once, not with every task

        def submit(item):
            r = self._task.remote(fn, ref, item)
            self._inflight.add(r)
            return r

        def wait(r):
            out = ray.get(r)
            self._inflight.discard(r)
            return out
        return _ordered(submit, wait, items, 2 * self.workers)

    def close(self) -> None:
        if self._own:
            disconnect_ray()

    def abort(self) -> None:
        # No ray.cancel: in Ray 2.60 a forced cancel racing a task's completion
        # can abort the driver ("Tried to complete task that was not pending").
        # A private cluster goes down whole at shutdown; on a shared one, the
        # tasks in flight (at most two per worker, seconds each) run out.
        self._inflight.clear()
        self.close()


def make_executor(kind: str = "local", workers: int | None = None,
                  address: str | None = None) -> Executor:
    """`local`: this process for one worker, else a process pool; `ray`: a Ray
    cluster (at `address`, or a private local one)."""
    if kind == "ray":
        return RayExecutor(address, workers)
    if kind != "local":
        raise ValueError(f"unknown executor {kind!r}; choose from {', '.join(EXECUTORS)}")
    if workers == 1:
        return SerialExecutor()
    return LocalExecutor(workers)
