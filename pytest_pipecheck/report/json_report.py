"""Machine-readable results: ``--pipecheck-json PATH``.

Schema (version 1)::

    {
      "schema": "pytest-pipecheck/results", "version": 1,
      "created": "2026-11-22T02:00:00+00:00", "seed": 1234,
      "tier": {"tier": "gpu", "reason": "", "device": {...} | null, "backends": {...}},
      "totals": {"pass": 10, "fail": 1, "caught": 2, "skip": 3, "error": 0},
      "results": [{"nodeid": ..., "kernel": ..., "check": ..., "verdict": ..., "expected": false,
                   "summary": ..., "details": {...}}]

"caught" counts failures the test provoked on purpose (``expected`` true: a mutant caught by its
check); "fail" counts only the others.
    }

The file is written atomically (temporary file in the same directory, then renamed), so a crash
never leaves a half-written report where a previous one was.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Iterable
from typing import Any

from .._atomic import atomic_write_text
from ..device import TierInfo
from ..results import CheckResult

SCHEMA = "pytest-pipecheck/results"
VERSION = 1

__all__ = ["SCHEMA", "VERSION", "build", "write", "write_atomic"]


def build(results: Iterable[CheckResult], tier: TierInfo, seed: int) -> dict[str, Any]:
    """The JSON document for ``results``."""
    results = list(results)
    from .terminal import STATUSES, status

    totals = dict.fromkeys(STATUSES, 0)
    for r in results:
        totals[status(r)] += 1
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "tier": {
            "tier": tier.tier,
            "reason": tier.reason,
            "device": dataclasses.asdict(tier.device) if tier.device else None,
            "backends": dict(tier.backends),
        },
        "totals": totals,
        "results": [r.to_json() for r in results],
    }


def write_atomic(path: str, text: str, what: str = "report") -> None:
    """Write ``text`` to ``path`` atomically, as a regular file; raises OSError naming the path.

    A symlink, FIFO, device node or directory at ``path`` is an error
    (:class:`~pytest_pipecheck._atomic.UnsafePathError`), never replaced or written through.
    """
    atomic_write_text(path, text, what)


def write(path: str, results: Iterable[CheckResult], tier: TierInfo, seed: int) -> None:
    """Write the JSON report to ``path``."""
    write_atomic(path, json.dumps(build(results, tier, seed), indent=2, sort_keys=True, default=str) + "\n")
