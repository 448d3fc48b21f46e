"""Shared by the GPU tests that run pipecheck on target files in a pytester subprocess: a conftest that
prints every check result of the inner run as one line, and the reader of those lines."""

from __future__ import annotations

DUMPER = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.when == "teardown" or not getattr(report, "pipecheck_results", None):
        return
    for r in report.pipecheck_results:
        print(f"\\nRESULT {report.nodeid} {r['check']} {r['verdict']} {r['summary']}")
'''


def results(text: str) -> dict[tuple[str, str], tuple[str, str]]:
    """{(test name, check): (verdict, summary)} from the RESULT lines of the inner run's output."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            _, nodeid, check, verdict, summary = line.split(" ", 4)
            out[(nodeid.rsplit("::", 1)[-1], check)] = (verdict, summary)
    return out
