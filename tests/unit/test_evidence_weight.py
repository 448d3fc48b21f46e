"""The GPU evidence under docs/validation/ does not weigh on the repository: each run keeps its note and its
compact summaries; raw logs, per-test JSON and inner runs' outputs stay in git history (docs/validation/README.md
says how to read them). Every clone and every CI run carries this folder."""

from __future__ import annotations

import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "docs" / "validation"
#: what the whole folder may weigh
BUDGET = 1024 * 1024
#: one file's most: a summary, not a log
ONE_FILE = 64 * 1024
#: raw logs and per-test records: in history, not in the tree
RAW = ("*.log", "*.log.gz", "*logs.txt.gz", "*output*.txt", "*output*.txt.gz", "*-tests.json.gz", "timelines-*.json.gz")


def _files() -> list[Path]:
    return sorted(p for p in EVIDENCE.rglob("*") if p.is_file())


def test_the_evidence_stays_under_its_budget() -> None:
    files = _files()
    assert files, "docs/validation/ is empty: did it move?"
    total = sum(p.stat().st_size for p in files)
    assert total <= BUDGET, (f"docs/validation/ holds {total} bytes in {len(files)} files, over {BUDGET}: keep each "
                             "run's note and compact summaries, and leave raw logs in git history")
    big = [f"{p.relative_to(EVIDENCE)} ({p.stat().st_size} bytes)" for p in files if p.stat().st_size > ONE_FILE]
    assert not big, f"files over {ONE_FILE} bytes (a log, not a summary?): {big}"


def test_no_raw_log_is_committed_as_evidence() -> None:
    raw = [str(p.relative_to(EVIDENCE)) for p in _files() if any(fnmatch.fnmatch(p.name, g) for g in RAW)]
    assert not raw, f"raw logs under docs/validation/ (the note quotes what matters; the log stays in history): {raw}"
