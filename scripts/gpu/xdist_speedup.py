"""The bundled suite under ``pytest --pipecheck`` with ``-n 0`` and with one xdist worker per GPU.

    python3 scripts/gpu/xdist_speedup.py OUTDIR [--tools racecheck,synccheck] [--paths reference_kernels]

Runs the same command twice, first without xdist, then with ``-n auto`` (pipecheck makes that one
worker per visible GPU), each writing its JSON report; measures the wall time of each; reads from the
reports which GPU ran each test (every result carries its GPU's name, index and UUID) and whether the
two runs reached the same verdicts. Both runs share a fresh pytest cache (OUTDIR-cache): the -n 0 run
leaves each test's normal-run and sanitizer seconds there, and the xdist run balances its per-GPU shares
by their sum, as a CI machine that keeps .pytest_cache between runs would. Each run compiles from empty
Triton, CuPy and pipecheck caches of its own (``--caches shared`` lets the first run warm them for the
second, which then measures compiles saved rather than GPUs added). Writes OUTDIR.md and
OUTDIR.json. Needs at least 2 GPUs for a speed-up to mean anything; with one GPU it still runs and says so.

Each run also loads this file as a pytest plugin (``-p xdist_speedup``). Every process that runs tests
(each xdist worker; the one process under -n 0) writes to OUTDIR-LABEL-workers/ how many tests it ran, on
which GPU (its ``CUDA_VISIBLE_DEVICES``), and how long it was busy: the sum over its tests of the whole
test protocol, which under xdist includes the sanitizer children a worker runs for a share before the
share's first test, and the seconds from the end of its collection to the end of its session (under -n 0
that includes the sanitizer children, which run before the first test). The report's table per worker
shows whether the whole work was balanced, not only the sanitizer seconds. The sanitizer children
themselves do not write any.

Every process that ran tests, sanitizer children included, also writes a timeline (OUTDIR-LABEL-workers/
timeline/): its start, its configure, the end of its collection and each test's protocol, in seconds since
the epoch. The report has a row per process, and the CPU of each run (``cpu_use.py``: the machine's busy
cores, CPU seconds by kind of process). Variants: ``--pytest-args`` and ``--env`` for both runs,
``--nauto-args`` and ``--workers`` for the second, ``--nauto-only`` to leave out the first, ``--tag`` to
keep their files apart.

From the timelines the report also states the serial parts of each run (Amdahl's law): the seconds from the
run's start to its first test and from its last test to its end, which do not split across GPUs, and the
best speed-up they allow. ``--bound-from REPORT.json[.gz]`` states it from a saved report, without a GPU:

    python3 scripts/gpu/xdist_speedup.py --bound-from OUTDIR.json [--gpus 2] [--target 1.8]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: where the plugin side writes one file per process that ran tests
WORKERS_ENV = "XDIST_SPEEDUP_WORKERS_DIR"


# ------------------------------------------------------------------ the plugin side (-p xdist_speedup)

class _Busy:
    """What this process ran: tests, their protocol seconds, when its collection ended."""

    def __init__(self) -> None:
        self.tests: set[str] = set()
        self.protocol_s = 0.0
        self.collected_at: float | None = None


_BUSY = _Busy()


class _Timeline:
    """When this process (any: the run, a worker, a sanitizer child) reached each stage, in seconds since the
    epoch (comparable between processes): its start (from /proc), its configure, the end of its collection,
    each test's protocol (its start and end: where its body runs, even where pipecheck logs its reports
    later)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self.tests: list[tuple[str, float, float]] = []  # each test's protocol: where its body runs


_TIMELINE = _Timeline()


def process_start(proc: Path = Path("/proc")) -> float | None:
    """This process's start in seconds since the epoch, from /proc (None where there is no /proc)."""
    from cpu_use import read_process  # this script's folder is on sys.path (PYTHONPATH in the runs)

    try:
        ticks = read_process((proc / "self" / "stat").read_text())[2]
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _role() -> str:
    child = os.environ.get("PIPECHECK_CHILD")
    if child:
        return f"child-{child}"
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_configure(config: pytest.Config) -> None:
    _TIMELINE.events.append(("configure", time.time()))


def _write_timeline() -> None:
    folder = os.environ.get(WORKERS_ENV)
    if not folder:
        return
    path = Path(folder) / "timeline"
    path.mkdir(parents=True, exist_ok=True)
    record = {"role": _role(), "pid": os.getpid(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "?"),
              "started": process_start(), "events": [*_TIMELINE.events, ("end", time.time())],
              "tests": _TIMELINE.tests}
    (path / f"{_role()}-{os.getpid()}.json").write_text(json.dumps(record))


def _recording() -> bool:
    # a sanitizer child inherits the worker's environment: only the processes pytest-xdist started count
    return bool(os.environ.get(WORKERS_ENV)) and not os.environ.get("PIPECHECK_CHILD")


def pytest_collection_finish(session: pytest.Session) -> None:
    _BUSY.collected_at = time.monotonic()
    _TIMELINE.events.append(("collected", time.time()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    t0, epoch = time.monotonic(), time.time()
    try:
        return (yield)
    finally:
        _BUSY.protocol_s += time.monotonic() - t0
        _BUSY.tests.add(item.nodeid)
        _TIMELINE.tests.append((item.nodeid, epoch, time.time()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write_timeline()
    if not _recording() or not _BUSY.tests:
        return  # the xdist controller runs no test
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    after = time.monotonic() - _BUSY.collected_at if _BUSY.collected_at is not None else None
    record = {"worker": worker, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "?"), "tests": len(_BUSY.tests),
              "busy_s": round(_BUSY.protocol_s, 2), "after_collection_s": None if after is None else round(after, 2)}
    folder = Path(os.environ[WORKERS_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{worker}.json").write_text(json.dumps(record))


def worker_balance(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The per-worker records of one run, sorted, with the tests and busy seconds per GPU and the spread of
    busy seconds between the busiest and the idlest worker."""
    rows = sorted(records, key=lambda r: str(r.get("worker")))
    tests_per_gpu: collections.Counter[str] = collections.Counter()
    busy_per_gpu: dict[str, float] = collections.defaultdict(float)
    for r in rows:
        tests_per_gpu[str(r.get("gpu"))] += int(r.get("tests") or 0)
        busy_per_gpu[str(r.get("gpu"))] += float(r.get("busy_s") or 0.0)
    busy = [float(r.get("busy_s") or 0.0) for r in rows]
    return {"workers": rows, "tests_per_gpu": dict(sorted(tests_per_gpu.items())),
            "busy_s_per_gpu": {g: round(b, 2) for g, b in sorted(busy_per_gpu.items())},
            "busy_spread_s": round(max(busy) - min(busy), 2) if busy else None}


def _read_workers(folder: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def balance_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The markdown table of each run's workers, then one line a run with its totals per GPU."""
    lines = ["| run | worker | GPU | tests | busy s | s after collection |", "|---|---|---|---|---|---|"]
    for r in runs:
        for w in r["balance"]["workers"]:
            lines.append(f"| -n {r['xdist']} | {w.get('worker')} | {w.get('gpu')} | {w.get('tests')} | "
                         f"{w.get('busy_s')} | {w.get('after_collection_s')} |")
    lines.append("")
    for r in runs:
        b = r["balance"]
        per_gpu = "; ".join(f"{g}: {n} tests, {b['busy_s_per_gpu'].get(g, 0.0)} s busy"
                            for g, n in b["tests_per_gpu"].items())
        lines.append(f"- -n {r['xdist']}: {per_gpu or 'no worker recorded'}"
                     + (f"; busiest minus idlest worker {b['busy_spread_s']} s" if b["busy_spread_s"] is not None else ""))
    return lines


def timeline_rows(records: Iterable[dict[str, Any]], t0: float) -> list[dict[str, Any]]:
    """One row a process of a run, in the order they started: seconds from ``t0`` (the run's start) to its
    start, its configure, the end of its collection, its first test's start, its last test's end and its own
    end, and its tests' own seconds summed."""
    rows = []
    for r in records:
        events = dict(r.get("events") or [])
        tests = r.get("tests") or []

        def at(t: float | None) -> float | None:
            return None if t is None else round(t - t0, 1)

        rows.append({"role": r.get("role"), "pid": r.get("pid"), "gpu": r.get("gpu"), "start": at(r.get("started")),
                     "configure": at(events.get("configure")), "collected": at(events.get("collected")),
                     "first_test": at(min((t[1] for t in tests), default=None)),
                     "last_test_end": at(max((t[2] for t in tests), default=None)), "end": at(events.get("end")),
                     "tests": len(tests), "tests_s": round(sum(t[2] - t[1] for t in tests), 1)})
    return sorted(rows, key=lambda row: (row["start"] is None, row["start"] or 0.0, str(row["role"])))


def timeline_lines(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| run | process | GPU | start | configured | collected | first test | last test ends | ends | tests | "
             "tests' s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for row in r.get("timeline") or []:
            lines.append(f"| -n {r['xdist']} | {row['role']} | {row['gpu']} | {row['start']} | {row['configure']} | "
                         f"{row['collected']} | {row['first_test']} | {row['last_test_end']} | {row['end']} | "
                         f"{row['tests']} | {row['tests_s']} |")
    return lines


def cpu_lines(runs: list[dict[str, Any]]) -> list[str]:
    """One line a run: its CPU seconds, the cores busy on average and the share of samples with 90% of them
    busy; then its CPU seconds per kind of process."""
    lines = []
    for r in runs:
        c = r.get("cpu") or {}
        lines.append(f"- -n {r['xdist']}: {c.get('cpu_s')} CPU s in {r['wall_s']} s; {c.get('busy_cores_mean')} of "
                     f"{c.get('cores')} cores busy on average (at most {c.get('busy_cores_max')}); 90% or more "
                     f"busy in {c.get('saturated_fraction')} of the samples")
        kinds = c.get("by_kind") or {}
        if kinds:
            lines.append("  - " + "; ".join(f"{k}: {v} s" for k, v in kinds.items()))
    return lines


# ------------------------------------------------------------------ the serial parts of a run (Amdahl's law)


def _num(value: object) -> float | None:
    """``value`` as a float where it is a number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _test_spans(tests: object) -> list[tuple[float, float]]:
    """The start and end of each test protocol of ``[nodeid, start, end]`` entries; malformed ones left out."""
    spans = []
    for t in tests if isinstance(tests, list) else []:
        start, end = (_num(t[1]), _num(t[2])) if isinstance(t, (list, tuple)) and len(t) >= 3 else (None, None)
        if start is not None and end is not None:
            spans.append((start, end))
    return spans


def _process_times(record: dict[str, Any]) -> dict[str, float | None]:
    """One process's start, first test start, last test end and end. It reads either the record the plugin
    writes (``started``, ``events``, ``tests`` in seconds since the epoch) or a row of ``timeline_rows`` as a
    saved report holds it (``start``, ``first_test``, ``last_test_end``, ``end`` in seconds from the run's
    start); only differences within one run are used, so either will do."""
    if "started" in record or "events" in record:
        listed = record.get("events")
        events = {str(e[0]): _num(e[1]) for e in listed if isinstance(e, (list, tuple)) and len(e) >= 2} \
            if isinstance(listed, list) else {}
        spans = _test_spans(record.get("tests"))
        return {"start": _num(record.get("started")), "collected": events.get("collected"),
                "first_test": min((s for s, _ in spans), default=None),
                "last_test_end": max((e for _, e in spans), default=None), "end": events.get("end")}
    return {key: _num(record.get(key)) for key in ("start", "collected", "first_test", "last_test_end", "end")}


def _tests_begin(times: dict[str, float | None]) -> float | None:
    """Where a process that runs tests can start on them: the end of its collection, or its first test where
    the collection's end is not recorded. Not its first test alone: a process may hold its tests back while its
    sanitizer children work (the children's start-up is then work beside it, not a serial part)."""
    if times["first_test"] is None:
        return None
    return times["collected"] if times["collected"] is not None else times["first_test"]


def _is_child(record: dict[str, Any]) -> bool:
    return str(record.get("role")).startswith("child-")


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def serial_parts(run: dict[str, Any]) -> dict[str, float | None]:
    """The serial parts of one run, in seconds: ``head_s`` from the run's start (its main process's start) to
    where the first process the suite is split across (the main process under -n 0, the workers under xdist;
    sanitizer children left out) can start on its tests (the end of its collection, else its first test), ``tail_s`` from the last such test's end to the run's end (its main
    process's start plus ``wall_s``, or that process's end where ``wall_s`` is missing), ``middle_s`` the rest
    of ``wall_s``, and ``children_startup_s`` the median over sanitizer children of the seconds from a child's
    start to its first test. A part the timeline cannot give is None."""
    timeline = run.get("timeline")
    records = [r for r in timeline if isinstance(r, dict)] if isinstance(timeline, list) else []
    mains = [_process_times(r) for r in records if r.get("role") == "main"]
    run_start = min((t for m in mains if (t := m["start"]) is not None), default=None)
    wall = _num(run.get("wall_s"))
    if wall is None and run_start is not None:
        end = max((t for m in mains if (t := m["end"]) is not None), default=None)
        wall = None if end is None else end - run_start
    run_end = None if run_start is None or wall is None else run_start + wall
    workers = [_process_times(r) for r in records if not _is_child(r)]
    first = min((t for w in workers if (t := _tests_begin(w)) is not None), default=None)
    last = max((t for w in workers if (t := w["last_test_end"]) is not None), default=None)
    head = None if run_start is None or first is None else first - run_start
    tail = None if run_end is None or last is None else run_end - last
    middle = None if wall is None or head is None or tail is None else wall - head - tail
    startups = [c["first_test"] - c["start"] for c in map(_process_times, filter(_is_child, records))
                if c["first_test"] is not None and c["start"] is not None]
    return {"wall_s": _round(wall), "head_s": _round(head), "middle_s": _round(middle), "tail_s": _round(tail),
            "children_startup_s": _round(statistics.median(startups)) if startups else None}


def wall_needed(serial_s: float, n0_serial_s: float, gpus: int, target: float) -> float | None:
    """The shortest -n 0 wall at which ``target`` is reachable on ``gpus`` GPUs, when the xdist run's serial part
    is ``serial_s``, the -n 0 run's is ``n0_serial_s`` and only the rest of the -n 0 wall splits across the GPUs:
    the least T (at least ``n0_serial_s``) with T / (serial_s + (T - n0_serial_s) / gpus) >= target. None where
    ``target`` is not below ``gpus``: no length of the suite reaches it."""
    if gpus < 1 or target >= gpus:
        return None
    return max(target * (serial_s - n0_serial_s / gpus) / (1 - target / gpus), n0_serial_s)


def speedup_bound(n0: dict[str, Any], nauto: dict[str, Any], gpus: int, target: float = 1.8) -> dict[str, Any]:
    """The best speed-up the serial parts allow: the -n 0 run's wall T0, its serial part S0 (head and tail) and
    middle M0; the xdist run's serial part S; the xdist run's wall were M0 split evenly over ``gpus`` GPUs
    (S + M0 / gpus) and T0 over it; the same with the serial part of -n 0 (S0 + M0 / gpus); the -n 0 wall that
    ``target`` needs with these serial parts (``wall_needed``). A figure the timelines cannot give is None."""
    a, b = serial_parts(n0), serial_parts(nauto)
    t0, middle = a["wall_s"], a["middle_s"]
    s0 = None if a["head_s"] is None or a["tail_s"] is None else round(a["head_s"] + a["tail_s"], 1)
    s = None if b["head_s"] is None or b["tail_s"] is None else round(b["head_s"] + b["tail_s"], 1)
    best = best_n0 = needed = None
    if t0 is not None and middle is not None and s0 is not None and s is not None and gpus >= 1:
        best, best_n0 = s + middle / gpus, s0 + middle / gpus
        needed = wall_needed(s, s0, gpus, target)
    return {"gpus": gpus, "target": target, "nauto_xdist": str(nauto.get("xdist", "auto")), "n0": a, "nauto": b,
            "n0_wall_s": t0, "n0_serial_s": s0, "n0_middle_s": middle, "nauto_serial_s": s,
            "measured_ratio": _ratio(_num(n0.get("wall_s")), _num(nauto.get("wall_s"))),
            "best_nauto_s": _round(best), "best_ratio": _ratio(t0, best),
            "best_nauto_s_n0_serial": _round(best_n0), "best_ratio_n0_serial": _ratio(t0, best_n0),
            "n0_wall_needed_s": _round(needed)}


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else round(num / den, 2)


def _cell(value: object) -> str:
    return "n/a" if value is None else str(value)


def bound_lines(bound: dict[str, Any]) -> list[str]:
    """The serial parts of both runs as a markdown table, then one sentence with the best speed-up they allow."""
    x, g, target = bound["nauto_xdist"], bound["gpus"], bound["target"]
    lines = ["Serial parts (seconds; head: from the run's start to the end of the collection of the first process "
             "the suite is split across, tail: from the last one's end to the run's end; sanitizer children left out, the last "
             "column is the median from a child's start to its first test):", "",
             "| run | wall s | head s | middle s | tail s | children's start-up s |", "|---|---|---|---|---|---|"]
    for name, parts in (("0", bound["n0"]), (x, bound["nauto"])):
        lines.append(f"| -n {name} | {_cell(parts['wall_s'])} | {_cell(parts['head_s'])} | "
                     f"{_cell(parts['middle_s'])} | {_cell(parts['tail_s'])} | {_cell(parts['children_startup_s'])} |")
    lines.append("")
    if bound["best_ratio"] is None:
        lines.append("Amdahl bound: not computable (a run lacks its wall, its main process's start or a test, "
                     "or the count of GPUs is unknown).")
        return lines
    needed = (f"{target}x needs a -n 0 wall of at least {bound['n0_wall_needed_s']} s with these serial parts"
              if bound["n0_wall_needed_s"] is not None else f"{target}x is out of reach on {g} GPUs")
    lines.append(f"Amdahl bound on {g} GPUs: with the {bound['nauto_serial_s']} s serial part of -n {x} and the "
                 f"{bound['n0_middle_s']} s middle of -n 0 split evenly, -n {x} takes at least "
                 f"{bound['best_nauto_s']} s, {bound['best_ratio']}x the -n 0 wall of {bound['n0_wall_s']} s "
                 f"(measured: {_cell(bound['measured_ratio'])}x; {bound['best_ratio_n0_serial']}x if its serial "
                 f"part were the {bound['n0_serial_s']} s of -n 0); {needed}.")
    return lines


def read_report(path: Path) -> dict[str, Any]:
    """A report this script wrote (its .json), gzip-compressed or not. Raises OSError or ValueError where it
    cannot be read or is not a JSON object."""
    raw = path.read_bytes()
    try:
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except EOFError as exc:  # a truncated gzip stream
        raise ValueError(f"truncated gzip data ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def bound_from(path: Path, gpus: int | None, target: float) -> int:
    """Prints the serial parts and the Amdahl bound of a saved report's -n 0 and xdist runs; 0, or 2 with one
    line on stderr where the report cannot be read or lacks either run. ``gpus`` None: the report's GPUs."""
    try:
        report = read_report(path)
    except (OSError, ValueError) as exc:
        print(f"xdist_speedup.py: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    runs = [r for r in report.get("runs") or [] if isinstance(r, dict)]
    n0 = next((r for r in runs if str(r.get("xdist")) == "0"), None)
    nauto = next((r for r in runs if str(r.get("xdist")) != "0"), None)
    if n0 is None or nauto is None:
        print(f"xdist_speedup.py: {path} lacks a -n 0 run and an xdist run to compare", file=sys.stderr)
        return 2
    count = gpus if gpus is not None else len(report.get("gpus") or [])
    print("\n".join(bound_lines(speedup_bound(n0, nauto, count, target))))
    return 0



# ------------------------------------------------------------------ the script


def _gpus() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


#: the compile caches a run may find warm: Triton's, CuPy's and pipecheck's own
COMPILE_CACHES = ("TRITON_CACHE_DIR", "CUPY_CACHE_DIR", "PIPECHECK_CACHE_DIR")


def compile_cache_env(label: str, out: Path, caches: str) -> dict[str, str]:
    """The compile-cache variables of one run: ``cold``, empty folders of its own (a run never finds the
    kernels another run compiled); ``shared``, none set (whatever the environment has, which the first run
    warms for the second)."""
    if caches == "shared":
        return {}
    root = out.parent / f"{out.name}-{label}-caches"
    shutil.rmtree(root, ignore_errors=True)
    return {name: str(root / name.split("_")[0].lower()) for name in COMPILE_CACHES}


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _run(label: str, xdist: str, out: Path, tools: str, paths: list[str], timeout: float,
         caches: str = "cold", extra: list[str] | None = None, extra_env: dict[str, str] | None = None
         ) -> dict[str, Any]:
    from cpu_use import CpuUse  # this script's folder is on sys.path
    report = out.parent / f"{out.name}-{label}.json"
    log = out.parent / f"{out.name}-{label}.log"
    workers = out.parent / f"{out.name}-{label}-workers"
    shutil.rmtree(workers, ignore_errors=True)
    cmd = [sys.executable, "-m", "pytest", "--pipecheck", "--pipecheck-tier=gpu", f"--pipecheck-sanitizer={tools}",
           "-o", f"cache_dir={out.parent / (out.name + '-cache')}", "-q", "-rfE", f"--pipecheck-json={report}",
           "-p", "xdist_speedup", *(extra or []), "-n", xdist, *paths]
    if xdist != "0":  # the report a reviewer opens: the run on every GPU
        cmd[-len(paths) - 2:-len(paths) - 2] = [f"--pipecheck-html={report.with_suffix('.html')}",
                                                f"--junitxml={report.with_suffix('.xml')}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{WORKERS_ENV: str(workers)}, **compile_cache_env(label, out, caches))
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parent), env.get("PYTHONPATH")) if p)
    cpu0 = _children_cpu_s()
    epoch0 = time.time()
    t0 = time.monotonic()
    with CpuUse() as use:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = None
            text = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else str(exc.stdout or "")
    wall = time.monotonic() - t0
    cpu = dict(use.summary(), cpu_s=round(_children_cpu_s() - cpu0, 1))
    log.write_text(text)
    verdicts: dict[str, str] = {}
    per_gpu: collections.Counter[str] = collections.Counter()
    tests_per_gpu: dict[str, set[str]] = collections.defaultdict(set)
    children: set[tuple[str, str, float, int]] = set()  # (gpu, tool, wall s, tests) of each sanitizer child
    if report.is_file():
        data = json.loads(report.read_text())
        for r in data.get("results", []):
            key = f"{r.get('nodeid')}::{r.get('check')}"
            verdicts[key] = str(r.get("verdict"))
            gpu = str((r.get("details") or {}).get("gpu", "?"))
            per_gpu[gpu] += 1
            tests_per_gpu[gpu].add(str(r.get("nodeid")))
            det = r.get("details") or {}
            if str(r.get("check", "")).startswith("sanitizer:") and det.get("child_wall_s") is not None:
                children.add((gpu, str(det.get("tool")), float(det["child_wall_s"]), int(det.get("child_tests") or 0)))
    tail = [ln for ln in text.splitlines() if " passed" in ln or " failed" in ln or " error" in ln][-1:]
    return {"label": label, "xdist": xdist, "command": " ".join(cmd[1:]), "exit": rc, "wall_s": round(wall, 1),
            "outcome": tail[0] if tail else "(no summary line)", "results_per_gpu": dict(per_gpu),
            "tests_per_gpu": {g: len(t) for g, t in tests_per_gpu.items()}, "verdicts": verdicts,
            "sanitizer_children": sorted(children),
            "sanitizer_child_s_per_gpu": {g: round(sum(c[2] for c in children if c[0] == g), 1)
                                          for g in {c[0] for c in children}},
            "balance": worker_balance(_read_workers(workers)), "cpu": cpu,
            "timeline": timeline_rows(_read_workers(workers / "timeline"), epoch0),
            "sanitizer_lines": [ln for ln in text.splitlines() if ln.startswith("pipecheck sanitizer:")][-12:]}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", help="where the reports go (OUT.md, OUT.json); not with --bound-from")
    ap.add_argument("--tools", default="racecheck,synccheck")
    ap.add_argument("--paths", default="reference_kernels")
    ap.add_argument("--timeout", type=float, default=400.0)
    ap.add_argument("--caches", choices=("cold", "shared"), default="cold",
                    help="cold: each run starts from empty compile caches of its own (default); shared: the "
                         "environment's, which the -n 0 run warms for the -n auto run")
    ap.add_argument("--pytest-args", default="", help="more options for both runs' pytest (one string)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable for both runs (repeatable)")
    ap.add_argument("--nauto-args", default="", help="more options for the -n auto run only (one string)")
    ap.add_argument("--workers", default="auto", help="-n of the second run (default auto: one worker per GPU)")
    ap.add_argument("--nauto-only", action="store_true", help="no -n 0 run (a variant of -n auto alone)")
    ap.add_argument("--tag", default="", help="appended to the output's name: variants side by side")
    ap.add_argument("--target", type=float, default=1.8, help="the speed-up the Amdahl bound is stated for")
    ap.add_argument("--bound-from", type=Path, metavar="REPORT.json[.gz]",
                    help="run nothing: print the serial parts and the Amdahl bound of a saved report")
    ap.add_argument("--gpus", type=int, help="with --bound-from: the GPUs to split over (default: the report's)")
    args = ap.parse_args(argv)
    if args.bound_from is not None:
        return bound_from(args.bound_from, args.gpus, args.target)
    if not args.out:
        ap.error("OUT is required unless --bound-from is given")
    if args.tag:
        args.out = f"{args.out}-{args.tag}"
    if any("=" not in kv for kv in args.env):
        ap.error(f"--env takes NAME=VALUE, got {[kv for kv in args.env if '=' not in kv]}")
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out.parent / (out.name + "-cache"), ignore_errors=True)  # fresh: the -n 0 run fills it
    gpus = _gpus()
    paths = args.paths.split(",")
    extra = shlex.split(args.pytest_args)
    extra_auto = shlex.split(args.nauto_args)
    runs = []
    if not args.nauto_only:
        runs.append(_run("n0", "0", out, args.tools, paths, args.timeout, args.caches, extra, extra_env))
    label = "nauto" if args.workers == "auto" else f"n{args.workers}"
    runs.append(_run(label, args.workers, out, args.tools, paths, args.timeout, args.caches, extra + extra_auto,
                     extra_env))
    a, b = runs[0], runs[-1]
    same = a["verdicts"] == b["verdicts"]
    diff = sorted(k for k in set(a["verdicts"]) | set(b["verdicts"])
                  if a["verdicts"].get(k) != b["verdicts"].get(k))[:20]
    speedup = a["wall_s"] / b["wall_s"] if b["wall_s"] and a is not b else float("nan")
    bound = None if a is b else speedup_bound(a, b, len(gpus), args.target)
    lines = [
        "# pytest --pipecheck: -n 0 against one xdist worker per GPU",
        "",
        f"date {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; GPUs: {'; '.join(gpus)}",
        f"command: `python3 scripts/gpu/xdist_speedup.py {args.out} --tools {args.tools} --paths {args.paths} "
        f"--caches {args.caches}"
        + (f" --pytest-args '{args.pytest_args}'" if args.pytest_args else "")
        + (f" --nauto-args '{args.nauto_args}'" if args.nauto_args else "")
        + (" --nauto-only" if args.nauto_only else "")
        + (f" --workers {args.workers}" if args.workers != "auto" else "")
        + "".join(f" --env {kv}" for kv in args.env) + "`"
        + (" (each run from empty compile caches)" if args.caches == "cold" else ""),
        "",
        "| run | wall s | exit | outcome | results per GPU (tests) |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        per = "; ".join(f"{g}: {n} ({r['tests_per_gpu'].get(g, 0)})"
                        for g, n in sorted(r["results_per_gpu"].items()))
        lines.append(f"| -n {r['xdist']} | {r['wall_s']} | {r['exit']} | {r['outcome']} | {per} |")
    lines += ["", "Sanitizer children (wall seconds summed per GPU; a child is counted once):", ""]
    for r in runs:
        per_child = "; ".join(f"{g}: {t:.1f} s" for g, t in sorted(r["sanitizer_child_s_per_gpu"].items()))
        lines.append(f"- -n {r['xdist']}: {per_child or 'no timing recorded'}")
    lines += ["", "Each process that ran tests (busy s: its tests' whole protocols, a share's sanitizer children "
              "included under xdist; under -n 0 they run before the first test, in the seconds after collection "
              "only):", ""]
    lines += balance_lines(runs)
    lines += ["", "CPU (getrusage of each run's processes; /proc/stat sampled every 0.5 s; seconds per kind of "
              "process sampled from /proc):", ""]
    lines += cpu_lines(runs)
    lines += ["", "Every process that ran tests, its sanitizer children included (seconds from the run's start):", ""]
    lines += timeline_lines(runs)
    if a is b:
        lines += ["", "speed-up: not measured (--nauto-only: no -n 0 run to compare with)"]
    else:
        lines += ["", f"speed-up: {speedup:.2f}x (goal >= 1.8x with 2 GPUs); same verdicts in both runs: {same}"]
    if diff:
        lines.append("verdicts that differ: " + ", ".join(diff))
    if bound is not None:
        lines += ["", *bound_lines(bound)]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"gpus": gpus, "runs": runs, "speedup": speedup,
                                                    "same_verdicts": same, "serial_bound": bound}, indent=1))
    print("\n".join(lines))
    for r in runs:
        print(f"\n--- {r['label']} sanitizer progress (last lines) ---")
        print("\n".join(r["sanitizer_lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
