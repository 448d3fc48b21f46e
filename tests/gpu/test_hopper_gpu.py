"""The Hopper TMA + WGMMA GEMM on an H100/H200: correct at ragged shapes, and every mutant caught.

Every kernel launch of the first two groups runs in a child process
(``python -m reference_kernels.hopper.run_case``) under a timeout, because a broken mbarrier handshake
hangs the GPU kernel forever and would take pytest down with it. The pipecheck coverage tests at
the end run in-process, and only after the reference passed in a child (otherwise they skip).

Run:  pytest tests/gpu/test_hopper_gpu.py -v -rs   (skips with the reason without an sm_90 GPU)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reference_kernels.mutants.hopper import MUTANTS

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "PIPECHECK-HOPPER-RESULT "
CHILD_TIMEOUT = 60  # seconds per child: python + torch start-up, an nvcc build (~1 s), a few launches
_REFERENCE_OK: dict[str, bool] = {}


def _hopper_or_skip() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        pytest.skip(f"the Hopper GEMM needs sm_90 (H100/H200); this GPU is sm_{cap[0]}{cap[1]}")
    try:
        import cuda.bindings.driver
    except ImportError:
        try:
            from cuda import cuda  # noqa: F401
        except ImportError:
            pytest.skip("cuda-python (cuda.bindings.driver) is not installed: needed for cuTensorMapEncodeTiled")


def _run_child(args: list[str], timeout: float = CHILD_TIMEOUT, prefix: list[str] | None = None) -> dict[str, Any]:
    """Run run_case in a child; returns {'timed_out', 'returncode', 'result', 'output'}."""
    cmd = [*(prefix or []), sys.executable, "-m", "reference_kernels.hopper.run_case", *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        return {"timed_out": True, "returncode": None, "result": None, "output": text, "cmd": cmd}
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
    return {"timed_out": False, "returncode": proc.returncode, "result": result,
            "output": proc.stdout[-6000:] + proc.stderr[-6000:], "cmd": cmd}


def _describe(run: dict[str, Any]) -> str:
    cmd = " ".join(run["cmd"])
    if run["timed_out"]:
        return f"timed out: {cmd}\n{run['output'][-3000:]}"
    res = run["result"] or {}
    return (f"exit {run['returncode']}: {cmd}\nerror: {res.get('error')}\n"
            f"results: {json.dumps(res.get('results'), indent=1)[:3000]}\n{(res.get('traceback') or '')[-3000:]}"
            f"\n--- output tail ---\n{run['output'][-3000:]}")


# ----------------------------------------------------------------------------- reference

REFERENCE_SHAPES = "64x64x64,129x257x72,1000x1000x1000,4096x4096x4096,1x1x8,200x72x520"
VARIANTS = {
    "s4_c2_n128": ["--stages", "4", "--consumers", "2", "--bn", "128"],
    "s2_c1_n128": ["--stages", "2", "--consumers", "1", "--bn", "128"],
    "s3_c2_n256": ["--stages", "3", "--consumers", "2", "--bn", "256"],
    "s4_c2_n128_fp16": ["--stages", "4", "--consumers", "2", "--bn", "128", "--fp16"],
}


def _reference_run(variant: str) -> dict[str, Any]:
    run = _run_child(["--shapes", REFERENCE_SHAPES, *VARIANTS[variant]], timeout=120)
    _REFERENCE_OK[variant] = not run["timed_out"] and run["returncode"] == 0
    return run


def _reference_passed(variant: str) -> bool:
    """Whether ``variant``'s reference passed in a child process of this run; where this process has not run
    it (pytest-xdist sent the reference test to another worker, or it was not selected), it runs here first,
    rather than leave the tests that need it skipped. A reference that fails when run here fails the test that
    asked, with the reference's own output: no test of this process reports it otherwise, so a skip would hide
    it (its own test may have passed in another worker). Where the reference's own test failed in this
    process, that test reports it and the tests that need it skip. Not in a sanitizer child, where the tool
    would follow the reference's own child process (4096^3 under racecheck: past the 120 s watchdog, H100):
    there the tests that need it skip, and their verdict under the tool says so."""
    if variant not in _REFERENCE_OK and not os.environ.get("PIPECHECK_CHILD"):
        run = _reference_run(variant)
        if not _REFERENCE_OK[variant]:
            pytest.fail(f"the reference {variant}, run here because its own test ran in another process or was "
                        f"not selected, failed: {_describe(run)}")
    return _REFERENCE_OK.get(variant, False)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reference_matches_float64_matmul_at_ragged_shapes(variant: str) -> None:
    _hopper_or_skip()
    run = _reference_run(variant)
    assert _REFERENCE_OK[variant], f"reference {variant} failed: {_describe(run)}"
    assert [r["shape"] for r in run["result"]["results"]] == REFERENCE_SHAPES.split(",")


# ----------------------------------------------------------------------------- mutants

# shapes with several M, N and K tiles (and a ring that wraps): any of these exposes a wrong result
MUTANT_SHAPES = "1000x1000x1000,129x257x520"
DEFAULT_CONFIG = tuple(VARIANTS["s4_c2_n128"])


def _outcome(run: dict[str, Any]) -> str:
    """What a child run of a mutant showed: hang, coverage (a wrong result), crash (the kernel faulted:
    run_case exit 3), passed (every shape matched) or did-not-run (exit 2: compile/setup error)."""
    if run["timed_out"]:
        return "hang"
    return {0: "passed", 1: "coverage", 3: "crash"}.get(run["returncode"], "did-not-run")


# a hang is caught only when the watchdog's limit runs out (about a minute): evidence, not the per-merge tier
@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.gpu_evidence] if m.expected_check == "hang" else [])
                                  for n, m in MUTANTS.items() if m.expected_check in ("coverage", "hang")])
def test_mutant_is_caught_by_its_check(name: str) -> None:
    """Each config the mutant declares runs the reference first, then the mutant, in child processes.

    Caught: a declared outcome (expected_check or may_also) at some config. A crash -- the kernel
    faulted ('unspecified launch failure', illegal address) -- is what pipecheck's coverage check
    reports as "the kernel raised", so it counts where the mutant declares it. Not caught (every shape
    matched at every config), an undeclared outcome, or a mutant that never ran fail the test.
    """
    _hopper_or_skip()
    if not _reference_passed("s4_c2_n128"):
        pytest.skip("the reference (s4_c2_n128) did not pass in this run; a mutant verdict would mean nothing")
    mutant = MUTANTS[name]
    allowed = {mutant.expected_check, *mutant.may_also}
    shapes = mutant.shapes or MUTANT_SHAPES
    tried: list[str] = []
    run: dict[str, Any] = {}
    for config in mutant.configs or (DEFAULT_CONFIG,):
        if mutant.configs:  # the reference must be right at exactly this config and these shapes
            ref = _run_child(["--shapes", shapes, *config])
            assert not ref["timed_out"] and ref["returncode"] == 0, (
                f"the reference fails at the mutant's config {' '.join(config)}, so the mutant's verdict "
                f"would mean nothing:\n{_describe(ref)}")
        run = _run_child(["--shapes", shapes, *config, "--mutant", name])
        outcome = _outcome(run)
        tried.append(f"{' '.join(config)}: {outcome}")
        print(f"{name} at {' '.join(config)}, shapes {shapes}: {outcome}")
        if outcome == "did-not-run":
            pytest.fail(f"mutant {name} did not run (a compile or setup error, not a kernel fault):\n{_describe(run)}")
        if outcome == "passed":
            continue
        assert outcome in allowed, (f"mutant {name} was caught as {outcome!r}, but its declared check is "
                                    f"{mutant.expected_check!r} (also allowed: {mutant.may_also}):\n{_describe(run)}")
        return
    pytest.fail(f"mutant {name} ({mutant.bug}) was NOT caught: every shape matched at every config "
                f"({'; '.join(tried)}), shapes {shapes}.\n{_describe(run)}")


def test_swapped_coordinates_mutant_passes_at_one_tile() -> None:
    """The reason ragged multi-tile shapes matter: at a single 64x64x64 tile the swap is invisible."""
    _hopper_or_skip()
    if not _reference_passed("s4_c2_n128"):
        pytest.skip("the reference (s4_c2_n128) did not pass in this run")
    run = _run_child(["--shapes", "64x64x64", "--mutant", "hopper_tma_coordinates_swapped"])
    assert not run["timed_out"] and run["returncode"] == 0, _describe(run)


def _racecheck(args: list[str], save: Path) -> tuple[dict[str, Any], Any]:
    from pytest_pipecheck.sanitizer.locate import HOW_TO_GET, find_compute_sanitizer
    from pytest_pipecheck.sanitizer.parse import parse_text

    install = find_compute_sanitizer()
    if install is None:
        pytest.skip(f"compute-sanitizer not found: {HOW_TO_GET}")
    prefix = [install.path, "--tool", "racecheck", "--racecheck-report", "all", "--error-exitcode", "7",
              "--print-limit", "50"]
    run = _run_child(args, timeout=300, prefix=prefix)
    save.write_text(" ".join(run["cmd"]) + "\n" + run["output"])
    return run, parse_text(run["output"], "racecheck")


@pytest.mark.gpu_evidence  # two racecheck runs of 64 K tiles: about 100 s, and recorded rather than relied on
def test_racecheck_on_the_early_release_mutant(tmp_path: Path) -> None:
    """Racecheck on the reference and on the early-release mutant, at its first config, one CTA.

    Recorded, not relied on: the mutant's declared check is coverage and racecheck is only may_also,
    because compute-sanitizer 2025.3.1's racecheck does not model the WGMMA reads of shared memory
    (0 hazards on the reference and on a milder form of this mutant:
    docs/validation/2026-11-22-h200-0223.md). A hazard on the mutant with a clean reference passes; no
    hazard xfails with the numbers; hazards on the reference too xfail (racecheck reports false
    positives on raw TMA + mbarrier loops); an inconclusive run (no summary line) fails.
    """
    _hopper_or_skip()
    if not _reference_passed("s4_c2_n128"):
        pytest.skip("the reference (s4_c2_n128) did not pass in this run")
    name = "hopper_stage_released_before_wgmma_done"
    mutant = MUTANTS[name]
    assert "sanitizer:racecheck" in (mutant.expected_check, *mutant.may_also)
    args = ["--shapes", "128x128x4096", *mutant.configs[0]]  # one CTA, 64 K tiles through the ring
    ref_run, ref = _racecheck(args, tmp_path / "racecheck_reference.txt")
    mut_run, mut = _racecheck([*args, "--mutant", name], tmp_path / "racecheck_mutant.txt")
    print(f"racecheck reference: errors={ref.summary.errors} findings={len(ref.findings)} "
          f"exit={ref_run['returncode']} timed_out={ref_run['timed_out']}")
    print(f"racecheck mutant:    errors={mut.summary.errors} findings={len(mut.findings)} "
          f"exit={mut_run['returncode']} timed_out={mut_run['timed_out']}")
    if ref_run["timed_out"] or not ref.summary.seen:
        pytest.fail(f"racecheck on the reference was inconclusive (no summary line):\n{_describe(ref_run)}")
    assert mut.summary.seen and not mut_run["timed_out"], f"racecheck on the mutant was inconclusive:\n{_describe(mut_run)}"
    if ref.summary.errors:
        pytest.xfail(f"racecheck reports {ref.summary.errors} errors on the REFERENCE too, so the mutant's "
                     f"report proves nothing; first lines:\n{ref_run['output'][:2000]}")
    if not mut.summary.errors:
        pytest.xfail(f"racecheck reports 0 hazards on {name} as well (may_also only; the coverage test is "
                     f"the catch); mutant exit {mut_run['returncode']}:\n{mut_run['output'][-1500:]}")


# ----------------------------------------------------------------------------- pipecheck's own checks


@pytest.mark.parametrize("variant", ["s4_c2_n128", "s2_c1_n128"])
def test_pipecheck_coverage_tile_probe_and_determinism_at_generated_shapes(pipecheck: Any, variant: str) -> None:
    _hopper_or_skip()
    if not _reference_passed(variant):
        pytest.skip(f"the reference ({variant}) did not pass in a child process in this run; running it "
                    "in-process could hang pytest")
    from reference_kernels.hopper.launch import Variant
    from reference_kernels.hopper.spec import spec

    args = VARIANTS[variant]
    v = Variant(stages=int(args[1]), consumers=int(args[3]), bn=int(args[5]))
    s = spec(v)
    import torch

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = pipecheck.shapes(s, level="small", sm_count=sm_count)
    assert shapes, "no generated shapes"
    for shape in shapes:
        pipecheck.check_coverage(s, shape)
        pipecheck.check_tile_probe(s, shape)
        pipecheck.check_determinism(s, shape)
