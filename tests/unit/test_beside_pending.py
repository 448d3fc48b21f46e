"""The bookkeeping of the sanitizer children beside the tests (pytest_pipecheck/sanitizer/beside.py) and the
runner's word that a child ended a test: threads stand in for the children, a handshake orders them, and no
assertion depends on how fast the machine is."""

from __future__ import annotations

import threading

from pytest_pipecheck.sanitizer.beside import Pending


class _Item:
    pass


def test_wait_reached_returns_when_a_child_ended_the_test_or_its_part_ended() -> None:
    pending = Pending()
    a, b, other = _Item(), _Item(), _Item()
    pending.expect([a, b])
    pending.run_started()
    pending.wait_reached(other)  # in no running part: nothing to wait for
    waited = threading.Event()

    def wait_for_a() -> None:
        pending.wait_reached(a)
        waited.set()

    thread = threading.Thread(target=wait_for_a)
    thread.start()
    assert not waited.wait(0.3)  # nothing ended it yet
    pending.reached(a)
    thread.join(30)
    assert waited.is_set()
    assert pending.waits(a)  # reached is not judged: its verdicts still wait for the part's end
    done = threading.Event()
    thread = threading.Thread(target=lambda: (pending.wait_reached(b), done.set()))
    thread.start()
    pending.settle([a, b])  # the part ended (a child that died before b ends it so)
    thread.join(30)
    assert done.is_set() and not pending.waits(b)


def test_details_are_said_only_where_the_run_waits() -> None:
    pending = Pending()
    pending.say("racecheck: 3 test(s) in one child")
    pending.say("racecheck: test 1 of 3 (0.5 s) t.py::test_a", detail=True)
    assert pending.take_messages(details=False) == ["racecheck: 3 test(s) in one child"]
    assert pending.take_messages(details=False) == []
    assert pending.take_messages() == ["racecheck: test 1 of 3 (0.5 s) t.py::test_a"]
