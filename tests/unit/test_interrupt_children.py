"""An interrupted run leaves no child of pipecheck running: the sanitizer's children and the relay
children run in process sessions of their own, so no signal meant for the run reaches them, and the
process that started them kills them when it is interrupted."""

from __future__ import annotations

import os
import signal
import sys
import threading
import types
from pathlib import Path

import pytest

from pytest_pipecheck.sanitizer.child_watch import run_child
from pytest_pipecheck.sanitizer.parse import BEGIN

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

# a child that says its process id between the markers and then would run for a minute
_LONG_CHILD = f"import os, time\nprint({BEGIN!r} + str(os.getpid()), flush=True)\ntime.sleep(60)\n"


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer exists (its parent reaped it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_run_child_kills_its_child_when_the_run_is_interrupted() -> None:
    began: list[int] = []

    def on_begin(pid: str) -> None:  # the interruption arrives while the runner watches the child
        began.append(int(pid))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_child([sys.executable, "-c", _LONG_CHILD], cwd=".", env=dict(os.environ), timeouts={},
                  default_timeout=600.0, idle_limit=600.0, on_begin=on_begin)
    assert began and _gone(began[0])


def test_run_child_on_another_thread_stops_when_children_are_stopped() -> None:
    from pytest_pipecheck.sanitizer.child_watch import ChildrenStopped, allow_children, stop_children

    began: list[int] = []
    started = threading.Event()
    raised: list[BaseException] = []

    def on_begin(pid: str) -> None:
        began.append(int(pid))
        started.set()

    def run() -> None:  # as the sanitizer's parallel jobs run their children
        try:
            run_child([sys.executable, "-c", _LONG_CHILD], cwd=".", env=dict(os.environ), timeouts={},
                      default_timeout=600.0, idle_limit=600.0, on_begin=on_begin, poll=0.05)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert started.wait(120), "the child never printed its BEGIN line"
        stop_children()  # what pipecheck's signal handler does on the main thread
        thread.join(120)
        assert not thread.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], ChildrenStopped)
        assert _gone(began[0])
        with pytest.raises(ChildrenStopped):  # and no new child starts while the run is being stopped
            run_child([sys.executable, "-c", "pass"], cwd=".", env=dict(os.environ), timeouts={},
                      default_timeout=600.0, idle_limit=600.0)
    finally:
        allow_children()
        thread.join(120)
    run = run_child([sys.executable, "-c", "pass"], cwd=".", env=dict(os.environ), timeouts={},
                    default_timeout=600.0, idle_limit=600.0)
    assert run.returncode == 0


def test_a_relay_child_is_killed_when_the_run_is_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_pipecheck import containment, state

    monkeypatch.setattr(containment.children, "command",
                        lambda *args, **kwargs: [sys.executable, "-c", "import time; time.sleep(60)"])
    config = types.SimpleNamespace(rootpath=tmp_path, invocation_params=types.SimpleNamespace(dir=tmp_path),
                                   stash={state.RUN_SEED: 1})
    child = containment._Child(config, ["t.py::test_a"], "crash", 600.0)  # type: ignore[arg-type]
    reads = []

    def interrupted_read() -> None:
        """The interruption arrives while the parent waits for its relay child's next event."""
        reads.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(child, "_read", interrupted_read)
    try:
        with pytest.raises(KeyboardInterrupt):
            child.wait_for("t.py::test_a")
        assert reads and child.proc is not None
        assert child.proc.returncode == -signal.SIGKILL  # killed and reaped, not left to run its minute
    finally:
        child.close()
