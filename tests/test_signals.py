"""SIGINT and SIGTERM to taso-gen and taso-verify, as real processes: the workers
end (nothing left holding the caller's pipes), spill files go, the exit status
is 130 (SIGINT) or 143 (SIGTERM), one line on stderr and no traceback, and no
output is written."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from taso.rules_db import SHIPPED

BIN = Path(sys.executable).parent
GEN = shutil.which("taso-gen", path=str(BIN)) or "taso-gen"
VERIFY = shutil.which("taso-verify", path=str(BIN)) or "taso-verify"


def _procs() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, session id, name) of every process."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        out.append((int(p), int(fields[1]), int(fields[3]), name))
    return out


def _session(sid: int) -> list[tuple[int, str]]:
    return [(pid, name) for pid, _, s, name in _procs() if s == sid]


def _wait_for(cond, what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _interrupt(cmd: list[str], ready, sig: int, group: bool, tmp_path: Path) -> tuple[int, str]:
    """Start `cmd` in a session of its own, wait until `ready(session)` holds, send
    `sig` to the process (or its whole group, as a terminal's Ctrl-C does), and
    read its pipes to the end: they close only when no process holds them. Then
    the session must empty. Returns (exit status, stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                         start_new_session=True)
    try:
        _wait_for(lambda: p.poll() is None and ready([n for pid, n in _session(p.pid)
                                                      if pid != p.pid]),
                  "the run to get going")
        if group:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    # what is left may be exiting (zombies to be reaped) but none lives on
    _wait_for(lambda: not _session(p.pid), f"the session to empty: {_session(p.pid)}", 30)
    return p.returncode, err.decode()


def _workers(n: int, prefix: str = ""):
    """At least `n` processes besides the main one whose names start with `prefix`."""
    return lambda names: sum(name.startswith(prefix) for name in names) >= n


def _check(status: int, err: str, sig: int, prog: str) -> None:
    assert status == 128 + sig, err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err  # one line, no traceback
    assert lines[0].startswith(f"{prog}: interrupted by {signal.Signals(sig).name}; "), err


def _spill_files(spill: Path) -> bool:
    return any(spill.glob("taso-gen-*/bucket-*.jsonl"))


GEN_CASES = [
    (signal.SIGINT, False, "working"),  # kill -INT pid
    (signal.SIGINT, True, "working"),   # Ctrl-C in a terminal: the whole group
    (signal.SIGINT, True, "starting"),  # ... while the workers still import
    (signal.SIGTERM, False, "working"),
    (signal.SIGTERM, True, "working"),  # a job runner ending the group
]


@pytest.mark.parametrize("sig, group, when", GEN_CASES)
def test_taso_gen_interrupted(tmp_path, sig, group, when):
    spill, out = tmp_path / "spill", tmp_path / "rules.json"
    cmd = [GEN, "--max-ops", "3", "--workers", "2", "--quiet", "--spill-dir", str(spill),
           "--output", str(out)]
    if when == "working":  # deep in the enumeration, graphs spilled
        ready = lambda names: _workers(2)(names) and _spill_files(spill)  # noqa: E731
    else:
        ready = _workers(2)
    status, err = _interrupt(cmd, ready, sig, group, tmp_path)
    _check(status, err, sig, "taso-gen")
    assert "nothing written" in err
    assert not out.exists() and list(spill.iterdir()) == []  # spill folder removed


def _rules_file(tmp_path: Path, n: int = 300) -> Path:
    d = json.loads((SHIPPED / "generated.json").read_text())
    d["rules"] = d["rules"][:n]
    path = tmp_path / "some.json"
    path.write_text(json.dumps(d))
    return path


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_taso_verify_interrupted(tmp_path, sig, group):
    src, out = _rules_file(tmp_path), tmp_path / "out.json"
    cmd = [VERIFY, str(src), "--workers", "2", "--json", "--output", str(out)]
    status, err = _interrupt(cmd, _workers(2), sig, group, tmp_path)
    _check(status, err, sig, "taso-verify")
    assert f"{out} not written" in err and not out.exists()


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


ray_only = pytest.mark.skipif(not _has_ray(), reason="Ray cannot be imported "
                              "(pip install 'taso[cluster]')")


@ray_only
@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False),
                                        (signal.SIGTERM, True)])
def test_taso_gen_on_ray_interrupted(tmp_path, sig, group):
    # taso-gen starts a private Ray cluster: its raylet, GCS and workers must go too
    spill, out = tmp_path / "spill", tmp_path / "rules.json"
    cmd = [GEN, "--max-ops", "3", "--workers", "2", "--quiet", "--spill-dir", str(spill),
           "--output", str(out), "--executor", "ray"]
    status, err = _interrupt(
        cmd, lambda names: _workers(2, "ray::_call")(names) and _spill_files(spill),
        sig, group, tmp_path)
    _check(status, err, sig, "taso-gen")
    assert not out.exists() and list(spill.iterdir()) == []


@ray_only
@pytest.mark.slow
def test_taso_verify_on_ray_interrupted(tmp_path):
    src, out = _rules_file(tmp_path), tmp_path / "out.json"
    cmd = [VERIFY, str(src), "--workers", "2", "--json", "--output", str(out),
           "--executor", "ray"]
    status, err = _interrupt(cmd, _workers(2, "ray::_RayVerif"), signal.SIGINT, True, tmp_path)
    _check(status, err, signal.SIGINT, "taso-verify")
    assert not out.exists()


@ray_only
@pytest.mark.slow
@pytest.mark.parametrize("sig, first", [(signal.SIGTERM, "gcs_server"), (signal.SIGINT, "raylet")])
def test_taso_gen_interrupted_while_ray_starts(tmp_path, sig, first):
    # the signal lands while ray.init is starting the private instance: it is
    # held until the instance is up, then the instance is taken down whole
    out = tmp_path / "rules.json"
    cmd = [GEN, "--max-ops", "3", "--workers", "2", "--quiet", "--output", str(out),
           "--executor", "ray"]
    status, err = _interrupt(cmd, lambda names: first in names, sig, False, tmp_path)
    _check(status, err, sig, "taso-gen")
    assert not out.exists()


ORPHAN_SCRIPT = """
import os, sys, time
from taso.executor import LocalExecutor

def task(out, i):
    with open(os.path.join(out, f"w{os.getpid()}"), "w"):
        pass
    time.sleep(300)

if __name__ == "__main__":
    for _ in LocalExecutor(2).map(task, range(2), sys.argv[1]):
        pass
"""


def test_pool_workers_end_when_their_driver_is_killed(tmp_path):
    # A script with no signal handling, ended by SIGKILL (or a default SIGTERM),
    # cannot end its pool; the workers notice their driver gone and end.
    script = tmp_path / "driver.py"
    script.write_text(ORPHAN_SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=tmp_path,
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(list(tmp_path.glob("w*"))) == 2, "both workers to start")
        p.kill()
        p.wait()
        workers = [int(f.name[1:]) for f in tmp_path.glob("w*")]
        _wait_for(lambda: not any(pid in {q for q, *_ in _procs()} and
                                  _state(pid) != "Z" for pid in workers),
                  "the workers to end", 30)
    finally:
        for pid, _ in _session(p.pid):
            os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return "gone"
    return st[st.rindex(")") + 2]
