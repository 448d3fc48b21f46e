"""Child pytest processes: this process's role, decoded once, and the one builder of every child's command.

pipecheck starts pytest processes of its own. Each has one role (:class:`Role`), given by internal options
on its command line and read once, at the top of ``pytest_configure`` (:func:`decode`); nothing else reads
those options or the environment to find out:

* ``none``: a run the user started, or a pytest-xdist worker of one;
* ``sanitizer``: a child under compute-sanitizer ``tool`` (or Triton's ConSan), started by
  :mod:`.sanitizer.runner`. ``scope`` says what it runs of each test (``launch``: the kernel launches only;
  ``test``: the whole test); with ``canary`` it runs the tool's canary kernel after its tests;
* ``relay``: a fresh process that runs tests for a parent that cannot (:mod:`.containment`): after the
  parent's CUDA context died (``after="fault"``), or in place of a parent that a crashing test must not
  take down (``after="crash"``). Its reports go to ``relay_file``, which the parent replays. Before it times a
  kernel it asks the parent for the GPU alone (``gpu_gate``: :class:`.gpu_lease.RelayGpuGate`), since the
  parent's sanitizer children and the other xdist workers on its GPU run on;
* ``compare``: the process of ``--pipecheck-compare``, started in a tree of the revision REV
  (:mod:`.perf.compare`): it runs the tests its parent names, one at a time, and times each perf check's
  kernel in turns with the parent over the socket ``socket``. Its verdicts are nobody's: only its times
  count.

:func:`command` makes every child's command line. Each carries the run's own options (:func:`own_options`:
what the user and the suite's conftest files asked for, ``-p``, ``-o``, ``-W``, ``--runxfail``, the ini file
and the rootdir), so that a test runs in a child under the options it runs under here, and the tree of REV
that ``--pipecheck-compare`` made for the run (:data:`COMPARE_TREE`), so that it is made once per run. A relay
child runs in the directory pytest was started in (:func:`run_dir`, node ids from :func:`from_run_dir`), so that
its tests and the run's relative paths see what they see here; :func:`reproduce_line` is a test's rerun line,
from the same options.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

__all__ = ["COMPARE_TREE", "Role", "add_child_options", "command", "decode", "own_options"]

#: set for the test code of a sanitizer child (to the tool): a test may launch a kernel that must only run
#: under the tool (a deliberate hang). pipecheck itself reads the decoded :class:`Role`, never this.
CHILD_ENV = "PIPECHECK_CHILD"

_CHILD = "--pipecheck-child"
_SCOPE = "--pipecheck-child-scope"
_CANARY = "--pipecheck-child-canary"
_RELAY = "--pipecheck-relay"
_RELAY_AFTER = "--pipecheck-relay-after"
_RELAY_GPU = "--pipecheck-relay-gpu-gate"
_RELAY_SHARED = "--pipecheck-relay-gpu-shared-by"
_COMPARE_SOCKET = "--pipecheck-compare-socket"
_COMPARE_TREE = "--pipecheck-compare-tree"
SCOPES = ("launch", "test")
RELAY_REASONS = ("fault", "crash")
#: the internal options that take a value (dest, option): :func:`decode` refuses an empty one
_VALUED = (("pipecheck_child", _CHILD), ("pipecheck_relay", _RELAY), ("pipecheck_relay_gpu_gate", _RELAY_GPU),
           ("pipecheck_compare_socket", _COMPARE_SOCKET), ("pipecheck_compare_tree", _COMPARE_TREE))


@dataclass(frozen=True)
class Role:
    """What this pytest process is for (see the module's docstring)."""

    kind: str = "none"  # "none", "sanitizer", "relay" or "compare"
    tool: str | None = None
    scope: str = "test"
    canary: bool = False
    relay_file: str | None = None
    after: str = "fault"
    #: relay: where the parent grants the GPU alone for a timing (gpu_lease.RelayGpuGate), and the pytest-xdist
    #: workers that share the parent's GPU (the reason a timing is skipped where no grant can come)
    gpu_gate: str | None = None
    gpu_shared_by: tuple[str, ...] = ()
    socket: str | None = None  # compare: where the parent listens

    @property
    def compare(self) -> bool:
        """REV's process of ``--pipecheck-compare``: it times perf checks for its parent."""
        return self.kind == "compare"

    @property
    def sanitizer(self) -> bool:
        return self.kind == "sanitizer"

    @property
    def relay(self) -> bool:
        return self.kind == "relay"

    @property
    def child(self) -> bool:
        """Started by pipecheck (a sanitizer, relay or compare child): its parent writes the reports."""
        return self.kind != "none"

    @property
    def launch_only(self) -> bool:
        """A sanitizer child of scope ``launch``: correctness checks launch their kernel once and judge nothing."""
        return self.kind == "sanitizer" and self.scope == "launch"

    def args(self) -> list[str]:
        """The internal options that give a child this role."""
        if self.kind == "sanitizer":
            out = [f"{_CHILD}={self.tool}", f"{_SCOPE}={self.scope}"]
            return [*out, _CANARY] if self.canary else out
        if self.kind == "relay":
            out = [f"{_RELAY}={self.relay_file}", f"{_RELAY_AFTER}={self.after}"]
            if self.gpu_gate:
                out.append(f"{_RELAY_GPU}={self.gpu_gate}")
            if self.gpu_shared_by:
                out.append(f"{_RELAY_SHARED}={','.join(self.gpu_shared_by)}")
            return out
        if self.kind == "compare":
            return [f"{_COMPARE_SOCKET}={self.socket}"]
        return []


NONE = Role()


def sanitizer(tool: str, scope: str = "test", canary: bool = False) -> Role:
    return Role("sanitizer", tool=tool, scope=scope, canary=canary)


def relay(relay_file: str, after: str = "fault", gpu_gate: str | None = None,
          gpu_shared_by: tuple[str, ...] = ()) -> Role:
    return Role("relay", relay_file=relay_file, after=after, gpu_gate=gpu_gate, gpu_shared_by=tuple(gpu_shared_by))


def compare(socket: str) -> Role:
    return Role("compare", socket=socket)


#: the tree of REV that ``--pipecheck-compare`` made for this run (made by the process the user started, or
#: given to this one with ``--pipecheck-compare-tree``); every child started through :func:`command` gets it
COMPARE_TREE = pytest.StashKey[str]()


def add_child_options(group: pytest.OptionGroup) -> None:
    """The internal options of :class:`Role` (pipecheck passes them to the children it starts)."""
    group.addoption(_CHILD, action="store", default=None, dest="pipecheck_child", metavar="TOOL",
                    help="(internal) this pytest is a sanitizer child running under TOOL")
    group.addoption(_SCOPE, action="store", default="test", dest="pipecheck_child_scope", choices=SCOPES,
                    help="(internal) what a sanitizer child runs of each test")
    group.addoption(_CANARY, action="store_true", default=False, dest="pipecheck_child_canary",
                    help="(internal) a sanitizer child runs the tool's canary kernel after its tests")
    group.addoption(_RELAY, action="store", default=None, dest="pipecheck_relay", metavar="FILE",
                    help="(internal) this pytest runs tests for a parent that cannot; its reports go to FILE")
    group.addoption(_RELAY_AFTER, action="store", default="fault", dest="pipecheck_relay_after",
                    choices=RELAY_REASONS, help="(internal) why a relay child runs: a kernel fault or a crash")
    group.addoption(_RELAY_GPU, action="store", default=None, dest="pipecheck_relay_gpu_gate", metavar="PREFIX",
                    help="(internal) a relay child asks its parent for the GPU alone before a timing; the grant "
                         "is the file PREFIX-N")
    group.addoption(_RELAY_SHARED, action="store", default="", dest="pipecheck_relay_gpu_shared_by",
                    metavar="WORKERS", help="(internal) the pytest-xdist workers that share the relay parent's GPU")
    group.addoption(_COMPARE_SOCKET, action="store", default=None, dest="pipecheck_compare_socket", metavar="PATH",
                    help="(internal) this pytest is REV's process of --pipecheck-compare; its parent listens at PATH")
    group.addoption(_COMPARE_TREE, action="store", default=None, dest="pipecheck_compare_tree", metavar="DIR",
                    help="(internal) the tree of REV that this run's --pipecheck-compare made")


def decode(config: pytest.Config) -> Role:
    """This process's role, from its internal options (once per process, at the top of configure)."""
    for dest, option in _VALUED:
        value = config.getoption(dest, default=None)
        if value is not None and not str(value).strip():
            # an empty role option would silently make this process a run the user started
            raise pytest.UsageError(f"pipecheck: {option}= is empty: it is an internal option, given by pipecheck "
                                    "to the processes it starts, with a value")
    tool = config.getoption("pipecheck_child", default=None)
    relay_file = config.getoption("pipecheck_relay", default=None)
    socket = config.getoption("pipecheck_compare_socket", default=None)
    if tool:
        from .config import SANITIZER_CHOICES

        if str(tool) not in SANITIZER_CHOICES:
            raise pytest.UsageError(f"pipecheck: {_CHILD}={tool} names no sanitizer pipecheck runs (internal option; "
                                    f"one of {', '.join(SANITIZER_CHOICES)})")
    if sum(bool(x) for x in (tool, relay_file, socket)) > 1:
        raise pytest.UsageError(f"pipecheck: {_CHILD}, {_RELAY} and {_COMPARE_SOCKET} are internal options of "
                                "different children; a process is one of them")
    if socket:
        return compare(str(socket))
    if tool:
        return sanitizer(str(tool), str(config.getoption("pipecheck_child_scope", default="test") or "test"),
                         bool(config.getoption("pipecheck_child_canary", default=False)))
    if relay_file:
        shared = str(config.getoption("pipecheck_relay_gpu_shared_by", default="") or "")
        return relay(str(relay_file), str(config.getoption("pipecheck_relay_after", default="fault") or "fault"),
                     config.getoption("pipecheck_relay_gpu_gate", default=None) or None,
                     tuple(w for w in shared.split(",") if w))
    return NONE


# --------------------------------------------------------------------------- the run's own options

#: options of this run that no child takes, because the parent keeps doing what they ask: reports and
#: output it writes (a child's would overwrite them), the selection it made (a child gets node ids), the
#: processes it runs (a child runs its tests in order, in one process), and pipecheck's roles and seed
#: (each child gets its own role and the parent's seed)
_NOT_PASSED = frozenset({
    # reports and output
    "--pipecheck-json", "--pipecheck-html", "--pipecheck-markdown", "--junitxml", "--junit-xml", "--junit-prefix", "--resultlog",
    "--html", "--self-contained-html", "--json-report", "--json-report-file", "--report-log", "--log-file",
    "--durations", "--durations-min", "--store-durations", "--durations-path", "--splits", "--group",
    "--splitting-algorithm", "--clean-durations", "-v", "--verbose", "-q", "--quiet", "--verbosity", "-r",
    "--tb", "--color", "--code-highlight", "-s", "--capture", "--show-capture", "-l", "--showlocals",
    "--benchmark-json", "--benchmark-save", "--benchmark-autosave", "--benchmark-histogram",
    "--benchmark-save-data", "--benchmark-cprofile", "--debug", "--pastebin",
    # what runs: selection, stopping, caching, collection-only modes
    "-k", "-m", "--deselect", "--ignore", "--ignore-glob", "--lf", "--last-failed", "--ff", "--failed-first",
    "--nf", "--new-first", "--lfnf", "--last-failed-no-failures", "--sw", "--stepwise", "--sw-skip",
    "--stepwise-skip", "--sw-reset", "--stepwise-reset", "-x", "--exitfirst", "--maxfail", "--cache-clear",
    "--cache-show", "--co", "--collect-only", "--collectonly", "--setup-only", "--setup-plan", "--setup-show",
    "--fixtures", "--funcargs", "--fixtures-per-test", "--markers", "-h", "--help", "-V", "--version",
    "--pdb", "--pdbcls", "--trace", "--basetemp", "--keep-duplicates", "--doctest-modules",
    # processes
    "-n", "--numprocesses", "--dist", "--maxprocesses", "--max-worker-restart", "--tx", "--rsyncdir",
    "--rsyncignore", "--looponfail", "-f", "-d", "--distload", "--boxed", "--forked",
    "--pipecheck-xdist-shares", "--pipecheck-xdist-order",
    # pipecheck's roles and seed, and the run's tree of REV (each child gets its own)
    _CHILD, _SCOPE, _CANARY, _RELAY, _RELAY_AFTER, _RELAY_GPU, _RELAY_SHARED, _COMPARE_SOCKET, _COMPARE_TREE,
    "--pipecheck-seed",
})


def _option_table(config: pytest.Config) -> dict[str, argparse.Action]:
    """Every option string this run's parser knows (pytest's, every plugin's, every conftest's), with its
    argparse action: whether it takes a value is the action's ``nargs``."""
    parser = getattr(config, "_parser", None)
    argparser = getattr(parser, "optparser", None)  # pytest 9
    if argparser is None and parser is not None and hasattr(parser, "_getparser"):
        argparser = parser._getparser()  # pytest 7 and 8
    return dict(getattr(argparser, "_option_string_actions", {}) or {})


def _takes_value(action: argparse.Action | None) -> bool:
    return action is not None and action.nargs != 0


def own_options(config: pytest.Config, args: Sequence[str] | None = None,
                leave_out: frozenset[str] = frozenset()) -> list[str]:
    """The options of this run that a child passes on: every option on its command line except those of
    :data:`_NOT_PASSED` (and of ``leave_out``), with their values; positional arguments (paths, node ids) are
    left out, as the child gets the node ids it runs. Options from the ini file's ``addopts`` and
    ``PYTEST_ADDOPTS`` reach the child the same way they reached this process (it reads the same ini file and
    environment)."""
    table = _option_table(config)
    args = [str(a) for a in (config.invocation_params.args if args is None else args)]
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break  # what follows is positional
        if not arg.startswith("-") or arg == "-":
            i += 1  # a path or a node id
            continue
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            names = [name]
            attached = "=" in arg
        else:
            name = arg[:2]
            attached = len(arg) > 2
            # a cluster of flags (-vx) names each of them; -pNAME and -oKEY=VALUE carry their value
            flags = not _takes_value(table.get(name)) and attached
            names = [f"-{c}" for c in arg[1:]] if flags else [name]
        takes_next = not attached and _takes_value(table.get(name))
        chunk = args[i:i + 2] if takes_next else [arg]
        if not any(n in _NOT_PASSED or n in leave_out for n in names):
            out += chunk
        i += len(chunk)
    return out


def base_command(config: pytest.Config, seed: int, *, quiet_output: bool = True,
                 relocate: Callable[[str], str] | None = None) -> list[str]:
    """``python -m pytest`` with what every child needs before its role and node ids: the parent's seed,
    its ini file and rootdir, pipecheck's plugin where plugins are not autoloaded, one process, the run's
    own options and its tree of REV. ``quiet_output=False`` keeps the child's output uncaptured (``-s``), as
    a sanitizer child needs: its marker lines and the tool's reports share one stream. ``relocate`` maps the
    ini file and rootdir to their places in another tree (REV's process of ``--pipecheck-compare``)."""
    move = relocate or (lambda path: path)
    args = [sys.executable, "-m", "pytest", *_NO_CACHE, "-q"]
    if not quiet_output:
        args.append("-s")
    args += _placed(config, move)
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-n", "0"]  # markers and relayed reports need one process running tests in order
    tree = config.stash.get(COMPARE_TREE, None)
    if tree:
        args.append(f"{_COMPARE_TREE}={tree}")
    own = own_options(config)
    return [*args, *(own if relocate is None else _relocated(own, move)), f"--pipecheck-seed={seed}"]


_NO_CACHE = ("-p", "no:cacheprovider")


def _placed(config: pytest.Config, move: Callable[[str], str]) -> list[str]:
    """What places a child where this run is: pipecheck's plugin where plugins are not autoloaded, and this
    run's ini file and rootdir (absolute, so they mean the same from any working directory)."""
    args: list[str] = []
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "pytest_pipecheck.plugin"]  # the entry point is not loaded in the child
    inipath = getattr(config, "inipath", None)
    if inipath:
        args += ["-c", move(str(inipath))]
    return [*args, f"--rootdir={move(str(config.rootpath))}"]


def run_dir(config: pytest.Config) -> str:
    """Where a child that runs this run's tests works: the directory pytest was started in, not the rootdir. A
    test there sees the working directory it sees here, and a relative path among the run's own options (``-c``,
    ``--rootdir``, ``--confcutdir``, a conftest's option) or its arguments means what it means here."""
    return str(config.invocation_params.dir)


def from_run_dir(config: pytest.Config, nodeids: Sequence[str]) -> list[str]:
    """``nodeids`` (pytest names a test by its path from the rootdir) as arguments of a pytest started in
    :func:`run_dir`, which reads a path from its working directory: ``tests/test_x.py::test_a`` becomes
    ``test_x.py::test_a`` where pytest was started in ``tests/``."""
    here = run_dir(config)
    out = []
    for nodeid in nodeids:
        path, sep, rest = nodeid.partition("::")
        try:
            rel = os.path.relpath(os.path.join(str(config.rootpath), path), here)
        except ValueError:  # another drive (Windows): the absolute path
            rel = os.path.join(str(config.rootpath), path)
        if rel.startswith("-"):
            rel = os.path.join(os.curdir, rel)  # not an option
        out.append(rel.replace(os.sep, "/") + sep + rest)
    return out


#: options a reproduce line leaves out besides those no child takes: it must not save baselines again, and it
#: names --pipecheck and the seed itself
_NOT_REPRODUCED = frozenset({"--pipecheck", "--pipecheck-baseline-save"})


def reproduce_line(config: pytest.Config, nodeid: str, seed: int) -> str:
    """The line that reruns the test ``nodeid`` as this run ran it, to be pasted where pytest was started:
    ``pytest NODEID --pipecheck --pipecheck-seed=SEED`` and the run's own options (:func:`own_options`), every
    argument shell-quoted (:func:`pytest_pipecheck.reproduce.shell_line`). In a child pipecheck started, what
    :func:`base_command` put before the parent's options is left out: the child prints its parent's line."""
    from .reproduce import rerun_argv, shell_line

    own = own_options(config, leave_out=_NOT_REPRODUCED)
    if decode(config).child:
        placed = [*_NO_CACHE, *_placed(config, lambda path: path)]
        if own[:len(placed)] == placed:
            own = own[len(placed):]
    return shell_line(rerun_argv(from_run_dir(config, [nodeid])[0], seed, own))


#: the options whose value is a path that decides where a run's tests and configuration are
_PATH_OPTIONS = ("--rootdir", "-c", "--config-file", "--confcutdir")


def _relocated(options: list[str], move: Callable[[str], str]) -> list[str]:
    """``options`` with the values of :data:`_PATH_OPTIONS` moved into another tree."""
    out: list[str] = []
    i = 0
    while i < len(options):
        arg = options[i]
        name = next((n for n in _PATH_OPTIONS if arg == n), None)
        if name is not None and i + 1 < len(options):
            out += [arg, move(options[i + 1])]
            i += 2
            continue
        for n in _PATH_OPTIONS:
            if n.startswith("--") and arg.startswith(n + "="):
                arg = f"{n}={move(arg[len(n) + 1:])}"
                break
            if n == "-c" and arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--"):
                arg = f"-c{move(arg[2:])}"
                break
        out.append(arg)
        i += 1
    return out


def command(config: pytest.Config, seed: int, role: Role, nodeids: Sequence[str], *,
            relocate: Callable[[str], str] | None = None) -> list[str]:
    """The command line of a child with ``role`` that runs ``nodeids`` (``relocate``: see :func:`base_command`)."""
    base = base_command(config, seed, quiet_output=not role.sanitizer, relocate=relocate)
    return [*base, *role.args(), *nodeids]
