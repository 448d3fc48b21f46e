"""The command line: a registry of subcommands, each a module with ``add_arguments`` and ``run``.

A subcommand module exposes ``add_arguments(parser: argparse.ArgumentParser) -> None`` and
``run(args: argparse.Namespace) -> int`` (and may set a one-line ``HELP``). Adding one is a line in
:data:`SUBCOMMANDS`. Modules are imported only when their subcommand runs, so ``--help`` stays fast
and a subcommand whose module is not installed says so instead of failing the others.

Bad input is one line on stderr and exit status 2; :class:`~pytest_pipecheck.results.PipecheckError`
raised by a subcommand is reported that way, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from ..results import PipecheckError

__all__ = ["SUBCOMMANDS", "UsageError", "error", "main"]

SUBCOMMANDS: dict[str, str] = {
    "occupancy": "pytest_pipecheck.cli.occupancy",
    "resources": "pytest_pipecheck.cli.resources",
    "inspect": "pytest_pipecheck.cli.inspect",
    "baseline": "pytest_pipecheck.cli.baseline",
}

_FALLBACK_HELP = {
    "occupancy": "blocks per SM, limiter and shared-memory cliffs for a kernel configuration",
    "resources": "per-kernel registers, shared memory and spills of a .cu file for each architecture",
    "inspect": "what a compiled kernel contains (SASS inspection)",
    "baseline": "list and compare stored performance baselines",
}


class UsageError(PipecheckError):
    """Bad command-line input; reported as one line with exit status 2."""


def error(message: str) -> int:
    """Write ``pipecheck: error: <message>`` to stderr; return exit status 2.

    A multi-line message (a compiler's output) becomes one error line that quotes the first
    diagnostic, followed by the full output indented, so scripts can read the first line.
    """
    first, _, rest = message.partition("\n")
    if rest:
        diag = next((ln.strip() for ln in rest.splitlines() if "error" in ln.lower()), rest.splitlines()[0])
        first = f"{first.rstrip(':')}: {diag}"
        body = "".join(f"  | {ln}\n" for ln in rest.splitlines())
        sys.stderr.write(f"pipecheck: error: {first}\n{body}")
    else:
        sys.stderr.write(f"pipecheck: error: {first}\n")
    return 2


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(SUBCOMMANDS[name])
    except ModuleNotFoundError as exc:
        if exc.name and SUBCOMMANDS[name].startswith(exc.name):
            return None
        raise


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints usage too; keep bad input to one line
        raise SystemExit(error(f"{self.prog}: {message}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; return its exit status (0 ok, 1 a check failed, 2 bad input)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _Parser(prog="pipecheck", description="pytest-pipecheck command line")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    wanted = args_list[0] if args_list and not args_list[0].startswith("-") else None
    for name in SUBCOMMANDS:
        if name == wanted:
            module = _load(name)
            if module is None:
                return error(f"subcommand {name!r} is not available in this installation "
                             f"(module {SUBCOMMANDS[name]} is missing)")
            sp = sub.add_parser(name, help=getattr(module, "HELP", _FALLBACK_HELP.get(name)),
                                description=getattr(module, "HELP", _FALLBACK_HELP.get(name)))
            sp.__class__ = _Parser
            module.add_arguments(sp)
            sp.set_defaults(_run=module.run)
        else:
            sub.add_parser(name, help=_FALLBACK_HELP.get(name, ""), add_help=False)
    if wanted is not None and wanted not in SUBCOMMANDS:
        return error(f"unknown subcommand {wanted!r}; known: {', '.join(SUBCOMMANDS)}")
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except PipecheckError as exc:
        return error(str(exc))
    except KeyboardInterrupt:
        return 130
