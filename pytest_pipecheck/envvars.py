"""pipecheck's environment variables: every one the package reads, declared once in :data:`VARIABLES`.

A variable is validated like an option: :func:`check` runs at the top of every pipecheck process's
``pytest_configure``, so a value pipecheck does not know (``PIPECHECK_SANITIZER_OVERLAP=sometimes``) or an
empty one (an unset shell variable) is a usage error that names the variable and what it accepts, never a
meaning nobody asked for. The reading sites call :func:`value`, which decodes the same way.

A tool's variable (``PIPECHECK_NVCC``, ...) names a file: it is taken as written where the tool is looked up
(:mod:`pytest_pipecheck.toolkit`), and a value naming no executable file is "not found" with the variable
named, never replaced by another copy; only an empty value is refused here.

Standard library only: :mod:`.plugin` imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .results import PipecheckError

__all__ = ["VARIABLES", "EnvError", "Variable", "check", "value"]


class EnvError(PipecheckError):
    """An environment variable pipecheck reads has a value it does not accept; the message names both."""


class _Invalid(Exception):
    """Raised by a decoder; the caller adds the variable and its value."""


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _bool(raw: str) -> bool:
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _Invalid


def _overlap(raw: str) -> str:
    """``1``, ``0`` or ``trail``; the boolean words of the options are the same as ``1`` and ``0``."""
    low = raw.lower()
    if low == "trail":
        return "trail"
    return "1" if _bool(low) else "0"


def _fake_timer(raw: str) -> bool:
    if raw.lower() != "return":
        raise _Invalid
    return True


@dataclass(frozen=True)
class Variable:
    """One environment variable: what it accepts and what it means."""

    name: str
    #: the accepted values, for the error message and the reference
    accepts: str
    #: the stripped, non-empty value to what pipecheck uses; None: a path, taken as written where it is used
    decode: Callable[[str], Any] | None
    #: what :func:`value` returns when the variable is not set
    unset: Any
    help: str
    #: for pipecheck's own tests, not for users
    test_seam: bool = False


_BOOL = "1 or 0 (also true/false, yes/no, on/off)"
_TOOLS = (("nvcc", "NVCC"), ("ptxas", "PTXAS"), ("cuobjdump", "CUOBJDUMP"), ("nvdisasm", "NVDISASM"),
          ("cu++filt", "CUXXFILT"), ("compute-sanitizer", "COMPUTE_SANITIZER"))

VARIABLES: tuple[Variable, ...] = (
    Variable("PIPECHECK_SANITIZER_OVERLAP", "1, 0 or trail (1 and 0 also as true/false, yes/no, on/off)",
             _overlap, "1",
             "1: the sanitizer children run beside the tests, each test's reports held until its verdicts are in; "
             "0: the children run to their end before the first test; trail: beside the tests, each test run "
             "once a child has ended it"),
    Variable("PIPECHECK_SANITIZER_XML", _BOOL, _bool, True,
             "1: read compute-sanitizer's findings from its XML report; 0: from its text output only"),
    Variable("PIPECHECK_NO_GPU", _BOOL, _bool, False,
             "1: use no GPU, as on a machine without one (the CPU tier under tier auto; tier gpu is then an error)"),
    *(Variable(f"PIPECHECK_{env}", "the path of an executable file", None, None,
               f"the {tool} to run, taken as written: a path naming no executable file means {tool} is not "
               "found (the reason names the variable), never another copy")
      for tool, env in _TOOLS),
    Variable("PIPECHECK_CANARY_DRYRUN", _BOOL, _bool, False,
             "1: a sanitizer child launches no canary kernel and leaves the memory pools on (pipecheck's fake "
             "compute-sanitizer sets it for its children)", test_seam=True),
    Variable("PIPECHECK_TEST_FAKE_TIMER", "return", _fake_timer, False,
             "return: compare mode's two processes take the number the timed callable returns as its time in "
             "microseconds, on any tier, instead of timing it on a GPU", test_seam=True),
)

_BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}


def _decode(var: Variable, raw: str) -> Any:
    stripped = raw.strip()
    if not stripped:
        raise EnvError(f"{var.name} is set but empty in the environment (an unset variable?): set it to "
                       f"{var.accepts}, or unset it")
    if var.decode is None:
        return raw
    try:
        return var.decode(stripped)
    except _Invalid:
        raise EnvError(f"{var.name}={raw} in the environment is not a value it accepts: it must be "
                       f"{var.accepts}") from None


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The decoded value of the variable ``name`` (its ``unset`` value when it is not set).

    Raises :class:`EnvError` for a value it does not accept."""
    var = _BY_NAME[name]
    env = os.environ if environ is None else environ
    raw = env.get(name)
    return var.unset if raw is None else _decode(var, raw)


def check(environ: Mapping[str, str] | None = None) -> None:
    """Every variable of :data:`VARIABLES` that is set, decoded; the first bad one raises :class:`EnvError`."""
    env = os.environ if environ is None else environ
    for var in VARIABLES:
        if var.name in env:
            _decode(var, env[var.name])
