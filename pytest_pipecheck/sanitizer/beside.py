"""The sanitizer children running beside the tests: which tests still wait for them, and the GPU for timings.

A test's sanitizer verdict is needed only when that test is reported. So the parent starts a share's
children on a thread of their own and goes on running tests (an xdist worker each share it is sent):

* a test runs at once (with ``PIPECHECK_SANITIZER_OVERLAP=trail``, once a child has ended it:
  :meth:`Pending.wait_reached`; the kernels it compiles are then in the Triton and CuPy caches, compiled by
  the children, several at once, rather than by the parent, one after another);
* its reports are held, not logged, until the children that judge it have ended; then its verdicts are
  recorded and its reports made to agree with them, in the order the tests were collected
  (``held_reports.HeldReports._flush_held``). The verdicts are the same children's, decided the same way:
  only when the parent's tests run, and when their reports go out, changes.

An xdist worker's controller counts a test as run when its run ends and takes its reports when they come;
the worker sends a held test's reports as that test's (``xdist_hooks.reporting_as``). Where reports cannot
be held (another plugin runs tests its own way, or an xdist whose worker cannot send a report late), each
test waits before its setup for the children that hold its verdicts (:class:`Pending`).

Two things must not run beside the children:

* a timing. pipecheck times a kernel only where nothing else runs on its GPU (``timing_blocked`` of the
  tier: :mod:`pytest_pipecheck.device`). While this process's children may still run, the tier the tests
  get is :class:`TierBesideChildren`, whose ``timing_blocked`` (check_perf, check_stage_sweep and
  ``require_gpu(alone=True)`` all ask it before they time) first waits for every one of them to end, then
  answers as the tier would have. A held test that asks in its body, or in a function-scoped fixture through
  its own ``pipecheck`` (:meth:`TierBesideChildren.in_test`), stops there instead (:class:`Postponed`) and
  runs again from its start after the other tests, once every child has ended, so that the tests after it
  need not wait. A fixture of a wider scope waits: pytest would keep its failure for the tests after it.
  The watchdog does not count a wait against the test, nor do the test's reported durations hold it.
  In an xdist worker whose GPU other workers share, the GPU's lease (:mod:`pytest_pipecheck.gpu_lease`)
  asks this first, then waits for those workers too; a held test stops there even where no child of its
  own runs.
* a test that times kernels with pytest-benchmark's ``benchmark`` fixture, which asks pipecheck nothing:
  such tests go after the others, and each waits for every child before its setup (held instead where
  other xdist workers share the GPU: waiting for them, its worker would wait with it).

Progress lines of the children are said by the main thread between tests (a line written from the
children's thread while a test runs would land in that test's captured output); the one line per test a
child ran, only where the run waits for the children, or at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from _pytest.outcomes import Skipped

from ..device import TierInfo

__all__ = ["Pending", "Postponed", "TierBesideChildren", "beside_children"]


class Postponed(Skipped):
    """Raised inside a test whose reports are held (its body runs while the children still run) where it asks
    for the GPU alone: the test stops there and runs again from its start once every child has ended. A skip,
    so that nothing treats it as the test's failure (``--pdb`` does not stop on it); the report of that first
    run is never logged."""


class Pending:
    """The tests that wait for verdicts of children still running, and the runs' ends and errors."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._left: dict[int, int] = {}  # id of a test item -> parts still running that hold a verdict of it
        self._reached: set[int] = set()  # ids of the test items a child has ended (its kernels are compiled)
        self._runs = 0  # background runs not ended
        self._messages: list[tuple[str, bool]] = []
        self.error: BaseException | None = None  # what ended a run before it gave every verdict

    def expect(self, items: Iterable[Any]) -> None:
        """One part (one child's batch) that holds a verdict of each of ``items`` is about to run."""
        with self._cond:
            for item in items:
                self._left[id(item)] = self._left.get(id(item), 0) + 1

    def settle(self, items: Iterable[Any]) -> None:
        """That part ended (its verdicts are in the items' stash, or it failed: :attr:`error`)."""
        with self._cond:
            for item in items:
                left = self._left.get(id(item), 0) - 1
                if left > 0:
                    self._left[id(item)] = left
                else:
                    self._left.pop(id(item), None)
            self._cond.notify_all()

    def reached(self, item: Any) -> None:
        """A child has ended ``item`` (whatever its verdict will be): what it compiled is in the caches."""
        with self._cond:
            self._reached.add(id(item))
            self._cond.notify_all()

    def wait_reached(self, item: Any, tell: Callable[[list[str]], None] | None = None, poll: float = 0.2) -> None:
        """Until a child has ended ``item``, or no part that holds a verdict of it still runs; ``tell`` gets
        the progress lines meanwhile, but for the one line per test a child ran."""
        self._wait_while(lambda: id(item) in self._left and id(item) not in self._reached, tell, False, poll)

    def run_started(self) -> None:
        with self._cond:
            self._runs += 1

    def run_ended(self, error: BaseException | None = None) -> None:
        with self._cond:
            self._runs -= 1
            if error is not None and self.error is None:
                self.error = error
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        with self._cond:
            return self._runs > 0

    def waits(self, item: Any) -> bool:
        """Whether a part that holds a verdict of ``item`` is still running."""
        with self._cond:
            return id(item) in self._left

    def say(self, message: str, detail: bool = False) -> None:
        """A progress line of the children, said by the main thread at the next :meth:`take_messages`; a
        ``detail`` (one test done in a child) only where the run waits for them, or at the end."""
        with self._cond:
            self._messages.append((message, detail))

    def take_messages(self, details: bool = True) -> list[str]:
        """The lines said so far (without ``details``: the others, which stay for a later call)."""
        with self._cond:
            return self._take(details)

    def _take(self, details: bool) -> list[str]:
        """:meth:`take_messages` with the lock held."""
        out = [m for m, d in self._messages if details or not d]
        self._messages = [] if details else [(m, d) for m, d in self._messages if d]
        return out

    def wait(self, item: Any | None, tell: Callable[[list[str]], None] | None = None, poll: float = 0.2) -> None:
        """Until every part holding a verdict of ``item`` ended (``item`` None: every run ended). Where that
        means waiting, ``tell`` gets the progress lines said so far and meanwhile (the run then stands still
        for the children: they say why); otherwise they wait for a later wait or the end of the tests."""
        busy = (lambda: id(item) in self._left) if item is not None else (lambda: self._runs > 0)
        if self._wait_while(busy, tell, True, poll) and tell is not None:
            said = self.take_messages()
            if said:
                tell(said)

    def _wait_while(self, busy: Callable[[], bool], tell: Callable[[list[str]], None] | None, details: bool,
                    poll: float) -> bool:
        """Until ``busy()`` (asked under the lock) is false, handing ``tell`` the lines said meanwhile (with
        ``details``: all of them) outside the lock; whether it waited at all."""
        waited = False
        with self._cond:
            while busy():
                waited = True
                said = self._take(details) if tell is not None else []
                if tell is not None and said:
                    self._cond.release()
                    try:
                        tell(said)
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait(poll)
        return waited


class TierBesideChildren(TierInfo):
    """The tier while this process's sanitizer children may still run on its GPU: before a timing is taken
    (``timing_blocked`` is asked), every child ends. Made by :func:`beside_children`; a copy made with
    ``dataclasses.replace`` is a plain tier in all but name."""

    @property
    def timing_blocked(self) -> str | None:
        wait = getattr(self, "_pipecheck_wait", None)
        if wait is not None and wait(in_test=getattr(self, "_pipecheck_in_test", False)):
            return None  # the GPU is this process's alone now (gpu_lease.py: the other workers on it are done)
        return super().timing_blocked

    def in_test(self) -> TierBesideChildren:
        """This tier for one test's ``pipecheck`` fixture, which is function-scoped: a wait asked through it may
        stop a held test in its setup too (a fixture that asks for the GPU alone), since what a function-scoped
        fixture raises is not kept for the tests after it."""
        wait: Callable[..., bool | None] = getattr(self, "_pipecheck_wait", _no_wait)
        return beside_children(self, wait, in_test=True)


def _no_wait(in_test: bool = False) -> bool:
    return False


def beside_children(tier: TierInfo, wait: Callable[..., bool | None], in_test: bool = False) -> TierBesideChildren:
    """``tier``, whose ``timing_blocked`` first calls ``wait(in_test=...)`` (which returns once this process's
    children have ended, or once it has the GPU alone: then True, and nothing blocks a timing)."""
    import dataclasses

    out = TierBesideChildren(**{f.name: getattr(tier, f.name) for f in dataclasses.fields(tier)})
    object.__setattr__(out, "_pipecheck_wait", wait)
    object.__setattr__(out, "_pipecheck_in_test", in_test)
    return out
