"""The parent's plugin of compare mode: the session that owns REV's tree and process for the run."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from ...results import PipecheckError
from ..stats import Samples
from .errors import CompareError
from .foreign import _foreign
from .outcomes import NewAtRev, Paired
from .rev_process import RevProcess
from .tree import Relocation, Revision, _git, tree_gaps

if TYPE_CHECKING:  # pragma: no cover
    from ...checks.context import CheckContext

_MAX_FAILURES = 3  # REV processes that crashed or hung in one run before no more are started


_START_S = 120.0  # at least this long for REV's process to start and collect (a large suite collects slowly)


_SESSION = pytest.StashKey["ComparePlugin"]()


class ComparePlugin:
    """Compare mode in a process that runs tests (or hands them to workers): REV, its tree, its process."""

    def __init__(self, config: pytest.Config, revision: Revision, tree: str | None, owns_tree: bool) -> None:
        self.config = config
        self.revision = revision
        self.tree = tree
        self.owns_tree = owns_tree
        self.files: list[str] = []
        self.process: RevProcess | None = None
        self.failures: list[str] = []
        self.gaps = tree_gaps(tree) if tree else {}  # what REV's tree lacks of REV: every compared check errs
        config.add_cleanup(self.close)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """pytest-xdist: each worker gets the run's tree of REV."""
        if self.tree:
            node.workerinput["pipecheck_compare_tree"] = self.tree

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        files = []
        for item in session.items:
            path = str(getattr(item, "path", "") or "")
            if path and path not in files:
                files.append(path)
        self.files = files

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None
        if self.owns_tree and self.tree:
            shutil.rmtree(os.path.dirname(self.tree), ignore_errors=True)

    # ------------------------------------------------------------------ one check

    def _process(self, timeout: float) -> RevProcess | NewAtRev:
        if self.process is not None and self.process.alive:
            return self.process
        if self.process is not None:
            self.process.close()
            self.process = None
        if len(self.failures) >= _MAX_FAILURES:
            raise CompareError(f"REV's process failed {len(self.failures)} times in this run, so no more are started; "
                               f"the last time: {self.failures[-1]}")
        assert self.tree is not None
        reloc = Relocation(self.revision.toplevel, self.tree)
        files = [reloc(f) for f in self.files]
        existing = [f for f in files if os.path.isfile(f)]
        if not existing:
            return NewAtRev(f"none of this run's test files exists at {self.revision.label}")
        allowed = max(timeout, _START_S)
        self._say(f"pipecheck compare: starting the process that times {self.revision.label} in its own tree "
                  f"({len(existing)} test file(s) to collect, up to {allowed:g} s); the head's timings wait for it")
        started = time.monotonic()
        try:
            self.process = RevProcess(self.config, self.revision, self.tree, existing, allowed)
        except CompareError as exc:
            self.failures.append(str(exc).split("\n", 1)[0])
            raise
        self._say(f"pipecheck compare: {self.revision.label}'s process is ready after {time.monotonic() - started:.1f} s "
                  f"({len(self.process.collected)} tests collected there)")
        return self.process

    def _say(self, line: str) -> None:
        """A line on the terminal while a test runs (its output captured): REV's process can take a minute to
        start, and a run that prints nothing that long reads as hung. Said where a terminal is (not in an
        xdist worker, whose output nobody reads)."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        cm = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
        with cm:
            tr.write_line(line)

    def _in_rev_tree(self, nodeid: str) -> NewAtRev | None:
        """None when the test's file is in REV's tree; :class:`NewAtRev` when REV's commit has no such file.
        A file REV's commit has and its tree lacks (``export-ignore`` in ``.gitattributes``) was not timed, so
        that is a :class:`CompareError`, not a new check."""
        assert self.tree is not None
        file = nodeid.split("::", 1)[0]
        head_path = os.path.join(str(self.config.rootpath), file)
        if os.path.isfile(Relocation(self.revision.toplevel, self.tree)(head_path)):
            return None
        rel = os.path.relpath(head_path, self.revision.toplevel).replace(os.sep, "/")
        listed = _git(["ls-tree", "--name-only", self.revision.sha, "--", rel], self.revision.toplevel)
        if listed.returncode == 0 and listed.stdout.strip():
            raise CompareError(f"{file} is in REV's commit {self.revision.sha[:10]} but not in the tree `git archive` "
                               "wrote of it (export-ignore in .gitattributes leaves it out): REV's test could not be "
                               "timed")
        return NewAtRev(f"new at {self.revision.label}: {file} does not exist there")

    def _not_collected(self, nodeid: str) -> str:
        """Why REV's process has no ``nodeid``: :class:`CompareError` when collecting there failed or was skipped
        for its file (or a directory or conftest above it), else the reason it is new at REV."""
        file = nodeid.split("::", 1)[0]
        proc = self.process
        for kind, found in (("failed", proc.errors if proc else {}), ("was skipped", proc.skipped if proc else {})):
            for key, text in found.items():
                where = key.split("::", 1)[0].rstrip("/")
                above = os.path.dirname(where) if os.path.basename(where) == "conftest.py" else where
                if where in ("", ".", file) or file.startswith(above + "/") or key.endswith(file):
                    last = ([line.strip() for line in text.strip().splitlines() if line.strip()][-1:] or [""])[0]
                    last = last[1:].strip() if last.startswith("E ") else last  # pytest's mark of an error line
                    raise CompareError(f"collecting {key or file} {kind} at {self.revision.label} ({last}): "
                                       f"REV's {nodeid} could not be timed")
        return f"new at {self.revision.label}: no test {nodeid} there"

    def pair(self, ctx: CheckContext, case: str, head: Callable[[], Any], *, n_samples: int,
             max_time_s: float, settle_s: float, timeout: float) -> Paired | NewAtRev:
        """Time ``case`` of the test ``ctx.nodeid`` at REV and at the head, in turns (the module's protocol).

        ``head()`` builds the head's sampler (warmed up and probed). Returns the paired samples, or
        :class:`NewAtRev` when REV has no such check; raises :class:`CompareError` when REV's process
        failed, REV's kernel raised, or the calls cannot be paired.
        """
        try:
            return self._pair(ctx, case, head, n_samples=n_samples, max_time_s=max_time_s, settle_s=settle_s,
                              timeout=timeout)
        except CompareError as exc:
            if self.process is not None and not self.process.alive:
                self.failures.append(str(exc).split("\n", 1)[0])
                self.process = None
            raise

    def _pair(self, ctx: CheckContext, case: str, head: Callable[[], Any], *, n_samples: int,
              max_time_s: float, settle_s: float, timeout: float) -> Paired | NewAtRev:
        nodeid = ctx.nodeid
        if self.gaps:
            raise CompareError("REV's tree is not REV's whole: " + "; ".join(self.gaps.values()))
        absent = self._in_rev_tree(nodeid)
        if absent is not None:
            return absent
        got = self._process(timeout)
        if isinstance(got, NewAtRev):
            return got
        proc = got
        if nodeid not in proc.collected:
            return NewAtRev(self._not_collected(nodeid))
        label = self.revision.label
        if case in proc.passed.get(nodeid, []):
            raise CompareError(
                f"the calls cannot be paired: at {label}, {nodeid} calls check_perf(case={case!r}) before a case "
                f"this test calls first, so REV's {case!r} went by unpaired (REV's calls passed over: "
                f"{', '.join(repr(c) for c in proc.passed[nodeid])}); pairs are timed in the order both tests call "
                "check_perf, so the order must match")
        if nodeid in proc.ended and proc.current != nodeid:
            return self._ended_without(proc, nodeid, case)
        proc.start_test(nodeid, timeout)
        while True:
            message = proc.next_message(timeout, f"running {nodeid} up to check_perf(case={case!r})")
            op = message.get("op")
            if op == "done":
                return self._ended_without(proc, nodeid, case)
            if op != "arrive":
                raise CompareError(f"REV's process said {op!r} while {nodeid} ran, not 'arrive' or 'done'")
            if message.get("case") == case:
                if not message.get("callable"):
                    proc.send({"op": "pass", "why": "samples= given at REV: nothing to time"}, "passing a check")
                    return NewAtRev(f"new at {label}: its check_perf(case={case!r}) passes samples=, so there is "
                                    "no kernel of REV to time")
                if message.get("foreign"):
                    proc.send({"op": "pass", "why": "REV's process imported the head's code"}, "passing a check")
                    raise CompareError(_foreign(message["foreign"], self.revision))
                break
            proc.passed.setdefault(nodeid, []).append(str(message.get("case")))
            proc.send({"op": "pass", "why": f"the head's test waits for case {case!r}"}, "passing a check")
        return self._lockstep(proc, nodeid, case, head, n_samples=n_samples, max_time_s=max_time_s,
                              settle_s=settle_s, timeout=timeout)

    def _ended_without(self, proc: RevProcess, nodeid: str, case: str) -> NewAtRev:
        """REV's test ended without reaching ``case``: new at REV when it ran to the end and passed; a test that
        failed, was skipped or xfailed there may have stopped before the case, so that is a :class:`CompareError`."""
        calls = proc.passed.get(nodeid, [])
        made = f"its check_perf calls there: {', '.join(repr(c) for c in calls)}" if calls else "no check_perf call there"
        outcome = proc.outcomes.get(nodeid, "ended")
        if outcome != "passed":
            raise CompareError(f"at {self.revision.label}, {nodeid} {outcome} before it called "
                               f"check_perf(case={case!r}) ({made}): REV's kernel could not be timed")
        return NewAtRev(f"new at {self.revision.label}: {nodeid} does not call check_perf(case={case!r}) there (the test "
                        f"passed; {made})")

    def _lockstep(self, proc: RevProcess, nodeid: str, case: str, head: Callable[[], Any], *, n_samples: int,
                  max_time_s: float, settle_s: float, timeout: float) -> Paired:
        where = f"{nodeid} [case {case}]"
        proc.send({"op": "pair", "n": n_samples}, f"pairing {where}")
        proc.send({"op": "warm"}, f"warming REV's kernel of {where}")
        warmed = proc.recv(timeout, f"warming REV's kernel of {where}")
        self._raise_rev_error(warmed, where, "warming it up")
        if warmed.get("foreign"):  # imported while REV's kernel warmed up: end its check, time nothing
            proc.send({"op": "end", "why": "REV's process imported the head's code"}, f"ending {where}")
            with contextlib.suppress(CompareError):
                proc.hold(timeout, f"running the rest of {nodeid} after case {case!r}")
            raise CompareError(_foreign(warmed["foreign"], self.revision))
        rev_meta = dict(warmed.get("meta") or {})
        try:
            sampler = head()
            sampler.settle(settle_s)
            sampler.arm()
            base: list[float] = []
            times: list[float] = []
            anchors: list[float] = []
            deadline = time.perf_counter() + max_time_s
            for i in range(n_samples):
                for side in (("base", "head") if i % 2 == 0 else ("head", "base")):
                    if side == "base":
                        proc.send({"op": "sample", "i": i}, f"timing {where}")
                        got = proc.recv(timeout, f"timing sample {i} of REV's kernel of {where}")
                        self._raise_rev_error(got, where, f"timing sample {i}")
                        base.append(float(got["us"]))
                    else:
                        t, a = sampler.one()
                        times.append(t)
                        if a is not None:
                            anchors.append(a)
                if i >= 9 and time.perf_counter() > deadline:
                    break
        except BaseException:
            if proc.alive:
                with contextlib.suppress(CompareError):
                    proc.send({"op": "end", "why": "the head stopped"}, f"ending {where}")
            raise
        proc.send({"op": "end"}, f"ending {where}")
        try:
            proc.hold(timeout, f"running the rest of {nodeid} after case {case!r}")
        except CompareError as exc:
            # this check's pairs were all taken: they stand; the next check gets a fresh process
            self.failures.append(str(exc).split("\n", 1)[0])
            self.process = None
        head_samples = sampler.samples(times, anchors if anchors else None, n_samples)
        try:
            base_samples = Samples(tuple(base), {**rev_meta, "rev": self.revision.rev, "sha": self.revision.sha})
        except PipecheckError as exc:
            raise CompareError(f"REV's samples of {where} are unusable: {exc}") from None
        return Paired(head_samples, base_samples)

    def _raise_rev_error(self, message: dict[str, Any], where: str, doing: str) -> None:
        op = message.get("op")
        if op == "error":
            raise CompareError(f"REV's kernel of {where} raised while {doing}: {message.get('message')}")
        if op not in ("warmed", "sample"):
            raise CompareError(f"REV's process said {op!r} while {doing} {where}")


def session_of(config: pytest.Config) -> ComparePlugin | None:
    """This process's compare mode, or None (off, or this is REV's process)."""
    return config.stash.get(_SESSION, None)
