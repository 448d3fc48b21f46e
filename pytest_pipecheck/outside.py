"""Checks from outside pipecheck: registered through the hook :func:`~pytest_pipecheck.hookspecs.
pytest_pipecheck_checks`, run by ``pipecheck.check(name, ...)``.

An :class:`OutsideCheck` says what its results are called, what it catches, which ``--pipecheck-checks``
entry selects it and what it does in a sanitizer child, as a built-in check's row of
:data:`pytest_pipecheck.contract.REGISTRY` does. Its function is called as ``run(ctx, *args, **kwargs)``
(``ctx``: the test's :class:`~pytest_pipecheck.checks.context.CheckContext`) and returns its
:class:`~pytest_pipecheck.results.CheckResult`: pipecheck records it (with the test, kernel and GPU) and
raises :class:`~pytest_pipecheck.results.PipecheckFailure` for a FAIL, so the test fails as with a built-in
check. A function that returns anything else has reached no verdict: that is recorded as an ERROR naming
the check and what it returned, never as a pass. A function that raises is an ERROR too.

A registration that cannot be used (a name a built-in check or another plugin has, a selection entry that
does not exist, a sanitizer policy that is not one of ``run``, ``skip``, ``launch``) is a
:class:`~pytest_pipecheck.results.PipecheckError` naming the plugin that registered it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .contract import CHILD_LAUNCH, CHILD_RUN, CHILD_SKIP, SELECTIONS, CheckKind, is_registered
from .results import CheckResult, PipecheckError, PipecheckFailure, Verdict

__all__ = ["OutsideCheck", "collect", "run"]

_POLICIES = (CHILD_RUN, CHILD_SKIP, CHILD_LAUNCH)


@dataclass(frozen=True)
class OutsideCheck:
    """A check a plugin or ``conftest.py`` adds (see the module's docstring).

    ``selection``: the ``--pipecheck-checks`` entry that turns it on (``coverage``, ``perf``, ...); None: it
    runs whenever pipecheck does. ``child``: in a compute-sanitizer child, ``run`` runs it as in the normal
    run (it launches nothing of its own, or its launches are to be sanitized), ``skip`` records a skip (the
    normal run judges it), ``launch`` calls ``in_child(ctx, name, *args, **kwargs)`` instead (launch the
    kernel for the tool, judge nothing)."""

    name: str
    run: Callable[..., Any]
    catches: str = ""
    selection: str | None = None
    child: str = CHILD_RUN
    in_child: Callable[..., Any] | None = None

    @property
    def kind(self) -> CheckKind:
        return CheckKind(self.name, self.selection, self.catches, child=self.child)


def _problem(check: Any) -> str | None:
    if not isinstance(check, OutsideCheck):
        return f"returned {check!r}, not an OutsideCheck"
    if not isinstance(check.name, str) or not check.name or check.name != check.name.strip():
        return f"registered a check with the name {check.name!r} (a non-empty name without surrounding spaces)"
    if is_registered(check.name) or check.name.split(":", 1)[0] in SELECTIONS:
        return f"registered the check {check.name!r}, a name pipecheck's own checks use"
    if not callable(check.run):
        return f"registered the check {check.name!r} with run={check.run!r}, which is not callable"
    if check.selection is not None and check.selection not in SELECTIONS:
        return (f"registered the check {check.name!r} with selection={check.selection!r}; it must be one of "
                f"{', '.join(SELECTIONS)}, or None (always on)")
    if check.child not in _POLICIES:
        return (f"registered the check {check.name!r} with child={check.child!r}; it must be one of "
                f"{', '.join(_POLICIES)}")
    if check.child == CHILD_LAUNCH and not callable(check.in_child):
        return f"registered the check {check.name!r} with child='launch' and no in_child to launch its kernel"
    return None


def collect(hook: Any) -> dict[str, OutsideCheck]:
    """The checks the plugins and ``conftest.py`` files behind ``hook`` (a test's ``item.ihook``) register, by
    name. Raises PipecheckError naming the plugin of a registration that cannot be used."""
    found: dict[str, tuple[OutsideCheck, str]] = {}
    for impl in reversed(hook.pytest_pipecheck_checks.get_hookimpls()):  # registration order
        where = impl.plugin_name if "conftest" not in impl.plugin_name else f"the conftest {impl.plugin_name}"
        try:
            given = impl.function()
        except Exception as exc:
            raise PipecheckError(f"pytest_pipecheck_checks of {where} raised {type(exc).__name__}: {exc}") from exc
        if given is None or isinstance(given, (str, bytes, Mapping)) or not hasattr(given, "__iter__"):
            raise PipecheckError(f"pytest_pipecheck_checks of {where} returned {given!r}, not a list of "
                                 "OutsideCheck")
        for check in given:
            problem = _problem(check)
            if problem is None and check.name in found:
                problem = f"registered the check {check.name!r}, which {found[check.name][1]} registered already"
            if problem is not None:
                raise PipecheckError(f"pytest_pipecheck_checks of {where} {problem}")
            found[check.name] = (check, where)
    return {name: check for name, (check, _) in found.items()}


def run(ctx: Any, check: OutsideCheck, *args: Any, **kwargs: Any) -> CheckResult:
    """Call the check's function and record its result: the body :func:`~pytest_pipecheck.checks.context.
    run_check` runs for an outside check."""
    __tracebackhide__ = True
    result = check.run(ctx, *args, **kwargs)
    if not isinstance(result, CheckResult):
        text = (f"the check {check.name!r} returned {type(result).__name__} {result!r:.200}, not a CheckResult: it "
                "reached no verdict")
        return ctx.record(CheckResult(check.name, Verdict.ERROR, text, details={"message": f"pipecheck: {text}"}))
    if result.check != check.name:
        import dataclasses

        result = dataclasses.replace(result, check=check.name)
    recorded = ctx.record(result)
    if recorded.verdict is Verdict.FAIL:
        raise PipecheckFailure(f"{check.name}: {recorded.summary}", recorded)
    return recorded
