"""REV's process, its own side: the plugin that times the cases its parent asks for and runs nothing else."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from ... import children
from .errors import CompareError
from .foreign import ForeignImports
from .samplers import make_sampler
from .tree import read_tree_info
from .wire import Channel

if TYPE_CHECKING:  # pragma: no cover
    from ...checks.context import CheckContext

_TAIL = 3000  # characters of REV's output quoted in an error


_CHANNEL: Channel | None = None  # REV's process: the connection to the parent (one per process)


def _said_by(report: pytest.CollectReport | pytest.TestReport) -> str:
    """A report's reason in one line: a skip's reason, or the last line of a failure."""
    longrepr = report.longrepr
    crash: Any = getattr(longrepr, "reprcrash", None)
    said = str(getattr(crash, "message", None) or "").strip()
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2]).removeprefix("Skipped: ")
    elif said:
        text = said.splitlines()[0]
    else:
        lines = [line.strip() for line in str(longrepr or "").splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    return text[:300]


_GUARD: ForeignImports | None = None  # REV's process: its import guard (one per process)


def _foreign_now() -> dict[str, str]:
    return _GUARD.scan() if _GUARD is not None else {}

class RevChild:
    """The plugin of REV's process: runs the tests it is told to, one at a time, and reports each end."""

    def __init__(self, config: pytest.Config, role: children.Role) -> None:
        self.config = config
        self.role = role
        self.errors: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.failed = False
        self.outcome = ""
        global _GUARD
        tree = config.getoption("pipecheck_compare_tree", default=None)
        if tree:
            _GUARD = ForeignImports(read_tree_info(str(tree)).toplevel, str(tree))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        where = report.nodeid or str(getattr(report, "fspath", ""))
        if report.failed:
            self.errors[where] = str(report.longrepr)[-_TAIL:]
        elif report.skipped:  # a module-level skip (importorskip of a kernel library REV lacks): nothing timed
            self.skipped[where] = _said_by(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.outcome = f"failed at {report.when} ({_said_by(report)})"
        elif report.skipped and not self.outcome:
            xfail = getattr(report, "wasxfail", None)
            self.outcome = (f"xfailed ({xfail or _said_by(report)})" if xfail is not None
                            else f"was skipped ({_said_by(report)})")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        global _CHANNEL
        from ...state import item_nodeid

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        assert self.role.socket is not None
        sock.connect(self.role.socket)
        channel = _CHANNEL = Channel(sock)
        items = {item_nodeid(item): item for item in session.items}
        channel.send({"op": "ready", "collected": list(items), "errors": self.errors, "skipped": self.skipped})
        try:
            while True:
                try:
                    message = channel.recv(None)
                except CompareError:
                    break  # the parent ended: so does this process
                if message.get("op") == "quit":
                    break
                if message.get("op") != "run":
                    continue
                nodeid = str(message.get("nodeid"))
                item = items.get(nodeid)
                self.outcome = ""
                if item is not None:
                    item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
                try:
                    channel.send({"op": "done", "nodeid": nodeid,
                                  "outcome": self.outcome or ("passed" if item is not None else "was not collected")})
                except CompareError:
                    break
        finally:
            channel.close()
            _CHANNEL = None
        return True


def rev_check(ctx: CheckContext, fn: Callable[..., Any] | None, case: str, *, samples: Any,
              timing_kw: dict[str, Any], hot_cache: bool, graph: bool) -> str:
    """``check_perf`` in REV's process: tell the parent, then time samples when and as it asks.

    Returns the sentence the skipped result records. A kernel that raises while timed is reported to the
    parent (whose check is then an error) and raised here too.
    """
    channel = _CHANNEL
    if channel is None:
        return "not timed: REV's process has no parent to time with"
    channel.send({"op": "arrive", "nodeid": ctx.nodeid, "case": case,
                  "callable": fn is not None and samples is None, "foreign": _foreign_now()})
    answer = channel.recv(None)
    if answer.get("op") != "pair":
        return f"not paired by the head: {answer.get('why', '')}"
    sampler: Any = None
    taken = 0
    while True:
        message = channel.recv(None)
        op = message.get("op")
        if op == "warm":
            try:
                assert fn is not None
                sampler = make_sampler(fn, warmup_s=float(timing_kw.get("warmup_s", 0.2)), hot_cache=hot_cache,
                                       graph=graph, n_inputs=timing_kw.get("n_inputs"), reps=timing_kw.get("reps"))
                sampler.arm()
            except Exception as exc:
                channel.send({"op": "error", "message": f"{type(exc).__name__}: {exc}"})
                raise
            # the warm-up ran REV's kernel: whatever it imports lazily (a JIT, an extension) is imported by now
            channel.send({"op": "warmed", "meta": sampler.meta(int(timing_kw.get("n_samples", 100))),
                          "foreign": _foreign_now()})
        elif op == "sample":
            try:
                us, _ = sampler.one()
            except Exception as exc:
                channel.send({"op": "error", "message": f"{type(exc).__name__}: {exc}"})
                raise
            taken += 1
            channel.send({"op": "sample", "us": us})
        elif op == "end":
            return f"timed for --pipecheck-compare: {taken} samples, paired with the head's"
