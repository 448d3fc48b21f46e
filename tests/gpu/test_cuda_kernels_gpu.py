"""GPU tier: every CUDA mutant is caught by the check it declares, and its reference kernel is not.

- tile_probe mutants run in this process through the ``pipecheck`` fixture;
- sanitizer mutants run in a child process under compute-sanitizer (--error-exitcode, timeout), with
  the reference kernel as a control that must come back clean;
- the hang mutant runs only in a child process under a watchdog timeout;
- the perf mutant is timed against its base with CUDA events (median of repeats);
- the occupancy mutant is proved on the CPU (tests/unit/test_cuda_mutants_static.py) and here checked
  against the live kernel's attributes.
Without a GPU every test is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_pipecheck.results import PipecheckFailure
from reference_kernels.mutants.cuda import MUTANTS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu

SANITIZER = [n for n, m in MUTANTS.items() if m.check.startswith("sanitizer:")]
PROBE = [n for n, m in MUTANTS.items() if m.check in ("tile_probe", "coverage")]


def _child(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False)


def _driver(name: str, dims: tuple[int, int, int] = (129, 129, 100)) -> list[str]:
    return [sys.executable, "-m", "reference_kernels.mutants.cuda.run", name, *map(str, dims)]


@pytest.mark.parametrize("name", PROBE)
def test_probe_mutant_is_caught(pipecheck, name: str) -> None:
    pipecheck.require_gpu("mutant", kernel=name)
    pytest.importorskip("cupy")
    from pytest_pipecheck.spec import Shape
    from reference_kernels.cuda.specs import SPECS, mutant_spec

    m = MUTANTS[name]
    for shape in (Shape(M=129, N=130, K=32 * 5 + 7), Shape(M=64, N=64, K=32 * 4)):
        pipecheck.check_tile_probe(SPECS[m.base], shape)  # the reference passes
        with pytest.raises(PipecheckFailure, match=m.expect):
            pipecheck.check_tile_probe(mutant_spec(name), shape)


@pytest.mark.parametrize("name", SANITIZER)
def test_sanitizer_mutant_is_caught(pipecheck, name: str) -> None:
    pipecheck.require_gpu("sanitizer", kernel=name)
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    install = find_compute_sanitizer()
    if install is None:
        pytest.skip("compute-sanitizer not found")
    m = MUTANTS[name]
    tool = m.check.split(":", 1)[1]
    cmd = [install.path, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
    try:
        control = _child([*cmd, *_driver(m.base)], timeout=300)
        mutated = _child([*cmd, *_driver(name)], timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{tool} on {name} timed out after {exc.timeout} s")
    assert control.returncode == 0, f"{m.base} is not {tool}-clean:\n{control.stdout[-3000:]}{control.stderr[-3000:]}"
    out = mutated.stdout + mutated.stderr
    assert mutated.returncode == 99, f"{tool} did not flag {name} (exit {mutated.returncode}):\n{out[-4000:]}"
    assert m.expect.lower() in out.lower(), f"{tool} flagged {name} but without {m.expect!r}:\n{out[-4000:]}"
    assert m.entry in out, f"{tool}'s report does not name the mutant's kernel {m.entry}"


def test_hang_mutant_is_caught_by_a_watchdog(pipecheck) -> None:
    pipecheck.require_gpu("hang watchdog")
    m = MUTANTS["consumer_skips_wait"]
    control = _child(_driver(m.base), timeout=120)
    assert control.returncode == 0, control.stdout + control.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        _child(_driver(m.name), timeout=60)  # subprocess.run kills the child on timeout


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


def test_perf_mutant_is_slower_and_still_correct(pipecheck) -> None:
    pipecheck.require_gpu("perf", kernel="serialized_wait_after_commit")
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
