"""``--pipecheck-compare=REV``: time each perf check's kernel as of REV and as of the working tree, in turns.

A stored baseline compares with a time taken on another day; any change of the GPU's driver or of a
framework version turns it into a skip until someone re-records. Compare mode needs no stored time: in
the same job, on the same GPU, it times the kernel as of a git revision REV (typically the merge base with
``origin/main``) and as of the working tree, one sample each in turn, and gates on the paired ratios
(:mod:`.paired`).

**REV's code.** At start-up the process the user started resolves REV (``git rev-parse``) and writes REV's
tree with ``git archive`` into a temporary directory (nothing in the repository changes: no worktree is
registered, no index or ref is touched), removed when the run ends. Every child pipecheck starts gets the
tree's path (:data:`pytest_pipecheck.children.COMPARE_TREE`; pytest-xdist workers through their
``workerinput``), so it is made once per run. A copy of pipecheck itself inside REV's tree (the repository
is pipecheck's own) is left out: the harness is the head's, so both processes speak one protocol.
``git archive`` leaves submodules out, so each submodule REV records is archived into the tree at the commit
REV records for it (from its checkout, else the superproject's ``modules/`` directory), nested ones too; a
submodule whose commit is not available here (or whose files the head has without a repository) is a gap of
the tree, and while there is one every compared check is an error that names it: REV's tree is not REV's.

**REV's process.** At the first compared check, a second pytest process is started in REV's tree through
:func:`pytest_pipecheck.children.command`, with the role ``compare`` (:class:`RevProcess`): the run's own
options, the ini file and rootdir mapped into REV's tree, its working directory there, and ``PYTHONPATH``
led by REV's counterparts of this process's import paths inside the repository, so that it imports the
code under test from REV's tree. It collects the test files of this run that exist at REV and then runs
the tests it is told to, one at a time (:class:`RevChild`), each with its fixtures set up and torn down
on its own (the order of the head's requests is not known ahead). In it every check but perf is
recorded as skipped without running: only its times count.

**What REV's process imports** (:class:`ForeignImports`). It inherits ``PYTHONPATH`` and the interpreter's
path entries, so a module REV's tree lacks (untracked at the head, build output, a submodule) would be
imported from the head's checkout and the head's code timed as REV's. At each ``arrive`` and after the
warm-up REV's process lists the modules it imported from under the head's checkout outside REV's tree (the
head's pytest_pipecheck and the interpreter's own directories excepted); any makes the check an error that
names them.

**The lockstep protocol** (JSON lines over a Unix socket; the parent speaks first and waits at most
``compare_timeout`` seconds for every answer):

1. at its first ``check_perf`` in test T the parent sends ``run T``; REV's process runs T up to its own
   ``check_perf`` and says ``arrive T case``;
2. the same case: ``pair``; another case: ``pass`` (REV's check is skipped and its test goes on) and the
   parent waits on; REV's test ending (``done``) without the case: the check is *new at REV* when that test
   passed there, and an error when it failed, was skipped or xfailed (it may have stopped before the case);
3. ``warm``: REV warms its kernel up and probes it, then the head does, and the head keeps the GPU busy
   for ``settle_s``;
4. ``sample`` n times: pair i is timed base then head for even i, head then base for odd i (A B B A ...),
   so that a linear drift within a pair cancels over two pairs; each side times one sample with
   :class:`pytest_pipecheck.perf.timing.Sampler` and waits for it before the other starts, so the GPU
   runs one of them at a time;
5. ``end``: REV's check returns and its test goes on; the parent waits until it reaches its next check
   (held back, answered when the head gets there) or ends (``done``), so REV's process is idle whenever the
   head runs anything of its own. ``quit`` at the end of the run.

A REV process that crashes (end of file on the socket) or does not answer in time (stopped, its process
group killed) makes the check an error that says so, as does a REV kernel that raises while timed, or a
REV test that called the case earlier than the head did (the calls are paired in the order both tests
make them); a later check starts a fresh process (three failures in a run and no more are started).
*New at REV* (a skip, the stored baseline deciding where there is one) is only what REV does not have: a test
file REV's commit lacks, a test id REV's collection lacks, a case REV's passing test never called (or called
with ``samples=``). A REV that could not be timed is an error with the reason: its test file is in REV's
commit but not in the tree (``export-ignore``), collecting it failed or was skipped there (REV cannot import
its kernel), or its test stopped before the case.

**The test seam.** Timing needs a GPU. With ``PIPECHECK_TEST_FAKE_TIMER=return`` in the environment
(for pipecheck's own tests, never for a real run) both processes take, instead of a device time, the
number the timed callable returns (microseconds), on any tier: the protocol, the pairing and the gate run
exactly as on the GPU, and no GPU code is touched. Without it, on the CPU tier, compare mode skips each
check with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from .. import children, envvars
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from .stats import Samples, StatsError, compare

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from ..checks.context import CheckContext
    from .baseline import EnvKey, Lookup

__all__ = [
    "FAKE_TIMER_ENV",
    "CompareError",
    "ComparePlugin",
    "NewAtRev",
    "Paired",
    "RevChild",
    "Revision",
    "active",
    "check",
    "configure",
    "resolve",
    "session_of",
]

#: the test seam: ``return`` makes both processes time a sample as the number the callable returns (us)
FAKE_TIMER_ENV = "PIPECHECK_TEST_FAKE_TIMER"
_MAX_FAILURES = 3  # REV processes that crashed or hung in one run before no more are started
_START_S = 120.0  # at least this long for REV's process to start and collect (a large suite collects slowly)
_TAIL = 3000  # characters of REV's output quoted in an error
_SESSION = pytest.StashKey["ComparePlugin"]()
_INFO = "revision.json"  # next to the tree: REV as given and the commit it resolved to


class CompareError(PipecheckError):
    """Compare mode cannot go on: REV does not resolve, its tree cannot be made, or its process failed."""


def fake_timer() -> bool:
    """Whether the test seam is on (``PIPECHECK_TEST_FAKE_TIMER=return``)."""
    return bool(envvars.value(FAKE_TIMER_ENV))


# --------------------------------------------------------------------------- REV and its tree


@dataclass(frozen=True)
class Revision:
    """REV as given, the commit it names, and the repository's top directory."""

    rev: str
    sha: str
    toplevel: str

    @property
    def label(self) -> str:
        short = self.sha[:10]
        return self.rev if self.rev.startswith(short) or self.sha.startswith(self.rev) else f"{self.rev} ({short})"


def _git(args: list[str], cwd: str, timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)


def _said(proc: subprocess.CompletedProcess[bytes]) -> str:
    text = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip()
    return text.splitlines()[-1] if text else f"exit status {proc.returncode}"


def resolve(rootdir: str, rev: str) -> Revision:
    """REV as a commit of the repository that holds ``rootdir``; :class:`CompareError` says what is wrong."""
    if shutil.which("git") is None:
        raise CompareError("git is not on PATH: compare mode reads REV's tree with git")
    try:
        top = _git(["rev-parse", "--show-toplevel"], rootdir)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompareError(f"cannot run git in {rootdir}: {exc}") from None
    if top.returncode != 0:
        raise CompareError(f"the rootdir {rootdir} is not inside a git repository ({_said(top)})")
    toplevel = top.stdout.decode().strip()
    if rev.startswith("-"):
        raise CompareError(f"{rev!r} is not a revision")
    found = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], toplevel)
    if found.returncode != 0:
        shallow = _git(["rev-parse", "--is-shallow-repository"], toplevel).stdout.decode().strip() == "true"
        hint = ("; the clone is shallow: fetch the history REV needs (git fetch --unshallow, or a deeper "
                "--depth)") if shallow else ""
        raise CompareError(f"{rev!r} does not name a commit in {toplevel}{hint}")
    return Revision(rev, found.stdout.decode().strip(), toplevel)


def _safe_members(tar: tarfile.TarFile, dest: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members that stay inside ``dest`` (git writes none other; this is the check that says so)."""
    root = os.path.realpath(dest)
    for member in tar.getmembers():
        target = os.path.realpath(os.path.join(dest, member.name))
        if not (target == root or target.startswith(root + os.sep)) or member.isdev():
            raise CompareError(f"git archive wrote a member outside the tree: {member.name!r}")
        yield member


def _archive_into(git: list[str], sha: str, prefix: str, tree: str, tmp: str, where: str) -> None:
    """``git archive`` of ``sha`` (in the repository ``git`` names: ``-C DIR`` or ``--git-dir=DIR``), its
    members under ``prefix``, extracted into ``tree``."""
    archive = os.path.join(tmp, "part.tar")
    with open(archive, "wb") as fh:
        args = ["git", *git, "archive", "--format=tar", *([f"--prefix={prefix}"] if prefix else []), sha]
        proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.PIPE, timeout=600)
    if proc.returncode != 0:
        raise CompareError(f"git archive {sha[:10]} failed in {where}: "
                           f"{(proc.stderr or b'').decode(errors='replace').strip()}")
    with tarfile.open(archive) as tar:
        members = list(_safe_members(tar, tree))
        tar.extractall(tree, members=members)
    os.unlink(archive)


def _gitlinks(git: list[str], sha: str) -> list[tuple[str, str]]:
    """The submodules a commit records: (path, commit) of every gitlink in its tree."""
    proc = subprocess.run(["git", *git, "ls-tree", "-r", "-z", sha], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120)
    if proc.returncode != 0:
        raise CompareError(f"git ls-tree {sha[:10]} failed: {_said(proc)}")
    links = []
    for entry in proc.stdout.split(b"\0"):
        head, _, path = entry.partition(b"\t")
        parts = head.split()
        if len(parts) == 3 and parts[1] == b"commit":
            links.append((path.decode(errors="surrogateescape"), parts[2].decode()))
    return links


def _submodule_repo(git: list[str], work: str | None, sha: str, path: str) -> tuple[list[str], str | None] | None:
    """Where the submodule at ``path`` of the superproject (``git``, checked out at ``work`` or not) keeps its
    objects: its checkout in the working tree, else the superproject's ``modules/<name>``; None where neither."""
    if work is not None:
        sub = os.path.join(work, path)
        top = subprocess.run(["git", "-C", sub, "rev-parse", "--show-toplevel"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120) if os.path.isdir(sub) else None
        if top is not None and top.returncode == 0 and os.path.realpath(top.stdout.decode().strip()) == \
                os.path.realpath(sub):
            return ["-C", sub], sub
    names = subprocess.run(["git", *git, "config", "--blob", f"{sha}:.gitmodules", "--get-regexp",
                            r"^submodule\..*\.path$"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    for line in names.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        if value == path:
            name = key[len("submodule."):-len(".path")]
            found = subprocess.run(["git", *git, "rev-parse", "--path-format=absolute", "--git-path",
                                    f"modules/{name}"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            gitdir = found.stdout.decode().strip()
            if found.returncode == 0 and os.path.isdir(gitdir):
                return [f"--git-dir={gitdir}"], None
    return None


def _add_submodules(git: list[str], work: str | None, sha: str, prefix: str, tree: str, tmp: str,
                    depth: int = 0) -> dict[str, str]:
    """Extract every submodule ``sha`` records, at the commit it records, into ``tree`` (``git archive``
    leaves submodules out), nested ones too. Returns what could not be: {path in the tree: why}.

    A submodule the working tree has no files of either (never initialised) is left out on both sides
    alike, so it is no gap; one whose repository is here but lacks REV's commit, or whose files the head
    has without a repository to read REV's from, is a gap: REV's tree is then not REV's.
    """
    gaps: dict[str, str] = {}
    if depth > 8:
        return {prefix.rstrip("/"): "submodules nested deeper than 8 levels"}
    for path, commit in _gitlinks(git, sha):
        shown = f"{prefix}{path}"
        repo = _submodule_repo(git, work, sha, path)
        head_files = work is not None and os.path.isdir(os.path.join(work, path)) and bool(
            os.listdir(os.path.join(work, path)))
        if repo is None:
            if head_files:
                gaps[shown] = (f"the submodule {shown}: the head has its files but no repository of it is here to "
                               f"read REV's commit {commit[:10]} from")
            continue
        sub_git, sub_work = repo
        has = subprocess.run(["git", *sub_git, "cat-file", "-e", f"{commit}^{{commit}}"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120)
        if has.returncode != 0:
            gaps[shown] = (f"the submodule {shown}: REV records its commit {commit[:10]}, which is not in its local "
                           f"repository (fetch it there: git -C {shown} fetch, or git submodule update --init)")
            continue
        _archive_into(sub_git, commit, f"{shown}/", tree, tmp, f"the submodule {shown}")
        gaps.update(_add_submodules(sub_git, sub_work, commit, f"{shown}/", tree, tmp, depth + 1))
    return gaps


def export_tree(revision: Revision) -> str:
    """Write REV's tree into a new temporary directory; returns the tree's path (``<tmp>/tree``).

    ``git archive`` reads the object store only: the repository's worktrees, index and refs are left as
    they are. Submodules, which an archive leaves out, are archived each at the commit REV records for it
    (:func:`_add_submodules`); those that cannot be are the tree's gaps (:func:`tree_gaps`). A copy of the
    running pytest_pipecheck package inside the tree is removed (the harness is the head's). Raises
    :class:`CompareError` when git cannot write the tree.
    """
    tmp = tempfile.mkdtemp(prefix="pipecheck-compare-")
    tree = os.path.join(tmp, "tree")
    os.mkdir(tree)
    try:
        top = ["-C", revision.toplevel]
        _archive_into(top, revision.sha, "", tree, tmp, revision.toplevel)
        gaps = _add_submodules(top, revision.toplevel, revision.sha, "", tree, tmp)
        _drop_own_package(revision.toplevel, tree)
        with open(os.path.join(tmp, _INFO), "w", encoding="utf-8") as fh:
            json.dump({"rev": revision.rev, "sha": revision.sha, "toplevel": revision.toplevel, "gaps": gaps}, fh)
    except (OSError, subprocess.TimeoutExpired, tarfile.TarError, CompareError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, CompareError):
            raise
        raise CompareError(f"cannot write REV's tree into {tmp}: {exc}") from None
    return tree


def _drop_own_package(toplevel: str, tree: str) -> None:
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../pytest_pipecheck
    rel = os.path.relpath(own, toplevel)
    if not rel.startswith(os.pardir) and not os.path.isabs(rel):
        shutil.rmtree(os.path.join(tree, rel), ignore_errors=True)


def read_tree_info(tree: str) -> Revision:
    """The revision a tree made by :func:`export_tree` holds (for a child handed the tree)."""
    try:
        with open(os.path.join(os.path.dirname(tree), _INFO), encoding="utf-8") as fh:
            data = json.load(fh)
        return Revision(str(data["rev"]), str(data["sha"]), str(data["toplevel"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompareError(f"the tree {tree} handed to this process is not one compare mode made: {exc}") from None


def tree_gaps(tree: str) -> dict[str, str]:
    """What REV's tree lacks of REV (submodules that could not be archived): {path: why}; empty when whole."""
    try:
        with open(os.path.join(os.path.dirname(tree), _INFO), encoding="utf-8") as fh:
            gaps = json.load(fh).get("gaps") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in gaps.items()} if isinstance(gaps, dict) else {}


@dataclass(frozen=True)
class Relocation:
    """Maps a path of the working tree to its counterpart in REV's tree (paths outside stay as they are)."""

    head: str
    rev: str

    def __call__(self, path: str) -> str:
        full = os.path.abspath(path)
        rel = os.path.relpath(full, self.head)
        if rel == os.curdir:
            return self.rev
        if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
            return path
        return os.path.join(self.rev, rel)

    def inside(self, path: str) -> bool:
        """Whether ``path`` lies in the working tree (so that it has a counterpart in REV's)."""
        rel = os.path.relpath(os.path.abspath(path), self.head)
        return not (rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel))


# --------------------------------------------------------------------------- the wire


class ChannelClosed(CompareError):
    """The other side closed the socket (its process ended)."""


class ChannelTimeout(CompareError):
    """No message within the time allowed."""


class Channel:
    """JSON lines over a connected socket, each read bounded by a timeout."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            raise ChannelClosed(f"cannot send {message.get('op')!r}: {exc}") from None

    def recv(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelTimeout(f"no answer within {timeout:g} s")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not chunk:
                raise ChannelClosed("end of file")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise CompareError(f"a garbled message: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise CompareError(f"a garbled message: {line[:200]!r}")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# --------------------------------------------------------------------------- samplers


class FakeSampler:
    """The test seam's sampler: a sample is the number the callable returns (us). Touches no device."""

    def __init__(self, fn: Callable[..., Any], *, n_inputs: int | None = None, **_ignored: Any) -> None:
        self.fn = fn
        self.n_inputs = n_inputs
        self.calls = 0
        self.anchor_call = None
        self.anchor_def = None
        self.settle_s = 0.0

    def settle(self, seconds: float) -> int:
        self.settle_s += seconds
        return 0

    def arm(self) -> None:
        pass

    def one(self) -> tuple[float, float | None]:
        value = self.fn(self.calls % self.n_inputs) if self.n_inputs else self.fn()
        self.calls += 1
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise CompareError(f"{FAKE_TIMER_ENV}=return: the timed callable must return its time in us (a number "
                               f"> 0), it returned {value!r}")
        return float(value), None

    def meta(self, requested: int) -> dict[str, Any]:
        return {"mode": "fake", "timer": f"{FAKE_TIMER_ENV}=return", "requested_samples": requested,
                "settle_s": self.settle_s}

    def samples(self, times: list[float], anchor_times: list[float] | None, requested: int) -> Samples:
        return Samples(tuple(times), self.meta(requested))


def make_sampler(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """A :class:`.timing.Sampler` of ``fn``, or the seam's :class:`FakeSampler` when it is on."""
    if fake_timer():
        return FakeSampler(fn, **kwargs)
    from .timing import Sampler

    return Sampler(fn, **kwargs)


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Paired:
    """Both series of one compared check: sample i of each timed together."""

    head: Samples
    base: Samples


@dataclass(frozen=True)
class NewAtRev:
    """The check has nothing to pair with at REV, and why."""

    reason: str


# --------------------------------------------------------------------------- REV's process, the parent's side


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"signal {-code}, {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


class RevProcess:
    """REV's pytest process, started in REV's tree, followed over its socket."""

    def __init__(self, config: pytest.Config, revision: Revision, tree: str, files: list[str],
                 timeout: float) -> None:
        self.revision = revision
        self.collected: set[str] = set()
        self.errors: dict[str, str] = {}
        self.skipped: dict[str, str] = {}  # files (or directories) REV's process skipped collecting, and why
        self.current: str | None = None  # the test REV's process runs now
        self.passed: dict[str, list[str]] = {}  # test -> cases REV called that were not paired
        self.ended: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.pending: dict[str, Any] | None = None  # REV's arrival at its next check, not answered yet
        # beside the tree (removed with it at the end of the run, even when this process is killed first),
        # unless that makes the socket's path too long for AF_UNIX (about 100 bytes)
        beside = os.path.dirname(tree)
        short = beside if len(beside) < 80 else ("/tmp" if os.path.isdir("/tmp") else None)
        self.dir = tempfile.mkdtemp(prefix="pcc-", dir=short)
        self.log_path = os.path.join(self.dir, "rev-output.log")
        path = os.path.join(self.dir, "s")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.channel: Channel | None = None
        head_top = revision.toplevel
        reloc = Relocation(head_top, tree)
        cwd = reloc(str(config.invocation_params.dir))
        if not os.path.isdir(cwd):
            cwd = reloc(str(config.rootpath))
        cwd = cwd if os.path.isdir(cwd) else tree
        from ..state import RUN_SEED

        cmd = children.command(config, config.stash[RUN_SEED], children.compare(path), files,
                               relocate=lambda p: reloc(p) if os.path.exists(reloc(p)) else p)
        env = dict(os.environ)
        paths = [reloc(p) for p in sys.path if p and reloc.inside(p)]
        paths = list(dict.fromkeys([*paths, tree]))
        env["PYTHONPATH"] = os.pathsep.join([*paths, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        self._log = open(self.log_path, "w+b")
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                start_new_session=True)
        except OSError as exc:
            self.close()
            raise CompareError(f"could not start REV's process ({cmd[0]}): {exc}") from None
        self._accept(timeout)

    def output_tail(self) -> str:
        try:
            self._log.flush()
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - _TAIL))
                return fh.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def _failed(self, what: str, closed: bool = False) -> CompareError:
        """The process failed while ``what``: stop it and say how it ended, with the end of its output.
        ``closed``: its end of the socket closed, so it is ending (given a moment to be reaped)."""
        code = self.proc.poll() if self.proc is not None else None
        if code is None and closed and self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=10)
        if code is None:
            self.kill()
            how = "it did not answer and was stopped"
        else:
            how = f"it ended ({_signal_name(code)})"
        tail = self.output_tail()
        self.close()
        quoted = "\n    ".join(tail.splitlines()[-25:]) if tail else "(no output)"
        return CompareError(f"REV's process failed while {what}: {how}\n  REV's output ends:\n    {quoted}")

    def _accept(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.listener.settimeout(0.2)
        while True:
            try:
                conn, _ = self.listener.accept()
                break
            except TimeoutError:
                if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                    raise self._failed(f"starting in REV's tree (collecting; {timeout:g} s allowed)") from None
        self.channel = Channel(conn)
        ready = self.recv(timeout, "collecting REV's tests")
        if ready.get("op") != "ready":
            raise self._failed(f"collecting REV's tests (it said {ready.get('op')!r}, not 'ready')")
        self.collected = set(ready.get("collected") or [])
        self.errors = {str(k): str(v) for k, v in (ready.get("errors") or {}).items()}
        self.skipped = {str(k): str(v) for k, v in (ready.get("skipped") or {}).items()}

    def send(self, message: dict[str, Any], what: str) -> None:
        assert self.channel is not None
        try:
            self.channel.send(message)
        except ChannelClosed:
            raise self._failed(what, closed=True) from None

    def recv(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.channel is not None
        try:
            message = self.channel.recv(timeout)
        except ChannelTimeout:
            raise self._failed(f"{what} ({timeout:g} s allowed, compare_timeout)") from None
        except ChannelClosed:
            raise self._failed(what, closed=True) from None
        if message.get("op") == "done":
            test = str(message.get("nodeid"))
            self.ended.add(test)
            self.outcomes[test] = str(message.get("outcome", "ended"))
            if self.current == test:
                self.current = None
        return message

    def next_message(self, timeout: float, what: str) -> dict[str, Any]:
        """The arrival held back by :meth:`hold`, else the next message."""
        if self.pending is not None:
            message, self.pending = self.pending, None
            return message
        return self.recv(timeout, what)

    def hold(self, timeout: float, what: str) -> None:
        """Wait until REV's test reaches its next check (held back, unanswered) or ends: whenever the head
        runs anything of its own, REV's process is idle, so it never shares the GPU with the head's timings."""
        if self.current is not None and self.pending is None:
            message = self.recv(timeout, what)
            if message.get("op") == "arrive":
                self.pending = message

    def finish_current(self, timeout: float) -> None:
        """Let the test REV's process runs end: every check it reaches now is not paired."""
        while self.current is not None:
            test = self.current
            message = self.next_message(timeout, f"finishing {test}")
            if message.get("op") == "arrive":
                self.passed.setdefault(test, []).append(str(message.get("case")))
                self.send({"op": "pass", "why": "the head's test made no more perf checks"}, f"finishing {test}")

    def start_test(self, nodeid: str, timeout: float) -> None:
        if self.current == nodeid or nodeid in self.ended:
            return
        self.finish_current(timeout)
        self.send({"op": "run", "nodeid": nodeid}, f"asked to run {nodeid}")
        self.current = nodeid

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def close(self) -> None:
        """Ask the process to quit, stop it if it does not, and remove its socket and log."""
        if self.channel is not None and self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(CompareError):
                self.channel.send({"op": "quit"})
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        else:
            self.kill()
        if self.channel is not None:
            self.channel.close()
        with contextlib.suppress(OSError):
            self.listener.close()
        with contextlib.suppress(OSError):
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.channel is not None


# --------------------------------------------------------------------------- the parent's plugin


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
        _ACTIVE.append(self)
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
        if self in _ACTIVE:
            _ACTIVE.remove(self)
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


_ACTIVE: list[ComparePlugin] = []  # this process's sessions, innermost last (pytester runs sessions inside one)


def active() -> ComparePlugin | None:
    """The compare mode of the session running now in this process, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


# --------------------------------------------------------------------------- the check, in compare mode


def _stored_alongside(ctx: CheckContext, found: Lookup | None, head: Samples) -> dict[str, Any]:
    """What the stored baseline says of the head's samples, reported beside the paired gate's verdict."""
    if found is None:
        return {"status": "off", "verdict": "skip", "summary": "baselines are off (baseline_dir is none)"}
    if found.samples is None:
        return {"status": "none", "verdict": "skip", "summary": found.reason}
    try:
        result = compare(found.samples, head, threshold=ctx.config.perf_threshold, alpha=ctx.config.perf_alpha,
                         ci=True, seed=ctx.seed, anchor_mode=ctx.config.perf_anchor_mode,
                         clock_tolerance=ctx.config.perf_clock_tolerance)
    except StatsError as exc:
        return {"status": "none", "verdict": "skip", "summary": f"not comparable: {exc}"}
    return {**result.to_json(), "status": "compared", "verdict": "fail" if result.regressed else "pass",
            "summary": result.describe(), "baseline_file": found.path}


def check(ctx: CheckContext, session: ComparePlugin, fn: Callable[..., Any] | None, *,
                    flops_f: float | None, bytes_f: float | None, case_id: str, hot_cache: bool, graph: bool,
                    dtype: str, kernel: str | None, benchmark: Any, env: EnvKey | Mapping[str, Any] | None,
                    anchor: str | None, timing_kw: dict[str, Any]) -> CheckResult | NewAtRev:
    """One check in compare mode: the paired gate decides, the stored baseline is reported alongside.

    Returns the recorded result, or :class:`.compare.NewAtRev` when REV has nothing to pair with (the caller
    then goes on as without compare mode). Raises :class:`PipecheckFailure` on a regression against REV and
    :class:`PipecheckError` when the pairing failed (REV's process crashed or hung, REV's kernel raised, the
    calls came in another order), REV could not be timed (the module's "new at REV"), or the ties left the
    pairs undecided (:attr:`.paired.PairedComparison.inconclusive`), recorded as an error.
    """
    __tracebackhide__ = True
    from . import timing
    from .baseline import BaselineError, BaselineStore, EnvKey
    from .paired import paired_compare
    from .record import _baseline_dir, _feed_benchmark, _skip, environment_key

    nodeid = ctx.nodeid
    rev = session.revision
    info: dict[str, Any] = {"rev": rev.rev, "sha": rev.sha}
    fake = fake_timer()
    blocked = (None if fake else f"timing needs a CUDA GPU: {ctx.tier.reason}" if not ctx.tier.has_gpu
               else ctx.tier.timing_blocked or None)
    if blocked or session.tree is None:
        reason = f"perf not compared with {rev.label} (--pipecheck-compare): {blocked or 'no tree of REV was made'}"
        return _skip(ctx, reason, benchmark, kernel, case_id,
                     details={"decided_by": "compare", "compare": {**info, "status": "skipped", "reason": reason}})
    assert fn is not None
    key = env if isinstance(env, EnvKey) else EnvKey(dict(env)) if env is not None else environment_key(ctx)
    directory, where = _baseline_dir(ctx)
    found: Lookup | None = None
    if directory is not None:
        try:
            found = BaselineStore(directory, where).lookup(key, nodeid, case_id)
        except BaselineError as exc:
            ctx.record(CheckResult("perf", Verdict.ERROR, str(exc), kernel=kernel,
                                  details={"case": case_id, "env": dict(key.values)}))
            raise
    # The pairing cancels the clock; an anchor is timed only for a stored baseline that has one (like for like).
    use_anchor = None
    if not fake and found is not None and found.samples is not None and found.samples.anchored:
        use_anchor = timing.Anchor.from_definition(dict(found.samples.anchor or {}))
    settle_s = float(timing_kw.get("settle_s", timing.DEFAULT_SETTLE_S))
    n_samples = int(timing_kw.get("n_samples", timing.DEFAULT_SAMPLES))
    if n_samples < 2:
        raise PipecheckError(f"check_perf: n_samples={n_samples} must be >= 2")
    anchor_dtype = dtype if dtype in ("bf16", "fp16") else "bf16"

    def head() -> Any:
        return make_sampler(fn, warmup_s=float(timing_kw.get("warmup_s", 0.2)), hot_cache=hot_cache,
                            graph=graph, n_inputs=timing_kw.get("n_inputs"), reps=timing_kw.get("reps"),
                            anchor=use_anchor, anchor_dtype=anchor_dtype, settle_s=settle_s)

    try:
        got = session.pair(ctx, case_id, head, n_samples=n_samples,
                           max_time_s=float(timing_kw.get("max_time_s", 30.0)), settle_s=settle_s,
                           timeout=ctx.config.compare_timeout)
    except CompareError as exc:
        message = f"perf not compared with {rev.label}: {exc}"
        ctx.record(CheckResult("perf", Verdict.ERROR, message.split("\n", 1)[0], kernel=kernel,
                               details={"case": case_id, "decided_by": "compare",
                                        "compare": {**info, "status": "error", "reason": str(exc)}}))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}") from None
    if isinstance(got, NewAtRev):
        return got
    try:
        paired = paired_compare(got.base, got.head, threshold=ctx.config.compare_threshold,
                                alpha=ctx.config.perf_alpha)
    except StatsError as exc:
        message = f"perf not compared with {rev.label}: the pairs cannot be decided: {exc}"
        ctx.record(CheckResult("perf", Verdict.ERROR, message, kernel=kernel,
                               details={"case": case_id, "decided_by": "compare",
                                        "compare": {**info, "status": "error", "reason": str(exc)}}))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}") from None
    head_samples = got.head
    summary = paired.describe(rev.label)
    stored = _stored_alongside(ctx, found, head_samples)
    details: dict[str, Any] = {
        "case": case_id,
        "decided_by": "compare",
        "median_us": head_samples.median,
        "q1_us": head_samples.q1,
        "q3_us": head_samples.q3,
        "n": head_samples.n,
        "timing": dict(head_samples.meta),
        "env": dict(key.values),
        "threshold": ctx.config.compare_threshold,
        "alpha": ctx.config.perf_alpha,
        "anchor": {"requested": anchor, "kind": None if use_anchor is None else use_anchor.kind,
                   "reason": "compare mode: the pairing with REV cancels the clock" if use_anchor is None
                   else "compare mode: the stored baseline's anchor, for the comparison reported alongside"},
        "baseline_median_us": paired.base_median_us,
        "candidate_median_us": paired.head_median_us,
        "ratio": paired.ratio,
        "change": paired.change,
        "p_value": paired.p_value,
        "ci_low": paired.ci_low,
        "ci_high": paired.ci_high,
        "regressed": paired.regressed,
        "significant": paired.significant,
        "compare": {**info, "status": "compared", "reason": "", **paired.to_json(),
                    "decision": paired.decision, "base_timing": dict(got.base.meta),
                    "summary": summary},
        "stored": stored,
    }
    throughput = []
    if flops_f is not None:
        details["tflops"] = flops_f / (head_samples.median * 1e-6) / 1e12
        throughput.append(f"{details['tflops']:.1f} TFLOP/s")
    if bytes_f is not None:
        details["gbps"] = bytes_f / (head_samples.median * 1e-6) / 1e9
        throughput.append(f"{details['gbps']:.0f} GB/s")
    if benchmark is not None:
        _feed_benchmark(benchmark, head_samples, {"pipecheck_case": case_id, "pipecheck_unit": "device time (events)",
                                                  **{k: v for k, v in details.items() if k in ("tflops", "gbps")}})
    extra = f"; {', '.join(throughput)}" if throughput else ""
    alongside = f"; stored baseline ({stored['verdict']}, not gated): {stored['summary']}"
    if paired.regressed:
        record = ctx.record(CheckResult("perf", Verdict.FAIL, f"regression against {rev.label}: {summary}{extra}"
                                        f"{alongside}", kernel=kernel, details=details))
        raise PipecheckFailure(
            f"perf regression against {rev.label} in {nodeid} [case {case_id}]: {summary}{extra}\n"
            f"  gate (--pipecheck-compare): the median of the per-pair ratios head/REV, timed in turns on one GPU, "
            f"slower by more than {ctx.config.compare_threshold * 100:g}%, with the one-sided sign test's "
            f"p < {ctx.config.perf_alpha:g} or its 95% interval wholly above the threshold ({paired.n_pairs} pairs; "
            f"a tied pair counts as not slower)\n"
            f"  REV: {rev.rev} = {rev.sha}\n"
            f"  stored baseline, reported only (compare mode decides): {stored['summary']}",
            record,
        )
    if paired.inconclusive:
        # a median above the threshold the ties left no way to confirm: neither a regression nor a pass
        details["compare"]["reason"] = paired.inconclusive
        message = f"perf not decided against {rev.label}: {summary}: {paired.inconclusive}"
        ctx.record(CheckResult("perf", Verdict.ERROR, f"{message}{extra}{alongside}", kernel=kernel, details=details))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}")
    return ctx.record(CheckResult("perf", Verdict.PASS, f"{summary}{extra}{alongside}", kernel=kernel,
                                  details=details))


# --------------------------------------------------------------------------- what REV's process imports


class ForeignImports:
    """Finds the modules REV's process imported from the head's checkout outside REV's tree.

    REV's process inherits ``PYTHONPATH`` and the interpreter's path entries (a ``.pth`` of an editable
    install, a build directory), so a module REV's tree lacks (a file untracked at the head, build output,
    a submodule that could not be archived) is imported from the head's checkout instead of failing; its
    times would be the head's code's. Files under the head's checkout count unless they lie in REV's tree,
    in the head's pytest_pipecheck (the harness both processes share by design) or in the interpreter's own
    directories (a virtual environment inside the checkout).
    """

    def __init__(self, toplevel: str, tree: str) -> None:
        import site
        import sysconfig

        self.head = os.path.realpath(toplevel)
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the harness: .../pytest_pipecheck
        dirs = [tree, own, sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()]
        with contextlib.suppress(AttributeError):  # site's functions are missing under some embedders
            dirs += [*site.getsitepackages(), site.getusersitepackages()]
        self.allowed = tuple(dict.fromkeys(os.path.realpath(d) for d in dirs if d))
        self.seen: dict[str, str | None] = {}  # module name -> its file when foreign, None when not

    @staticmethod
    def _under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def scan(self) -> dict[str, str]:
        """{module: file} of every foreign module imported so far (cumulative: a module stays imported)."""
        for name, module in list(sys.modules.items()):
            if name in self.seen:
                continue
            file = getattr(module, "__file__", None)
            path = os.path.realpath(file) if isinstance(file, str) else ""
            foreign = bool(path) and self._under(path, self.head) and not any(
                self._under(path, root) for root in self.allowed)
            self.seen[name] = path if foreign else None
        return {name: path for name, path in self.seen.items() if path is not None}


_GUARD: ForeignImports | None = None  # REV's process: its import guard (one per process)


def _foreign_now() -> dict[str, str]:
    return _GUARD.scan() if _GUARD is not None else {}


def _foreign(found: Any, revision: Revision) -> str:
    """The error of a check whose REV process imported the head's code (``found``: {module: file})."""
    items = sorted(dict(found).items()) if isinstance(found, dict) else []
    shown = ", ".join(f"{name} ({os.path.relpath(str(path), revision.toplevel)})" for name, path in items[:5])
    more = f" and {len(items) - 5} more" if len(items) > 5 else ""
    return (f"REV's process imported {shown}{more} from the head's checkout {revision.toplevel}, outside REV's tree: "
            f"REV's tree has no such module at {revision.sha[:10]} (untracked at the head, build output, a submodule, "
            "or a path on PYTHONPATH into the checkout), so REV's times would be the head's code's")


# --------------------------------------------------------------------------- REV's process, its own side

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
        from ..state import item_nodeid

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


# --------------------------------------------------------------------------- start-up


def _where(config: pytest.Config, rev: str, sources: dict[str, str]) -> str:
    from ..options import ini_file

    if sources.get("compare") == "command line":
        return f"`--pipecheck-compare={rev}` from the command line"
    return f"`pipecheck_compare = {rev}` from the {ini_file(config)}"


def configure(config: pytest.Config, role: children.Role, rev: str, sources: dict[str, str],
              needs_tree: bool) -> None:
    """Start-up of compare mode in a process that runs tests or starts those that do.

    REV's process registers :class:`RevChild`. Elsewhere REV is resolved and, when checks will be timed
    (``needs_tree``: a GPU, or the test seam), REV's tree is written, unless a parent handed it over
    (``--pipecheck-compare-tree``, or an xdist worker's ``workerinput``). Anything wrong is a usage error
    naming the setting and where it came from.
    """
    if role.compare:
        config.pluginmanager.register(RevChild(config, role), "pipecheck-compare-rev")
        return
    given = config.getoption("pipecheck_compare_tree", default=None)
    worker = getattr(config, "workerinput", None)
    if not given and worker:
        given = worker.get("pipecheck_compare_tree")
    try:
        if given:
            revision = read_tree_info(str(given))
            tree: str | None = str(given)
            owns = False
        else:
            revision = resolve(str(config.rootpath), rev)
            tree = export_tree(revision) if needs_tree and not config.option.collectonly else None
            owns = tree is not None
    except CompareError as exc:
        raise pytest.UsageError(f"pipecheck: {_where(config, rev, sources)}: {exc} (compare mode: "
                                "--pipecheck-compare / pipecheck_compare)") from None
    if tree:
        config.stash[children.COMPARE_TREE] = tree
    plugin = ComparePlugin(config, revision, tree, owns)
    config.stash[_SESSION] = plugin
    config.pluginmanager.register(plugin, "pipecheck-compare")

