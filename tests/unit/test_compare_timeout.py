"""``compare_timeout`` is bounded where it enters: a value no socket or process wait accepts is refused at
start-up (command line, ini) or for the marked test (marker), with where it came from, instead of every
compared check failing later with an ``OverflowError`` from the socket."""

from __future__ import annotations

import socket

import pytest

from pytest_pipecheck.config import MAX_COMPARE_TIMEOUT_S, ConfigError, PipecheckConfig, apply_marker, resolve
from pytest_pipecheck.perf.compare import Channel


@pytest.mark.parametrize("raw", ["1e12", "86400.5", "9.3e9"])
def test_a_huge_timeout_is_refused_naming_its_source(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"^`--pipecheck-compare-timeout={raw}` from the command line must be "
                                          r"<= 86400 \(seconds: a day"):
        resolve({}, {"compare_timeout": raw})
    with pytest.raises(ConfigError, match=rf"^`pipecheck_compare_timeout = {raw}` from the ini file \(tox.ini\) "
                                          r"must be <= 86400"):
        resolve({"compare_timeout": raw}, {}, ini_file="tox.ini")
    with pytest.raises(ConfigError, match=r"^`compare_timeout=.*` from the pipecheck marker on t.py::test_k must be "
                                          r"<= 86400"):
        apply_marker(PipecheckConfig(), {"compare_timeout": float(raw)}, "t.py::test_k")


def test_the_bounds_themselves_are_accepted() -> None:
    assert resolve({}, {"compare_timeout": "86400"}).compare_timeout == MAX_COMPARE_TIMEOUT_S
    assert resolve({}, {"compare_timeout": "0.5"}).compare_timeout == 0.5
    with pytest.raises(ConfigError, match="must be > 0"):
        resolve({}, {"compare_timeout": "0"})
    with pytest.raises(ConfigError, match="must be a finite number"):
        resolve({}, {"compare_timeout": "inf"})


def test_the_longest_timeout_is_one_the_socket_wait_takes() -> None:
    # what the bound protects: Channel.recv hands what is left of the timeout to socket.settimeout
    a, b = socket.socketpair()
    try:
        b.sendall(b'{"op": "ready"}\n')
        assert Channel(a).recv(MAX_COMPARE_TIMEOUT_S) == {"op": "ready"}
    finally:
        a.close()
        b.close()


def test_a_huge_timeout_stops_the_run_at_start_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--pipecheck-compare-timeout=1e12")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pipecheck: `--pipecheck-compare-timeout=1e12` from the command line must be "
                                 "<= 86400*"])
    assert "OverflowError" not in result.stderr.str() + result.stdout.str()
