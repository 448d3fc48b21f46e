"""GPU tier: every CUDA mutant is caught by the check it declares, and its reference kernel is not.

- tile_probe mutants run in this process through the ``pipecheck`` fixture;
- the sanitizer mutants, the hang mutant and their base kernels (clean controls) run as ONE generated
  test module (reference_kernels/mutants/cuda/sanitizer_batch.py) in one ``pytest --pipecheck``
  subprocess: pipecheck's sanitizer plugin runs each under its tool in batched compute-sanitizer
  children, its watchdog kills the hang, and the test reads pipecheck's own verdicts back;
- the perf mutant is timed against its base with CUDA events (median of repeats);
- the occupancy mutant is proved on the CPU (tests/unit/test_cuda_mutants_static.py) and here checked
  against the live kernel's attributes.
Without a GPU every test is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.results import PipecheckFailure
from reference_kernels.mutants.cuda import MUTANTS, sanitizer_batch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu

PROBE = [n for n, m in MUTANTS.items() if m.check in ("tile_probe", "coverage")]
#: seconds the whole sanitizer batch (three tools, 15 tests, one watchdog kill) may take
BATCH_TIMEOUT = 420


@pytest.mark.parametrize("name", PROBE)
@pytest.mark.pipecheck(expect_failures=["tile_probe"])  # each mutant must be caught by the tile probe
def test_probe_mutant_is_caught(pipecheck, name: str) -> None:
    pipecheck.require_gpu("mutant", kernel=name)
    pytest.importorskip("cupy")
    from pytest_pipecheck.model.shape import Shape
    from reference_kernels.cuda.specs import SPECS, mutant_spec

    m = MUTANTS[name]
    for shape in (Shape(M=129, N=130, K=32 * 5 + 7), Shape(M=64, N=64, K=32 * 4)):
        pipecheck.check_tile_probe(SPECS[m.base], shape)  # the reference passes
        with pytest.raises(PipecheckFailure, match=m.expect):
            pipecheck.check_tile_probe(mutant_spec(name), shape)


def _long(seconds: int) -> Any:
    """pytest-timeout's per-test limit for a test that runs a whole batch (a no-op without that plugin)."""
    if importlib.util.find_spec("pytest_timeout") is None:
        return lambda f: f
    return pytest.mark.timeout(seconds)


def _run_batch(cmd: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` in its own session; on timeout kill the whole group (compute-sanitizer children too)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    for var in ("PIPECHECK_CHILD", "PIPECHECK_CANARY", "PYTEST_ADDOPTS"):
        env.pop(var, None)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


# No ``pipecheck`` fixture here on purpose: an outer ``pytest --pipecheck`` would otherwise re-run this
# test, and with it a whole nested pipecheck run, under compute-sanitizer.
@_long(BATCH_TIMEOUT + 60)
def test_sanitizer_mutants_caught_by_pipecheck_in_one_batch(tmp_path: Path) -> None:
    """Every sanitizer mutant and the hang mutant fail, and their base kernels pass, in ONE
    ``pytest --pipecheck`` run: the evidence is pipecheck's own verdicts (JSON report, -rA output)."""
    pytest.importorskip("cupy")
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    if find_compute_sanitizer() is None:
        pytest.skip("compute-sanitizer not found")
    module = tmp_path / "test_cuda_sanitizer_batch.py"
    module.write_text(sanitizer_batch.module_source())
    report_path = tmp_path / "pipecheck.json"
    cmd = [sys.executable, "-m", "pytest", "--pipecheck", "--pipecheck-tier=gpu",
           f"--pipecheck-sanitizer={','.join(sanitizer_batch.TOOLS)}", "-p", "no:cacheprovider", "-rA",
           f"--pipecheck-json={report_path}", str(module)]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        cmd[3:3] = ["-p", "pytest_pipecheck.plugin"]
    for name, reason in sanitizer_batch.not_judged().items():
        print(f"NOT JUDGED mutant {name}: {reason}")  # shown with -rA / -s; the batch leaves it out
    rc, out = _run_batch(cmd, tmp_path, BATCH_TIMEOUT)
    print(out[-30000:])  # the whole run, in the test's captured output
    tail = f"\n--- {' '.join(cmd)} (exit {rc}), output tail ---\n{out[-8000:]}"
    assert rc is not None, f"the batch did not finish within {BATCH_TIMEOUT} s{tail}"
    assert rc == 1, f"exit status {rc}: expected 1 (the mutants' tests fail, nothing else goes wrong){tail}"
    assert report_path.is_file(), f"no --pipecheck-json report written{tail}"
    report = json.loads(report_path.read_text())
    problems = sanitizer_batch.evaluate(report, out)
    assert not problems, "\n".join(["pipecheck's verdicts on the CUDA sanitizer mutants fell short:",
                                     *(f"  - {p}" for p in problems)]) + tail


def _median_ms(launch, a, b, c, repeats: int = 20) -> float:
    import cupy

    for _ in range(3):
        launch(a, b, c)
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch(a, b, c)
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    times.sort()
    return times[len(times) // 2]


@pytest.mark.pipecheck(sanitizer="none")  # a timing test: under racecheck it times the tool, and 4096^3 outlasts its limit
def test_perf_mutant_is_slower_and_still_correct(pipecheck) -> None:
    pipecheck.require_gpu("perf", kernel="serialized_wait_after_commit", alone=True)
    cupy = pytest.importorskip("cupy")
    from reference_kernels.cuda.launch import gemm

    m = MUTANTS["serialized_wait_after_commit"]
    n = 4096
    rng = cupy.random.default_rng(0)
    a = rng.integers(-3, 4, size=(n, n)).astype(cupy.float16)
    b = rng.integers(-3, 4, size=(n, n)).astype(cupy.float16)
    c = cupy.empty((n, n), dtype=cupy.float32)
    base = _median_ms(lambda a, b, c: gemm(m.base, a, b, c), a, b, c)
    slow = _median_ms(m.launch, a, b, c)
    want = a.astype(cupy.float32) @ b.astype(cupy.float32)
    assert bool(cupy.all(c == want)), "the serialized mutant must stay correct"
    assert slow > 1.05 * base, f"serialized mutant {slow:.3f} ms vs base {base:.3f} ms: no regression seen"


def test_cliff_mutant_live_attributes(pipecheck) -> None:
    pipecheck.require_gpu("occupancy", kernel="stage_cliff_sm86")
    cupy = pytest.importorskip("cupy")
    from pytest_pipecheck import occupancy
    from reference_kernels.cuda.launch import dynamic_smem, source_stages

    m = MUTANTS["stage_cliff_sm86"]
    a = cupy.ones((128, 64), dtype=cupy.float16)
    b = cupy.ones((64, 128), dtype=cupy.float16)
    c = cupy.empty((128, 128), dtype=cupy.float32)
    m.launch(a, b, c)
    assert bool(cupy.all(c == 64))
    from reference_kernels.cuda.launch import _MODULES

    fn = next(f for key, f in _MODULES.items() if key[1][-1] == m.entry)
    arch = f"sm_{cupy.cuda.Device().compute_capability}"
    stages = source_stages(m.source(), m.kernel)
    occ = occupancy(arch, m.kernel.threads, fn.num_regs, fn.shared_size_bytes, dynamic_smem(m.kernel, stages))
    if arch in ("sm_90", "sm_80"):
        assert occ.blocks_per_sm >= 2, occ
    elif arch in ("sm_86", "sm_89"):
        assert occ.blocks_per_sm == 1, occ
