"""GPU tier for the CUDA ladder: each reference kernel passes pipecheck's correctness checks
(poisoned guarded outputs, reference comparison, tile probe, determinism) at every generated shape.
Without a CUDA GPU each test is skipped with the reason."""

from __future__ import annotations

import os

import pytest

from pytest_pipecheck.config import DEFAULT_SANITIZER_TOOLS
from pytest_pipecheck.model.shapes import generate
from reference_kernels.cuda.launch import KERNELS, SANITIZER_EXCLUSIONS
from reference_kernels.cuda.specs import SPECS


def _marks(name: str) -> list[pytest.MarkDecorator]:
    """A kernel with a reviewed sanitizer exclusion runs under the default tools minus the excluded one."""
    excluded = SANITIZER_EXCLUSIONS.get(name, {})
    if not excluded:
        return []
    tools = [t for t in DEFAULT_SANITIZER_TOOLS if t not in excluded]
    return [pytest.mark.pipecheck(sanitizer=",".join(tools) or "none")]


def _record_exclusions(pipecheck, name: str) -> None:  # type: ignore[no-untyped-def]
    for tool, reason in SANITIZER_EXCLUSIONS.get(name, {}).items():
        pipecheck.skip_check(f"sanitizer:{tool}", reason, kernel=name)


CASES = [pytest.param(name, shape, id=f"{name}-{shape}", marks=_marks(name))
         for name in KERNELS for shape in generate(SPECS[name], level="small")]


@pytest.fixture(scope="module", autouse=True)
def _default_builds_compiled() -> None:
    """Every rung's default build compiling side by side from the module's start, on threads: each test would
    otherwise compile its rung at its first launch, one after another (about 2 s each on an H100 machine, more
    while sanitizer children run beside the tests). The first tests run while the later rungs compile; a launch
    whose build is still compiling waits for it. A build that does not compile is left to the tests that
    launch it, which fail with the compiler's message. Not in a sanitizer child, which compiles only what its
    own tests launch (from CuPy's cache when this process compiled it first)."""
    if os.environ.get("PIPECHECK_CHILD"):
        return
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return
    except Exception:  # no CuPy or no CUDA device: every test here skips with the reason
        return
    from reference_kernels.cuda.launch import prebuild_in_background

    prebuild_in_background([(name, None, None) for name in KERNELS])


def _require_shared_memory(name: str) -> None:
    """Skip a kernel whose default build needs more shared memory per block than this GPU allows
    (k6 and k3_cp_async_wide on sm_86 / sm_89); the launcher would refuse it with a CudaLaunchError."""
    import cupy

    from reference_kernels.cuda.launch import dynamic_smem, kernel_source, source_stages

    k = KERNELS[name]
    rt = cupy.cuda.runtime
    limit = int(rt.deviceGetAttribute(rt.cudaDevAttrMaxSharedMemoryPerBlockOptin, cupy.cuda.Device().id))
    need = dynamic_smem(k, source_stages(kernel_source(k), k))
    if need > limit:
        pytest.skip(f"{name} needs {need} bytes of dynamic shared memory per block; this GPU allows {limit}")


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "shape"), CASES)
def test_reference_kernel_passes_every_check(pipecheck, name, shape) -> None:
    pipecheck.require_gpu("CUDA ladder kernel", kernel=name)
    pytest.importorskip("cupy")
    _require_shared_memory(name)
    _record_exclusions(pipecheck, name)
    results = pipecheck.check_kernel(SPECS[name], shape)
    assert results, "check_kernel ran no check"


@pytest.mark.gpu
@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in KERNELS])
def test_reference_kernel_at_a_large_ragged_shape(pipecheck, name) -> None:
    pipecheck.require_gpu("CUDA ladder kernel", kernel=name)
    pytest.importorskip("cupy")
    _require_shared_memory(name)
    _record_exclusions(pipecheck, name)
    from pytest_pipecheck.model.shape import Shape

    pipecheck.check_coverage(SPECS[name], Shape(M=1000, N=777, K=32 * 9 + 5))


# Timing under a sanitizer measures the sanitizer, and the kernels timed here are the ones the tests above
# already run under racecheck and synccheck at every generated shape: no sanitizer for this one.
@pytest.mark.gpu
@pytest.mark.pipecheck(sanitizer="none")
def test_k3_stage_sweep_against_the_cost_model(pipecheck) -> None:
    """k3 at 4096^3 with 1..4 stages, each next to the pipelining cost model's prediction from its own
    load-only and compute-only builds (max(load, compute) per K tile plus fill and drain): the sweep
    the HTML report plots. The default build (2 stages, chosen for the sm_86 cliff demonstration)
    is not the fastest on sm_90, so the sweep records rather than gates the choice."""
    pipecheck.require_gpu("perf:stage_sweep", kernel="k3_cp_async")
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("torch")
    from reference_kernels.cuda.launch import gemm, prebuild

    pipecheck.skip_check("sanitizer", "timing test: a sanitizer would time itself; k3 is sanitized by "
                         "test_reference_kernel_passes_every_check", kernel="k3_cp_async")
    macros = ({}, {"PIPECHECK_LOAD_ONLY": 1}, {"PIPECHECK_COMPUTE_ONLY": 1})
    # Everything untimed comes before the test asks for the GPU alone: while the sanitizer children of the run
    # still work beside the tests, this test stops at that question and runs again after the other tests, and
    # what it compiled is kept by this process (the sweep's 12 builds, at once; CuPy's kernels for the inputs
    # and the comparison; the library's matrix product), so the run alone times and compiles nothing else.
    prebuild("k3_cp_async", [(s, m) for s in (1, 2, 3, 4) for m in macros])
    n = 4096
    rng = cupy.random.default_rng(0)
    a = rng.integers(-3, 4, size=(n, n)).astype(cupy.float16)
    b = rng.integers(-3, 4, size=(n, n)).astype(cupy.float16)
    c = cupy.empty((n, n), dtype=cupy.float32)
    gemm("k3_cp_async", a, b, c, stages=3)
    assert bool(cupy.all(c == a.astype(cupy.float32) @ b.astype(cupy.float32))), "k3 result differs"
    pipecheck.require_gpu("perf:stage_sweep", kernel="k3_cp_async", alone=True)

    def variant(defines: dict[str, int]):  # type: ignore[no-untyped-def]
        return lambda s: gemm("k3_cp_async", a, b, c, stages=s, defines=defines)

    result = pipecheck.check_stage_sweep(
        variant(macros[0]), (1, 2, 3, 4), kernel="k3_cp_async", flops=2.0 * n**3,
        load_only=variant(macros[1]), compute_only=variant(macros[2]),
        tiles=n // 32, n_samples=30, warmup_s=0.1, settle_s=0.1)  # each count's warm-up keeps the GPU busy too
    rows = {r["stages"]: r for r in result.details["stage_sweep"]}
    assert all(rows[s]["measured_us"] and rows[s]["predicted_us"] for s in (2, 3, 4)), rows
    # pipelining pays: the best depth beats the unpipelined single stage clearly
    assert rows[1]["measured_us"] > 1.15 * min(rows[s]["measured_us"] for s in (2, 3, 4)), rows
