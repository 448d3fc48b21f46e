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

import pytest

from ... import children
from .compared import check
from .errors import CompareError
from .outcomes import NewAtRev, Paired
from .rev_child import RevChild, rev_check
from .samplers import FAKE_TIMER_ENV, fake_timer
from .session import _SESSION, ComparePlugin, session_of
from .tree import Revision, export_tree, read_tree_info, resolve
from .wire import Channel

__all__ = [
    "FAKE_TIMER_ENV",
    "Channel",
    "CompareError",
    "ComparePlugin",
    "NewAtRev",
    "Paired",
    "RevChild",
    "Revision",
    "check",
    "configure",
    "fake_timer",
    "resolve",
    "rev_check",
    "session_of",
]


def _where(config: pytest.Config, rev: str, sources: dict[str, str]) -> str:
    from ...options import ini_file

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
