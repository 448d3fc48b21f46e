"""The one builder of every command line pipecheck prints for a person to paste ("reproduce: ...").

A printed line must give back, through a POSIX shell, exactly the argument vector that reruns what failed:
every argument is quoted with :func:`shlex.quote`, so that a node id such as ``test_x[it's]`` parses and one
such as ``test_x[$(rm -rf ~)]`` stays a string instead of becoming a command when pasted. A test's line
(:func:`rerun_argv`) names ``--pipecheck`` and the run seed, and takes the run's own options that change what
runs (tier, checks, sanitizer tools, ``-p``, ``-o``: :func:`pytest_pipecheck.children.reproduce_line` gives
them); a sanitizer child's line is the child's own command (:mod:`.sanitizer.runner`,
:mod:`.sanitizer.consan`), with the directory it ran in and the variables it ran with.

Standard library only: the reports import it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

__all__ = ["rerun_argv", "shell_line"]


def rerun_argv(nodeid: str, seed: int | str | None, options: Sequence[str] = ()) -> list[str]:
    """``pytest NODEID --pipecheck --pipecheck-seed=SEED OPTIONS...``: the arguments that rerun one test as the
    run ran it. ``options`` must not repeat ``--pipecheck`` or the seed."""
    argv = ["pytest", nodeid, "--pipecheck"]
    if seed is not None:
        argv.append(f"--pipecheck-seed={seed}")
    return [*argv, *options]


def shell_line(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
               fresh_dirs: Sequence[str] = ()) -> str:
    """``argv`` as one shell command line, every argument quoted.

    ``env``: variables the command runs with (``env K=V ... argv``); ``fresh_dirs``: variables set to a new
    empty directory (``K="$(mktemp -d)"``, the one expansion a printed line makes: ConSan's child needs a
    Triton cache of its own). ``cwd``: the directory the command must run in, entered in a subshell
    (``(cd DIR && ...)``) so that pasting the line leaves the shell where it was."""
    assignments = [shlex.quote(f"{k}={v}") for k, v in (env or {}).items()]
    assignments += [f'{shlex.quote(k)}="$(mktemp -d)"' for k in fresh_dirs]
    line = shlex.join(argv)
    if assignments:
        line = f"env {' '.join(assignments)} {line}"
    return f"(cd {shlex.quote(cwd)} && {line})" if cwd is not None else line
