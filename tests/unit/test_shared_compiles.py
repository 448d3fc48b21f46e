"""Each Triton kernel compiled once among the processes that share a Triton cache (``model/shared_compiles.py``).

The lock is held by real processes (a child started here holds a bucket's lock until told to let go), and no
test waits on a clock: the waiting compile's clock and sleep are stand-ins, and the holder lets go when the
stand-in sleep is first called, so the order of events is fixed by the handshake alone. The last test compiles
one real kernel ahead of time (sm_90, no GPU needed) in two processes that start together: exactly one compiles
it, the other finds it in the cache.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.model import shared_compiles
from pytest_pipecheck.model.shared_compiles import BUCKETS, CompileLock, lock_folder, specialization_key

# the session under test wraps Triton's compile itself on the GPU tier: these run where it does not (the CPU job)
pytestmark = pytest.mark.cpu_only

KEY = "a" * 64

HOLDER = textwrap.dedent("""
    import sys
    from pytest_pipecheck.model.shared_compiles import CompileLock
    with CompileLock(sys.argv[1], sys.argv[2]) as lock:
        print("held" if lock.held else "not held", flush=True)
        sys.stdin.readline()  # let go when told
    print("released", flush=True)
""")


class Holder:
    """A process that holds the lock of ``key`` in ``folder`` until :meth:`release`."""

    def __init__(self, folder: str, key: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, folder, key], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "released"
            self.proc.wait(timeout=60)


class FakeTime:
    """A clock that moves only when the waiting lock sleeps; ``on_sleep`` runs at each sleep."""

    def __init__(self, on_sleep: Any = None) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += 100.0
        if self.on_sleep is not None:
            self.on_sleep()


def _held_elsewhere(path: str) -> bool:
    """Whether an open file other than this one holds the lock file ``path``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def fake_compile(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``triton.compiler.compile`` replaced by a recorder (which asks ``probe["held"]`` whether its lock is held
    while it runs), for pipecheck to wrap in the test."""
    compiler = pytest.importorskip("triton.compiler")
    calls: list[dict[str, Any]] = []
    probe: dict[str, Any] = {}

    def compile(src: Any, target: Any = None, options: Any = None, _env_vars: Any = None) -> str:
        calls.append({"src": src, "held": probe["held"]() if "held" in probe else None})
        return "compiled"

    monkeypatch.setattr(compiler, "compile", compile)
    yield compiler, compile, calls, probe
    shared_compiles.stop_sharing()


class Src:
    """What ``triton.compiler.compile`` is given for a kernel (an ``ASTSource``): its ``hash()``."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def hash(self) -> str:
        return self.digest


def test_one_kernel_is_keyed_alike_and_different_kernels_or_options_apart() -> None:
    a = specialization_key(Src("k1"), (), {"target": "cuda:90", "options": {"num_warps": 4, "num_stages": 3}})
    assert a == specialization_key(Src("k1"), (), {"options": {"num_stages": 3, "num_warps": 4}, "target": "cuda:90"})
    assert a == specialization_key(Src("k1"), ("cuda:90", {"num_warps": 4, "num_stages": 3}), {})
    assert a != specialization_key(Src("k2"), (), {"target": "cuda:90", "options": {"num_warps": 4, "num_stages": 3}})
    assert a != specialization_key(Src("k1"), (), {"target": "cuda:90", "options": {"num_warps": 8, "num_stages": 3}})
    assert a != specialization_key(Src("k1"), (), {"target": "cuda:80", "options": {"num_warps": 4, "num_stages": 3}})


def test_a_source_that_cannot_be_keyed_is_compiled_without_a_lock(fake_compile, tmp_path: Path) -> None:
    compiler, _, calls, _ = fake_compile

    class Unhashable:
        def hash(self) -> str:
            raise RuntimeError("no hash here")

    assert specialization_key(Unhashable(), (), {}) is None
    assert shared_compiles.share_compiles(str(tmp_path))
    assert compiler.compile(Unhashable(), target="t") == "compiled"
    assert len(calls) == 1 and not (tmp_path / f"pipecheck-compiles-{os.getuid()}").exists()


def test_the_compile_runs_while_its_kernels_lock_is_held_and_lets_go_after(fake_compile, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    compiler, original, calls, probe = fake_compile
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    src, kwargs = Src("kernel"), {"target": "cuda:90", "options": {"num_warps": 4}}
    path = CompileLock(lock_folder(str(tmp_path / "cache"), str(tmp_path)), specialization_key(src, (), kwargs) or "").path
    probe["held"] = lambda: _held_elsewhere(path)
    assert shared_compiles.share_compiles(str(tmp_path))
    assert not shared_compiles.share_compiles(str(tmp_path))  # once per process
    assert compiler.compile(src, **kwargs) == "compiled"
    assert calls == [{"src": src, "held": True}]
    assert not _held_elsewhere(path)  # let go once the compile returned
    shared_compiles.stop_sharing()
    assert compiler.compile is original


def test_a_wrapper_put_on_top_stays_and_pipecheck_s_compiles_straight_through(fake_compile, tmp_path: Path) -> None:
    compiler, _, calls, probe = fake_compile
    assert shared_compiles.share_compiles(str(tmp_path))
    ours = compiler.compile

    def on_top(src: Any, *args: Any, **kwargs: Any) -> Any:
        return ours(src, *args, **kwargs)

    compiler.compile = on_top
    shared_compiles.stop_sharing()
    assert compiler.compile is on_top and not shared_compiles.sharing()
    probe["held"] = lambda: "asked"
    assert compiler.compile(Src("k"), target="t") == "compiled"
    assert calls[-1]["held"] == "asked"
    assert not (tmp_path / f"pipecheck-compiles-{os.getuid()}").exists()  # no lock taken any more


def test_a_second_process_waits_for_the_first_compile_of_its_kernel(fake_compile, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    compiler, _, calls, _ = fake_compile
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    src, kwargs = Src("kernel"), {"target": "cuda:90", "options": {"num_warps": 4}}
    folder = lock_folder(str(tmp_path / "cache"), str(tmp_path))
    holder = Holder(folder, specialization_key(src, (), kwargs) or "")
    events: list[str] = []

    def on_sleep() -> None:  # the compile waits: the other process finishes its compile and lets go
        events.append("waited")
        holder.release()
        events.append("released")

    fake = FakeTime(on_sleep)
    try:
        assert shared_compiles.share_compiles(
            str(tmp_path), lock=functools.partial(CompileLock, clock=fake.clock, sleep=fake.sleep))
        assert compiler.compile(src, **kwargs) == "compiled"
    finally:
        holder.release()
    assert events[:2] == ["waited", "released"] and len(calls) == 1  # compiled only after the holder let go
    assert fake.sleeps >= 1


def test_a_holder_that_never_lets_go_costs_the_wait_limit_then_the_compile_goes_on(tmp_path: Path) -> None:
    holder = Holder(str(tmp_path), KEY)
    fake = FakeTime()
    try:
        with CompileLock(str(tmp_path), KEY, wait_limit=600.0, clock=fake.clock, sleep=fake.sleep) as lock:
            assert not lock.held and lock.waited >= 600.0
        assert fake.sleeps == 6  # 100 s a sleep on the stand-in clock
    finally:
        holder.release()
    with CompileLock(str(tmp_path), KEY, clock=fake.clock, sleep=fake.sleep) as lock:
        assert lock.held and lock.waited == 0.0


def test_threads_of_one_process_lock_one_another_and_other_buckets_do_not(tmp_path: Path) -> None:
    fake = FakeTime()
    with CompileLock(str(tmp_path), KEY) as first:
        assert first.held
        with CompileLock(str(tmp_path), KEY, wait_limit=300.0, clock=fake.clock, sleep=fake.sleep) as second:
            assert not second.held  # a second open file of the same process waits like another process
        other = next(k for k in (f"{n:08x}" + "0" * 56 for n in range(1, 10)) if
                     int(k[:8], 16) % BUCKETS != int(KEY[:8], 16) % BUCKETS)
        with CompileLock(str(tmp_path), other, clock=fake.clock, sleep=fake.sleep) as third:
            assert third.held and third.waited == 0.0


def test_a_file_system_without_locks_compiles_at_once_without_waiting(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    fake = FakeTime()
    with CompileLock(str(tmp_path), KEY, clock=fake.clock, sleep=fake.sleep) as lock:
        assert not lock.held
    assert fake.sleeps == 0  # not the wait limit: nothing to wait for


def test_a_lock_folder_another_user_made_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine several users share, another user could make the folder first and hold every lock in it:
    each compile would then wait out the limit. A folder that is not this user's is not used."""
    folder = lock_folder(str(tmp_path / "cache"), str(tmp_path))
    with CompileLock(folder, KEY) as lock:
        assert lock.held  # this user's folder
    monkeypatch.setattr(os, "getuid", lambda: os.stat(folder).st_uid + 1)  # as another user sees it
    fake = FakeTime()
    with CompileLock(folder, KEY, clock=fake.clock, sleep=fake.sleep) as lock:
        assert not lock.held and fake.sleeps == 0


def test_an_unwritable_lock_folder_compiles_without_a_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with CompileLock(str(blocker / "locks"), KEY) as lock:  # a folder under a file cannot be made
        assert not lock.held


def test_processes_sharing_a_cache_folder_share_its_locks_and_others_do_not(tmp_path: Path) -> None:
    a = lock_folder(str(tmp_path / "cache"), str(tmp_path))
    assert a == lock_folder(str(tmp_path / "cache") + "/", str(tmp_path))
    assert a != lock_folder(str(tmp_path / "other-cache"), str(tmp_path))


COMPILER = textwrap.dedent("""
    import sys
    import triton
    import triton.language as tl
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from pytest_pipecheck.model import shared_compiles

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)

    assert shared_compiles.share_compiles(sys.argv[1])
    seen = []
    knobs.compilation.listener = lambda **kw: seen.append(kw["cache_hit"])
    print("ready", flush=True)
    sys.stdin.readline()  # both processes start their compile together
    src = ASTSource(scale, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"BLOCK": 128})
    triton.compiler.compile(src, target=GPUTarget("cuda", 90, 32))
    print("hit" if seen == [True] else "miss" if seen == [False] else f"listener saw {seen}", flush=True)
""")


def test_two_processes_compiling_one_kernel_at_once_compile_it_once(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("triton.backends.nvidia")
    (tmp_path / "k.py").write_text(COMPILER)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "k.py"), str(tmp_path / "locks")], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate()[1][-3000:]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
    said = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        said.append(out.strip())
    assert sorted(said) == ["hit", "miss"]
