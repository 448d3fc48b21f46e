"""Each Triton kernel compiled once among the processes that share one Triton cache.

A GPU-tier run starts several processes that compile the same kernels: the sanitizer children (racecheck
and synccheck each run the same tests, in parts side by side) and the parent that runs the tests after
them. Triton's cache holds a kernel once one process has compiled it, but two processes that miss it at
the same time both compile it, each for as long as a compile takes. On the examples' fla-core kernels a
test's time in a child was 49 s of compiling out of 51 s: two children compiling one kernel's configs at
once pay that twice, on the host's cores that every other child needs too.

:func:`share_compiles` wraps ``triton.compiler.compile`` (the reference a ``JITFunction`` takes when it
first runs) in a lock held across processes, one per kernel specialization: the first process to reach a
kernel compiles it; another that reaches it meanwhile waits, then finds it in the cache. The lock is a
file lock (``flock``) on one of :data:`BUCKETS` files in a folder of the temporary directory named after
the Triton cache folder, so exactly the processes that share a cache share its locks (a ConSan child, with
a cache of its own, locks with its own kind only); two kernels that fall into one bucket only wait for one
another. ``flock`` belongs to the open file, so threads of one process (the Autotuner's configs compiling
side by side) lock one another as processes do, and the kernel drops a lock whose process died.

What is compiled does not change, only who compiles it: a lock that cannot be had (an unwritable
temporary directory, a lock folder another user made, a Triton whose arguments cannot be keyed) compiles
without one, and a wait longer than :data:`WAIT_LIMIT` (a holder stopped and never killed) gives up and
compiles anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BUCKETS", "WAIT_LIMIT", "CompileLock", "lock_folder", "share_compiles", "sharing", "specialization_key",
           "stop_sharing"]

#: lock files per cache folder: a fixed number, so that the folder never grows with the kernels compiled
BUCKETS = 1024
#: seconds a compile waits for another process's compile of its bucket before it compiles anyway
WAIT_LIMIT = 600.0
_POLL = 0.05

# the wrapper in place and what it wraps, while sharing is on (one per process)
_STATE: dict[str, Any] = {}


def lock_folder(cache_dir: str, root: str | None = None) -> str:
    """The folder of the lock files for Triton cache folder ``cache_dir``: under ``root`` (default the
    temporary directory), one per user and cache folder."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    digest = hashlib.sha256(os.path.realpath(os.path.expanduser(cache_dir)).encode()).hexdigest()[:16]
    return os.path.join(root or tempfile.gettempdir(), f"pipecheck-compiles-{uid}", digest)


def specialization_key(src: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """A key equal for two calls of ``triton.compiler.compile`` that compile the same kernel the same way
    (the source's own hash with its signature and constants, the target, the options), or None where
    ``src`` is neither an ``ASTSource`` nor an IR file's path.

    Two different compiles with one key would only wait for one another, and one compile keyed two ways
    would only be compiled twice, as without the lock: the key needs to be stable, not exact."""
    try:
        if isinstance(src, str):
            source = "path:" + os.path.realpath(src)
        else:
            source = "ast:" + str(src.hash())
        target = kwargs.get("target", args[0] if args else None)
        options = kwargs.get("options", args[1] if len(args) > 1 else None)
        text = json.dumps([source, repr(target), options], sort_keys=True, default=repr)
    except Exception:
        return None
    return hashlib.sha256(text.encode()).hexdigest()


class CompileLock:
    """The lock of one bucket of a cache folder's kernels, taken for one compile.

    ``with CompileLock(folder, key):`` waits until no other open file holds the bucket's lock (up to
    ``wait_limit`` seconds by ``clock``, polling every ``poll`` seconds with ``sleep``), then holds it; after
    the wait limit, or where the lock file cannot be made, it goes on without it (:attr:`held` says which).
    """

    def __init__(self, folder: str, key: str, *, wait_limit: float = WAIT_LIMIT, poll: float = _POLL,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = os.path.join(folder, f"{int(key[:8], 16) % BUCKETS:04d}.lock")
        self.wait_limit, self.poll, self.clock, self.sleep = wait_limit, poll, clock, sleep
        self.held = False
        self.waited = 0.0
        self._fd: int | None = None

    def __enter__(self) -> CompileLock:
        import fcntl

        try:
            folder = os.path.dirname(self.path)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not _own(folder) or not _own(os.path.dirname(folder)):
                return self  # made by another user, who could hold every lock: compile as if alone
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError:
            return self  # no lock to be had here: compile as if alone
        started = self.clock()
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
                break
            except BlockingIOError:  # another open file holds it: its compile is under way
                self.waited = self.clock() - started
                if self.waited >= self.wait_limit:
                    break  # a holder that never lets go: compile anyway
                self.sleep(self.poll)
            except OSError:
                break  # a file system without such locks: compile as if alone
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if self.held:
            import fcntl

            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            self.held = False
        os.close(fd)


def _own(path: str) -> bool:
    """Whether ``path`` belongs to this process's user (where the platform has users)."""
    if not hasattr(os, "getuid"):
        return True
    return os.stat(path).st_uid == os.getuid()


def _cache_dir() -> str:
    """The Triton cache folder this process compiles into (read at each compile: a test may change it)."""
    try:
        from triton import knobs

        found = knobs.cache.dir
        if isinstance(found, str) and found:
            return found
    except Exception:
        pass
    return os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")


def share_compiles(root: str | None = None, lock: Callable[[str, str], CompileLock] = CompileLock) -> bool:
    """Wrap ``triton.compiler.compile`` so that each kernel is compiled once among the processes that share
    this process's Triton cache (lock folders under ``root``, default the temporary directory; ``lock`` makes
    the lock of a folder and key), until :func:`stop_sharing`. Returns whether this call put the wrapper in
    place (False: no Triton, or in place already)."""
    if _STATE:
        return False
    try:
        import triton.compiler as compiler
    except Exception:
        return False
    original = getattr(compiler, "compile", None)
    if original is None:
        return False

    def compile(src: Any, *args: Any, **kwargs: Any) -> Any:
        if _STATE.get("wrapper") is not compile:  # sharing stopped: a binder kept this reference
            return original(src, *args, **kwargs)
        key = specialization_key(src, args, kwargs)
        if key is None:
            return original(src, *args, **kwargs)
        with lock(lock_folder(_cache_dir(), root), key):
            return original(src, *args, **kwargs)

    compile.__wrapped__ = original  # type: ignore[attr-defined]
    compiler.compile = compile
    _STATE.update(wrapper=compile, original=original, module=compiler)
    return True


def stop_sharing() -> None:
    """Undo :func:`share_compiles`: ``triton.compiler.compile`` is Triton's own again, unless something
    wrapped it after pipecheck (then the wrapper stays in the chain and compiles straight through)."""
    if not _STATE:
        return
    module, wrapper, original = _STATE["module"], _STATE["wrapper"], _STATE["original"]
    _STATE.clear()
    if getattr(module, "compile", None) is wrapper:
        module.compile = original


def sharing() -> bool:
    """Whether :func:`share_compiles` is in place in this process."""
    return bool(_STATE)
