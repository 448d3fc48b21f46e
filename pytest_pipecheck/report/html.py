"""``--pipecheck-html PATH``: one self-contained HTML page a reviewer can open anywhere.

The page needs no network when viewed: the CSS is inline, plots are PNGs embedded as ``data:``
URIs, there is no script. It shows, in order:

- a header: tier (GPU model, architecture, driver, SM count, or why there is no GPU), the seed,
  versions of pipecheck, Python, pytest and the backends, the run's configuration, and totals;
- for a run that did not finish, first of all, that it did not: the page written when the run starts
  says only that (a run that dies leaves it behind), an interrupted run's page names the signal;
- what did not pass (fail and error), each with its message and the command that reproduces it;
- the skipped checks with their reasons (a skip is never a pass);
- the outputs whose coverage could not look for unwritten elements (zeroed, initialized by the wrapper,
  not intercepted, inouts), with why and the tests: a weaker check than a poisoned output's;
- per kernel, a table of verdicts per test and check, coloured, followed by what the details carry:
  the occupancy plot (blocks/SM against shared memory per block for each target architecture, the
  kernel's point, its cliffs), the stage sweep (measured against cost-model predicted), the
  baseline history, and sanitizer findings with the source line each points at.

Every value from a result is escaped. Plots need matplotlib (the ``html`` extra); without it the
tables still carry every number and the page says what is missing. A plot that cannot be drawn
from odd details is replaced by its reason, never by a failed report.

The page is put together here: the parts about the whole run are :mod:`.html_overview`'s, each
kernel's section :mod:`.html_kernels`'s; the details they read, and how, are listed in :mod:`.html_details`,
and the escaping and badges they share are :mod:`.html_markup`'s.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections import Counter
from collections.abc import Iterable, Sequence

from ..config import PipecheckConfig
from ..device import TierInfo
from ..results import CheckResult, PipecheckError
from . import plots
from .html_details import _arch_points, _history_rows, _stage_rows
from .html_kernels import _kernel_sections
from .html_markup import _e
from .html_overview import _banners, _failures, _header, _skips, _state_banner, _tests_section, _unpoisoned
from .interrupt import FINISHED, INTERRUPTED, RUNNING, STATES, Interruption
from .json_report import write_atomic
from .outcomes import TestOutcomes
from .terminal import status

__all__ = ["HtmlReportError", "render", "write_html", "write_html_for_run"]


class HtmlReportError(PipecheckError, OSError):
    """The HTML report could not be written; the message names the path and why."""


_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0; color: #1f2328; background: #ffffff; }
header { background: #24292f; color: #f6f8fa; padding: 16px 28px; }
header h1 { margin: 0 0 6px 0; font-size: 22px; }
header .meta { display: flex; flex-wrap: wrap; gap: 4px 22px; font-size: 13px; }
header .meta b { color: #ffffff; }
main { padding: 8px 28px 40px 28px; max-width: 1320px; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 28px; }
h3 { margin: 18px 0 6px 0; }
table { border-collapse: collapse; margin: 6px 0 12px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; max-height: 360px; white-space: pre-wrap; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #ffffff;
         font-weight: 600; font-size: 12px; }
.badge.v-pass { background: #1a7f37; } .badge.v-fail { background: #cf222e; }
.badge.v-skip { background: #9a6700; } .badge.v-error { background: #8250df; }
.badge.v-caught { background: #0969da; } td.v-caught { background: #ddf4ff; }
.badge.v-xfailed { background: #57606a; } td.v-xfailed { background: #f6f8fa; }
td.v-pass { background: #dafbe1; } td.v-fail { background: #ffebe9; }
td.v-skip { background: #fff8c5; } td.v-error { background: #fbefff; }
td.v-none { background: #ffffff; color: #8c959f; }
.cell + .cell { border-top: 1px dashed #d0d7de; margin-top: 3px; padding-top: 3px; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 14px 0; border: 1px solid; }
.banner.warn { background: #fff8c5; border-color: #d4a72c; }
.banner.bad { background: #ffebe9; border-color: #ff8182; }
.banner.good { background: #dafbe1; border-color: #4ac26b; }
.failure { border-left: 4px solid #cf222e; padding: 4px 12px; margin: 10px 0; background: #fffafa; }
.failure.v-error { border-left-color: #8250df; }
.note { color: #57606a; font-style: italic; }
figure { margin: 8px 0 14px 0; }
figure img { max-width: 100%; border: 1px solid #d0d7de; }
figcaption { color: #57606a; font-size: 12px; }
section.kernel { margin-bottom: 30px; }
"""


def render(results: Iterable[CheckResult], tier: TierInfo, seed: int, run_config: PipecheckConfig | None = None,
           *, created: str | None = None, source_roots: Sequence[str] | None = None,
           outcomes: TestOutcomes | None = None, exitstatus: int | None = None, state: str = FINISHED,
           interrupted: Interruption | None = None) -> str:
    """The report page for ``results`` as one HTML string (no external resources).

    ``created`` overrides the timestamp (for reproducible output); ``source_roots`` are the
    directories sanitizer file names are looked up in, and the only ones a source line is embedded
    from (default: the working directory; the plugin gives the session's rootdir). ``outcomes``
    (the tests' own outcomes) and ``exitstatus`` decide the headline with the check results: the
    page says "every test and every check passed" only when both say so, and the run finished. ``state``
    (:data:`.interrupt.STATES`) and ``interrupted`` say whether it did: a run that did not finish says so
    first; the page for one still ``running`` says nothing else. Plots are drawn when matplotlib is
    importable; otherwise the page says so.
    """
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}: expected one of {', '.join(STATES)}")
    results = list(results)
    created = created or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    roots = list(source_roots) if source_roots is not None else [os.getcwd()]
    missing = plots.missing_reason() if results else None
    note = f'<div class="banner warn" id="no-matplotlib">{_e(missing)}</div>' if missing and any(
        _arch_points(r.details) or _stage_rows(r.details) or _history_rows(r.details)
        or (r.check == "perf" and "median_us" in r.details) for r in results) else ""
    if state == RUNNING:
        body = _header(results, tier, seed, run_config, created, outcomes) + "<main>" + \
            _state_banner(state, interrupted) + "</main>"
    else:
        body = (
            _header(results, tier, seed, run_config, created, outcomes)
            + "<main>"
            + _state_banner(state, interrupted)
            + _banners(results, tier, seed, outcomes, exitstatus, state)
            + note
            + _tests_section(outcomes)
            + _failures(results, seed)
            + _skips(results)
            + _unpoisoned(results)
            + _kernel_sections(results, missing, roots)
            + "</main>"
        )
    title = _title_counts(results, outcomes)
    if state == RUNNING:
        title = "run not finished"
    elif state == INTERRUPTED:
        title = f"run not finished ({interrupted.describe() if interrupted is not None else 'interrupted'}); {title}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>pipecheck report: {_e(title)}</title><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>\n")


def _title_counts(results: Sequence[CheckResult], outcomes: TestOutcomes | None = None) -> str:
    totals = Counter(status(r) for r in results)
    checks = ", ".join(f"{totals.get(v, 0)} {v}" for v in ("pass", "fail", "skip", "error"))
    if outcomes is None:
        return checks
    bad = len(outcomes.bad())
    return (f"{bad} test{'s' if bad != 1 else ''} not passed; " if bad else "") + checks


def write_html(path: str | os.PathLike[str], results: Iterable[CheckResult], tier: TierInfo, seed: int,
               run_config: PipecheckConfig | None = None, *, outcomes: TestOutcomes | None = None,
               exitstatus: int | None = None, source_roots: Sequence[str] | None = None, state: str = FINISHED,
               interrupted: Interruption | None = None) -> None:
    """Write the self-contained HTML report to ``path``, atomically.

    An empty ``results`` still writes a page, which says that no checks ran. Raises
    :class:`HtmlReportError` (an ``OSError``) naming the path when it is a directory or cannot be
    written, or names a symlink, FIFO, device or anything but a regular file; nothing is left
    half-written. ``outcomes``, ``exitstatus``, ``source_roots``, ``state`` and ``interrupted`` are passed
    to :func:`render`.
    """
    target = os.fspath(path)
    if not target.strip():
        raise HtmlReportError("cannot write the HTML report: the path is empty")
    if os.path.isdir(target):
        raise HtmlReportError(f"cannot write the HTML report to {target!r}: it is a directory; give a file "
                              "name such as report.html")
    page = render(results, tier, seed, run_config, outcomes=outcomes, exitstatus=exitstatus,
                  source_roots=source_roots, state=state, interrupted=interrupted)
    try:
        write_atomic(target, page)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise HtmlReportError(f"cannot write the HTML report to {target!r}: {reason}") from exc
    _readable(target)


def _readable(path: str) -> None:
    # the temporary file behind the atomic write is created 0600; a report is for sharing (CI
    # artifacts, a web server), so give it the mode a plain open() would have
    umask = _umask()
    try:
        os.chmod(path, 0o666 & ~umask)
    except OSError:  # the report is written; its mode is a nicety
        pass


def _umask() -> int:
    # read, not set-and-restore: os.umask() changes the whole process for a moment
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_html_for_run(path: str | os.PathLike[str], results: Iterable[CheckResult], tier: TierInfo, seed: int,
                       run_config: PipecheckConfig | None = None, *, outcomes: TestOutcomes | None = None,
                       exitstatus: int | None = None,
                       source_roots: Sequence[str] | None = None, state: str = FINISHED,
                       interrupted: Interruption | None = None) -> tuple[bool, str]:
    """Write the report at the end of a run; never raises. Returns (written, the line to show).

    The plugin calls this from ``pytest_sessionfinish``: a report that cannot be written (or a bug
    in drawing it) is one red line after the results, never a traceback that hides them; the
    plugin then makes the run's exit status non-zero.
    """
    results = list(results)
    target = os.fspath(path)
    try:
        write_html(target, results, tier, seed, run_config, outcomes=outcomes, exitstatus=exitstatus,
                   source_roots=source_roots, state=state, interrupted=interrupted)
    except HtmlReportError as exc:
        return False, f"pipecheck: {exc}"
    except Exception as exc:  # a bug in the report must not cost the run its results
        return False, f"pipecheck: could not write the HTML report to {target!r}: {type(exc).__name__}: {exc}"
    if state == RUNNING:
        return True, f"pipecheck: HTML report at {target} marked as in progress until the run ends"
    if not results:
        return True, (f"pipecheck: HTML report written to {target} (no pipecheck checks ran; "
                      "the page says so)")
    return True, f"pipecheck: HTML report written to {target} ({len(results)} check results)"
