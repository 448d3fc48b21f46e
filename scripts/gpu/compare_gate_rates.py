"""Measure compare mode (``--pipecheck-compare``) on a GPU next to the stored-baseline gate.

Usage::

    python3 scripts/gpu/compare_gate_rates.py OUTDIR [--budget 330] [--reps 8] [--gates both|compare]

Run from this checkout installed with ``python3 -m pip install -e .`` (``scripts/gpu-check.sh OUTDIR
compare-gate`` installs it and runs this with its budget). Offline: it builds a small git repository in a temporary directory (a test file, a conftest that logs the
samples each gate decides on, the kernel sizes in ``cg_sizes.json``), commits it as REV, and runs real
``pytest`` sessions on it, each bounded by what is left of ``--budget`` seconds (default 330: about six
minutes on one H100 with start-up). Writes ``OUTDIR/compare_gate_rates.{json,md}`` and the sample log
``OUTDIR/compare_gate_samples.jsonl`` (re-analysed on the CPU with ``scripts/compare_gate_model.py
--measured``), and prints the Markdown.

The checks: ``--reps`` repetitions each (separate tests: their own inputs and warm-up) of two kernels
calibrated to about 70 us (a memory-bound fp32 add and a compute-bound bf16 matmul, sized as
``scripts/gpu/perf_gate_rates.py`` sizes them, declaring FLOPs and bytes so that the stored gate anchors
them as a user's test would), a tied-timer kernel (an fp32 add of 2^16 elements, a few microseconds, timed
one launch per sample as the default cold mode times it, so its times land on a few ticks of the event
timer and pairs tie often), plus the bundled Triton GEMM (``reference_kernels/triton/gemm.py``, 4096^3
fp16) at ``num_stages`` 3. The sessions, in order (``--gates compare`` leaves out the stored gate's):

1. stored: ``--pipecheck-baseline-save`` (REV's code), then the gate on the same code (A/A);
2. compare A/A: REV = HEAD, the working tree unchanged (REV's process and the head time the same code);
3. the head changed: every kernel's work +3% (the adds' elements, the matmul's K) and the GEMM at
   ``num_stages=1``; once in compare mode against REV, once through the stored gate;
4. the head changed by +2% (the GEMM unchanged), in compare mode;
5. more compare A/A sessions (fresh processes each) while the budget lasts.

Reported: the fraction of A/A checks failing (target <= 1%), of +3% checks caught (>= 95%) and of +2% ones,
the tied-timer kernel's verdicts and ties (with the timer's tick as the samples show it), whether
``num_stages=1`` was caught, the time per check (junit: setup + call + teardown; median over checks) in
compare mode against the stored gate's (target <= 2x), for both gates; and the same rates re-decided from
the logged samples (every A/A check scaled +2% and +3%). A check the paired gate leaves inconclusive (an
error) is counted apart, never as a pass. Checks of one session share its two processes, so they are not
independent trials: the count of sessions is given with each rate. ``--budget`` bounds the whole run (the
calibration included): 200 s with ``--gates compare`` is about four minutes of device time with start-up.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from compare_sessions import git, plugin_elsewhere, run_session  # noqa: E402 (scripts/, on the path above)

SLOWDOWN = 0.03  # the "slow" scenario; "slow2" is SLOWDOWN_2
SLOWDOWN_2 = 0.02
FAMILIES = ("add_fp32", "matmul_bf16")  # calibrated to about 70 us
TIED = "tiny_add_fp32"  # the tied-timer kernel: a fixed small size, timed at the event timer's resolution
TIED_N = 1 << 16
#: rounding of the sizes (elements, K), as scripts/gpu/perf_gate_rates.py rounds them
GRANULARITY = {"add_fp32": 4096, "matmul_bf16": 64, TIED: 256}

CONFTEST = '''
"""Logs what each gate decides on (compare_gate_rates.py): the paired series, the stored baseline and run."""
import json
import os

import pytest_pipecheck.perf.compare as _compare
import pytest_pipecheck.perf.gate as _gate
import pytest_pipecheck.perf.paired as _paired

_LOG = os.environ.get("CG_SAMPLES_LOG")


def _where():
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    return {"scenario": os.environ.get("CG_SCENARIO", ""), "session": os.environ.get("CG_SESSION", ""),
            "nodeid": test, "case": test.split("[")[-1].split("-")[0].rstrip("]") if "[" in test else "triton_gemm"}


def _write(record):
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\\n")


_paired_compare = _paired.paired_compare


def _logged_paired(base, head, **kw):
    _write({"kind": "paired", **_where(), "base": list(getattr(base, "times_us", base)),
            "head": list(getattr(head, "times_us", head))})
    return _paired_compare(base, head, **kw)


_stored_compare = _gate.compare


def _logged_stored(baseline, candidate, **kw):
    _write({"kind": "stored", **_where(), "baseline": baseline.to_json(), "candidate": candidate.to_json()})
    return _stored_compare(baseline, candidate, **kw)


_paired.paired_compare = _logged_paired
_gate.compare = _logged_stored
_compare.compare = _logged_stored
'''

TESTS = '''
import json
import os
import pathlib

import pytest

SIZES = json.loads((pathlib.Path(__file__).parent / "cg_sizes.json").read_text())
REPS = int(os.environ.get("CG_REPS", "8"))
# --cpu-rehearsal: a "kernel" returns its time in us (PIPECHECK_TEST_FAKE_TIMER=return), 70 us scaled by its work
FAKE = os.environ.get("CG_FAKE") == "1"
if not FAKE:
    import torch


def _fake(scale, us=70.0, tick=None):
    import numpy as np

    rng = np.random.default_rng()

    def kernel():
        t = float(us * scale * np.exp(rng.normal(0.0, 0.02)))
        return max(tick, round(t / tick) * tick) if tick else t

    return kernel


def _add(n):
    if FAKE:
        return _fake(n / SIZES["declared"]["add_fp32"])
    x, y, z = (torch.randn(n, device="cuda") for _ in range(3))
    return lambda: torch.add(x, y, out=z)


def _matmul(k, mn=2048):
    if FAKE:
        return _fake(k / SIZES["declared"]["matmul_bf16"])
    a = torch.randn(mn, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, mn, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(mn, mn, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=c)


@pytest.mark.parametrize("rep", range(REPS))
@pytest.mark.parametrize("family", ["add_fp32", "matmul_bf16", "tiny_add_fp32"])
def test_kernel(pipecheck, family, rep):
    size = SIZES[family]
    base = SIZES["declared"][family]  # the counts REV declares: the anchor choice is the same on both sides
    if family == "tiny_add_fp32":
        # no declared counts: no anchor, one launch per sample (cold): its times sit on the timer's ticks
        kernel = _fake(size / base, us=3.0, tick=0.5) if FAKE else _add(size)
        pipecheck.check_perf(kernel, case=family)
    elif family == "add_fp32":
        pipecheck.check_perf(_add(size), flops=float(base), bytes=12.0 * base, case=family)
    else:
        pipecheck.check_perf(_matmul(size), flops=2.0 * 2048 * 2048 * base,
                             bytes=2.0 * (2 * 2048 * base + 2048 * 2048), dtype="bf16", case=family)


def test_triton_gemm(pipecheck):
    if FAKE:
        pipecheck.check_perf(_fake(1.45 if SIZES["gemm_stages"] == 1 else 1.0), flops=1e9, case="triton_gemm")
        return
    from reference_kernels.triton import gemm as g

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    cfg = dict(g.config_for(a.device))
    cfg["stages"] = SIZES["gemm_stages"]
    pipecheck.check_perf(lambda: g.launch_gemm(g.gemm_kernel, a, b, c, **cfg), flops=2.0 * n**3, case="triton_gemm")
'''


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> None:
    git(repo, *args, who="cg")


def _sizes(base: dict[str, Any], slowdown: float) -> dict[str, Any]:
    """The kernels' sizes with ``slowdown`` more work (0: REV's), and the GEMM's stages (1 at SLOWDOWN)."""
    zero = {**{f: base["sizes"][f]["0"] for f in FAMILIES}, TIED: TIED_N}
    out: dict[str, Any] = {"declared": zero, "gemm_stages": 1 if slowdown == SLOWDOWN else 3}
    for f, size in zero.items():
        out[f] = size if slowdown == 0 else round(size * (1 + slowdown) / GRANULARITY[f]) * GRANULARITY[f]
    return out


def _session(repo: Path, outdir: Path, label: str, scenario: str, args: list[str], deadline: float,
             reps: int, log: Path, rehearsal: bool) -> dict[str, Any]:
    """One pytest session: its verdicts per check, per-test durations, and wall time."""
    left = deadline - time.monotonic()
    report = outdir / f"{label}.json"
    junit = outdir / f"{label}.xml"
    if left < 20:
        return {"label": label, "skipped": f"budget spent ({left:.0f} s left)"}
    env = {**os.environ, "CG_SAMPLES_LOG": str(log), "CG_SCENARIO": scenario, "CG_SESSION": label,
           "CG_REPS": str(reps)}
    if rehearsal:
        env.update(CG_FAKE="1", PIPECHECK_TEST_FAKE_TIMER="return")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", f"--pipecheck-json={report}",
           f"--junitxml={junit}", "test_cg.py", *args, *(["--pipecheck-tier=cpu"] if rehearsal else [])]
    t0 = time.monotonic()
    rc, tail = run_session(cmd, repo, env, left, 3000)
    wall = time.monotonic() - t0
    out: dict[str, Any] = {"label": label, "scenario": scenario, "args": args, "rc": rc, "wall_s": wall,
                           "checks": [], "durations_s": {}}
    (outdir / f"{label}.log").write_text(tail)
    try:
        doc = json.loads(report.read_text())
        for r in doc.get("results", []):
            if r.get("check") != "perf":
                continue
            d = r.get("details") or {}
            out["checks"].append({"nodeid": r.get("nodeid"), "case": d.get("case"), "verdict": r.get("verdict"),
                                  "summary": r.get("summary", "")[:400], "decided_by": d.get("decided_by"),
                                  "change": d.get("change"), "ci": [d.get("ci_low"), d.get("ci_high")]})
    except (OSError, ValueError) as exc:
        out["report_error"] = str(exc)
    try:
        for case in ET.parse(junit).getroot().iter("testcase"):
            out["durations_s"][f"{case.get('classname')}::{case.get('name')}"] = float(case.get("time") or 0.0)
    except (OSError, ET.ParseError) as exc:
        out["junit_error"] = str(exc)
    return out


def _count(sessions: list[dict[str, Any]], scenario: str, cases: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Failing checks of the ``scenario`` sessions (of ``cases``), out of those that passed or failed."""
    from perf_rates import estimate

    mine = [x for x in sessions if x.get("scenario") == scenario]
    checks = [c for x in mine for c in x.get("checks", []) if cases is None or c["case"] in cases]
    decided = [c for c in checks if c["verdict"] in ("pass", "fail")]
    hits = sum(c["verdict"] == "fail" for c in decided)
    out: dict[str, Any] = estimate(0.0, hits, len(decided)).to_json() if decided else {"failures": 0, "trials": 0}
    out["sessions"] = len({x["label"] for x in mine if x.get("checks")})
    out["undecided"] = [f"{c['verdict']}: {c['summary'][:160]}" for c in checks if c not in decided][:5]
    return out


def _tied(sessions: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The tied-timer kernel in compare mode: its verdicts per scenario, the share of its pairs that tied, and
    the timer's tick as its samples show it (the smallest gap between two distinct times)."""
    out: dict[str, Any] = {}
    for scenario in ("aa", "slow", "slow2"):
        checks = [c for x in sessions if x.get("scenario") == scenario for c in x.get("checks", [])
                  if c["case"] == TIED]
        mine = [r for r in records if r.get("kind") == "paired" and r.get("case") == TIED
                and r.get("scenario") == scenario]
        pairs = [(b, h) for r in mine for b, h in zip(r["base"], r["head"])]
        out[scenario] = {"checks": len(checks), "fail": sum(c["verdict"] == "fail" for c in checks),
                         "pass": sum(c["verdict"] == "pass" for c in checks),
                         "error": sum(c["verdict"] == "error" for c in checks),
                         "tied_share": (sum(b == h for b, h in pairs) / len(pairs)) if pairs else 0.0,
                         "summaries": [c["summary"][:200] for c in checks[:3]]}
    times = sorted({t for r in records if r.get("kind") == "paired" and r.get("case") == TIED
                    for t in (*r["base"], *r["head"])})
    gaps = [b - a for a, b in itertools.pairwise(times) if b - a > 1e-9]
    out["tick_us"] = min(gaps) if gaps else None
    out["median_us"] = statistics.median(times) if times else None
    return out


def _median_duration(sessions: list[dict[str, Any]], prefix: str) -> float | None:
    values = [t for x in sessions if x.get("label", "").startswith(prefix) for t in x.get("durations_s", {}).values()]
    return statistics.median(values) if values else None


def _rate(r: dict[str, Any] | None) -> str:
    if not r or not r.get("trials"):
        return "-"
    return f"{r['failures']}/{r['trials']} ({r['failures'] / r['trials']:.1%}; {r['sessions']} sessions)"


def _seconds(value: float | None, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def _tied_line(r: dict[str, Any] | None) -> str:
    if not r or not r.get("checks"):
        return "-"
    return (f"{r['fail']} fail, {r['error']} inconclusive or error, {r['pass']} pass of {r['checks']}; "
            f"{r['tied_share']:.0%} of pairs tied")


def render(result: dict[str, Any]) -> str:
    c, s = result["counted"]["compare"], result["counted"]["stored"]
    t = result["time_per_check_s"]
    tied = result["counted"]["tied"]
    lines = [
        "# compare mode on the GPU: false alarms, detection, time per check", "",
        f"{result['gpu']}; torch {result['torch']}, triton {result['triton']}; {result['date']}; "
        f"`{result['command']}`; {result['elapsed_s']:.0f} s", "",
        "Counted from the pytest sessions (each check as pytest reported it; the A/A, +2% and +3% columns count the "
        "two calibrated kernels, the GEMM and the tied-timer kernel have their own):", "",
        "| gate | A/A checks failing (<= 1%) | +2% checks caught | +3% checks caught (>= 95%) | num_stages=1 | "
        "time per check |",
        "|---|---|---|---|---|---|",
        f"| compare (`--pipecheck-compare`) | {_rate(c['aa'])} | {_rate(c['slow2'])} | {_rate(c['slow'])} | "
        f"{c['gemm_stages1']} | {_seconds(t['compare'])} |",
        f"| stored baseline | {_rate(s['aa'])} | - | {_rate(s['slow'])} | {s['gemm_stages1']} | "
        f"{_seconds(t['stored'])} |",
        "",
        f"The tied-timer kernel ({TIED}, {TIED_N} elements, one launch per sample) in compare mode; the timer's "
        f"tick as its samples show it (the smallest gap between two distinct times): {_seconds(tied.get('tick_us'), ' us')} "
        f"of a median {_seconds(tied.get('median_us'), ' us')}:", "",
        "| scenario | verdicts |", "|---|---|",
        f"| A/A | {_tied_line(tied.get('aa'))} |",
        f"| +2% | {_tied_line(tied.get('slow2'))} |",
        f"| +3% | {_tied_line(tied.get('slow'))} |",
        "",
        f"Time per check, compare / stored: {_seconds(t['ratio'], 'x')} (target <= 2x; medians over the checks of "
        "the A/A sessions, junit setup + call + teardown).", "",
        result.get("measured_markdown", ""), "",
        "Sessions:", "",
        "| session | scenario | exit | wall s | checks |", "|---|---|---|---|---|",
    ]
    for sess in result["sessions"]:
        lines.append(f"| {sess['label']} | {sess.get('scenario', '')} | {sess.get('rc', sess.get('skipped', ''))} | "
                     f"{sess.get('wall_s', 0):.1f} | {len(sess.get('checks', []))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds of work before sessions are cut short")
    ap.add_argument("--reps", type=int, default=8, help="repetitions of each kernel's check per session")
    ap.add_argument("--gates", choices=("both", "compare"), default="both",
                    help="compare: leave out the stored gate's sessions (compare mode's rates only, in less time)")
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="check this script's own machinery without a GPU: fake kernels through compare mode's test "
                         "seam (the stored gate skips on the CPU); its numbers mean nothing")
    args = ap.parse_args()
    t_start = time.monotonic()
    deadline = t_start + args.budget
    outdir = Path(args.outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    import torch
    import triton

    # the sessions load the installed plugin (its entry point) and import reference_kernels from it
    if plugin_elsewhere("compare_gate_rates"):
        return 2
    if args.cpu_rehearsal:
        # whole multiples of the sizes' rounding, so that +2% and +3% stay +2% and +3%
        calibrated: dict[str, Any] = {f: {"sizes": {"0": 1000 * GRANULARITY[f]}} for f in FAMILIES}
    elif not torch.cuda.is_available():
        print("compare_gate_rates: needs a CUDA GPU (torch.cuda.is_available() is False); --cpu-rehearsal checks "
              "the script alone", file=sys.stderr)
        return 2
    else:
        pgr = _load("perf_gate_rates", HERE / "perf_gate_rates.py")
        calibrated = {f: pgr.calibrate(torch, f) for f in FAMILIES}
        torch.cuda.empty_cache()
    base = {"sizes": {f: calibrated[f]["sizes"] for f in FAMILIES}}

    repo = Path(tempfile.mkdtemp(prefix="compare-gate-repo-"))
    log = outdir / "compare_gate_samples.jsonl"
    log.write_text("")
    sessions: list[dict[str, Any]] = []
    try:
        (repo / "pytest.ini").write_text("[pytest]\n")
        (repo / "conftest.py").write_text(CONFTEST)
        (repo / "test_cg.py").write_text(TESTS)
        (repo / "cg_sizes.json").write_text(json.dumps(_sizes(base, 0.0)))
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "REV")

        def run(label: str, scenario: str, extra: list[str]) -> None:
            sessions.append(_session(repo, outdir, label, scenario, extra, deadline, args.reps, log, args.cpu_rehearsal))
            print(f"{label}: rc={sessions[-1].get('rc', sessions[-1].get('skipped'))} "
                  f"{sessions[-1].get('wall_s', 0):.0f} s", flush=True)

        stored = ["--pipecheck-baseline-dir=bl"]
        off = ["--pipecheck-baseline-dir=none"]
        with_stored = args.gates == "both"
        if with_stored:
            run("stored-save", "save", [*stored, "--pipecheck-baseline-save"])
            run("stored-aa", "aa", stored)
        run("compare-aa-1", "aa", ["--pipecheck-compare=HEAD", *off])
        (repo / "cg_sizes.json").write_text(json.dumps(_sizes(base, SLOWDOWN)))
        run("compare-slow", "slow", ["--pipecheck-compare=HEAD", *off])
        if with_stored:
            run("stored-slow", "slow", stored)
        (repo / "cg_sizes.json").write_text(json.dumps(_sizes(base, SLOWDOWN_2)))
        run("compare-slow2", "slow2", ["--pipecheck-compare=HEAD", *off])
        (repo / "cg_sizes.json").write_text(json.dumps(_sizes(base, 0.0)))
        k = 2
        while deadline - time.monotonic() > 45:
            run(f"compare-aa-{k}", "aa", ["--pipecheck-compare=HEAD", *off])
            k += 1
    finally:
        shutil.rmtree(repo, ignore_errors=True)

    compare_s = [x for x in sessions if x["label"].startswith("compare")]
    stored_s = [x for x in sessions if x["label"].startswith("stored") and x["label"] != "stored-save"]

    def gemm_caught(group: list[dict[str, Any]]) -> str:
        checks = [c for x in group if x.get("scenario") == "slow" for c in x.get("checks", [])
                  if c["case"] == "triton_gemm"]
        return "; ".join(f"{c['verdict']}: {c['summary'].split('; stored baseline')[0][:160]}" for c in checks) or "not run"

    t_cmp = _median_duration(sessions, "compare-aa")
    t_st = _median_duration(sessions, "stored-aa")
    untied = (*FAMILIES, "triton_gemm")  # the tied-timer kernel is counted on its own
    cgm = _load("compare_gate_model", ROOT / "scripts" / "compare_gate_model.py")
    records = cgm.read_records([str(log)])
    counted = {
        "compare": {"aa": _count(compare_s, "aa", untied), "slow": _count(compare_s, "slow", FAMILIES),
                    "slow2": _count(compare_s, "slow2", FAMILIES), "gemm_stages1": gemm_caught(compare_s)},
        "stored": {"aa": _count(stored_s, "aa", untied), "slow": _count(stored_s, "slow", FAMILIES),
                   "gemm_stages1": gemm_caught(stored_s)},
        "tied": _tied(compare_s, records),
    }
    measured = cgm.measured_rows(records, (SLOWDOWN_2, SLOWDOWN))
    result: dict[str, Any] = {
        "gpu": "CPU rehearsal (fake kernels: the numbers mean nothing)" if args.cpu_rehearsal
        else torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]), "budget_s": args.budget,
        "reps": args.reps, "gates": args.gates, "slowdowns": {"slow": SLOWDOWN, "slow2": SLOWDOWN_2},
        "calibration": calibrated, "sizes": {str(sd): _sizes(base, sd) for sd in (0.0, SLOWDOWN_2, SLOWDOWN)},
        "counted": counted,
        "time_per_check_s": {"compare": t_cmp, "stored": t_st,
                             "ratio": (t_cmp / t_st) if t_cmp is not None and t_st else None},
        "measured": measured,
        "measured_markdown": cgm.render(None, measured, trials=0, seed=0, sources=[log.name]),
        "sessions": sessions,
        "elapsed_s": time.monotonic() - t_start,
    }
    (outdir / "compare_gate_rates.json").write_text(json.dumps(result, indent=1, default=str))
    text = render(result)
    (outdir / "compare_gate_rates.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
