"""The small pieces every part of the HTML report is made of: escaping (:func:`_e`: every value from a result
goes through it), the coloured badge of a verdict or status, the order verdicts and checks are listed in, the
kernel a result belongs to (the terminal summary's rule) and a byte count as the tables write it.
"""

from __future__ import annotations

import html
from typing import Any

from ..config import CHECKS
from ..results import CheckResult, Verdict

_ORDER = {"error": 0, "fail": 1, "skip": 2, "xfailed": 3, "caught": 4, "pass": 5}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _kernel_of(r: CheckResult) -> str:
    # same rule as the terminal summary: the declared kernel, else the test function's name
    if r.kernel:
        return r.kernel
    name = r.nodeid.rsplit("::", 1)[-1]
    return name.split("[", 1)[0] or "?"


def _check_order(check: str) -> tuple[int, str]:
    base = check.split(":", 1)[0]
    return (CHECKS.index(base) if base in CHECKS else len(CHECKS), check)


def _badge(verdict: Verdict | str, text: str | None = None) -> str:
    """A coloured badge for a verdict, or a status ("caught" for an expected failure)."""
    name = verdict.value if isinstance(verdict, Verdict) else verdict
    return f'<span class="badge v-{name}">{_e(text if text is not None else name)}</span>'


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    kb, rest = divmod(n, 1024)
    if rest == 0:
        return f"{kb} KB"
    return f"{n / 1024:.1f} KB"
