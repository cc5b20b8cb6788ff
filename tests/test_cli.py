"""The programs' shared helper (taso.cli): one-line flag errors, the guarded run
and its exit statuses, and the progress line."""

from __future__ import annotations

import io
import os
import signal

import pytest

from taso import cli


def test_a_bad_flag_is_one_line_and_status_2(capsys):
    p = cli.Parser(prog="taso-x")
    p.add_argument("--workers", type=int)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--workers", "two"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("taso-x: argument --workers: invalid int value") and "--help" in err
    for check, args, words in [(cli.check_workers, (0,), "--workers must be at least 1"),
                               (cli.check_executor, ("local", "h:1"), "--address needs"),
                               (cli.check_number, ("--timeout", float("nan")), "finite"),
                               (cli.check_number, ("--w", -1.0, False), "--w must be a finite "
                                                                         "number >= 0"),
                               (cli.check_output, ("",), "'' is not a file path")]:
        with pytest.raises(SystemExit):
            check(p, *args)
        assert words in capsys.readouterr().err
    cli.check_workers(p, None)
    cli.check_number(p, "--w", 0.0, positive=False)


def _guarded(body) -> int:
    with cli.program("taso-x") as run:
        run(body(run))
    return run.code


def test_the_guarded_run_ends_in_one_line_and_a_status(capsys, monkeypatch):
    monkeypatch.delenv("TASO_DEBUG", raising=False)
    assert _guarded(lambda run: 0) == 0
    assert _guarded(lambda run: run.fail("the input is broken")) == 2
    assert capsys.readouterr().err == "taso-x: the input is broken\n"

    def interrupted(run):
        run.what = "half.json written"
        raise KeyboardInterrupt

    assert _guarded(interrupted) == 130
    assert capsys.readouterr().err == "taso-x: interrupted by SIGINT; half.json written\n"

    def terminated(run):
        os.kill(os.getpid(), signal.SIGTERM)  # raised where the run is
        raise AssertionError("not reached")

    assert _guarded(terminated) == 143
    assert "interrupted by SIGTERM; nothing written" in capsys.readouterr().err

    def broken(run):
        raise ZeroDivisionError("a bug\nwith a second line")

    assert _guarded(broken) == cli.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err == ("taso-x: internal error, nothing written (ZeroDivisionError: a bug); "
                   "TASO_DEBUG=1 shows where\n")
    monkeypatch.setenv("TASO_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        _guarded(broken)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_redraws_on_a_terminal_and_appends_elsewhere(capsys):
    log = io.StringIO()
    line = cli.StatusLine(log, plain_interval=3600)
    for k in range(5):
        line.show(f"step {k}", last=k == 4)
    assert log.getvalue() == "step 0\nstep 4\n"  # the first, then at most one an hour, the last
    tty = _Terminal()
    line = cli.StatusLine(tty, interval=0)
    line.show("working on a long name")
    line.show("short")
    assert line.open and tty.getvalue() == "\rworking on a long name\rshort" + " " * 17
    cli.say("taso-x", "a problem", line)  # ends the line first
    assert tty.getvalue().endswith(" " * 17 + "\n") and not line.open
    assert capsys.readouterr().err == "taso-x: a problem\n"
    assert cli.bar(1, 4, 8) == "[##......]"
