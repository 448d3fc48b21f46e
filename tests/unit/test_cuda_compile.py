"""CPU tier for the CUDA ladder: every kernel and every mutant compiles for sm_80/86/89/90, and the
reference kernels use the resources their headers promise (no spills but the one SPILL_ALLOWANCE names,
designed shared memory, the occupancy floor they are built for). Compiles once per (source, arch), two
at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck import occupancy, toolkit
from reference_kernels.cuda.launch import (
    CUDA_DIR,
    KERNELS,
    CudaKernel,
    dynamic_smem,
    kernel_source,
    source_stages,
)
from reference_kernels.mutants.cuda import MUTANTS

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
# A mutant is its kernel with one edit and no arch-specific code (no __CUDA_ARCH__ branch in any rung): it
# compiles for the oldest target and for sm_90 (where the GPU tier runs it), not for every arch between
MUTANT_ARCHS = ("sm_80", "sm_90")

# tests/conftest.py: the CPU job runs it, the GPU tier leaves it out (nvcc compiles for named targets, no device: the same toolkit on both machines)
pytestmark = [pytest.mark.cpu_only,
              pytest.mark.skipif(toolkit.find_tool("nvcc") is None,
                                 reason=f"nvcc not found ({toolkit.NOT_FOUND_HINT})")]

# static __shared__ bytes each reference kernel declares (k4..k6: the cuda::pipeline shared state only)
STATIC_SMEM = {"k1_sync_tiled": 18944, "k2_register_prefetch": 37888, "k3_cp_async": 0, "k3_cp_async_wide": 0,
               "k4_cuda_pipeline": 64, "k5_warp_specialized": 64, "k6_loader_compute_storer": 80}  # k6: + its two hand-off mbarriers
# blocks/SM each kernel is designed to reach at its default stage count. 0: the default does not fit the
# architecture's shared memory (k3_cp_async_wide's 4 stages and k6's 3 need more than sm_86 / sm_89's
# 99 KB per block; the launcher refuses them there with a CudaLaunchError, and they must still compile)
FLOOR = {
    "k1_sync_tiled": dict.fromkeys(ARCHS, 2),
    "k2_register_prefetch": dict.fromkeys(ARCHS, 2),
    "k3_cp_async": dict.fromkeys(ARCHS, 2),
    "k3_cp_async_wide": {"sm_80": 1, "sm_86": 0, "sm_89": 0, "sm_90": 1},
    "k4_cuda_pipeline": {"sm_80": 2, "sm_86": 1, "sm_89": 1, "sm_90": 2},
    "k5_warp_specialized": {"sm_80": 2, "sm_86": 1, "sm_89": 1, "sm_90": 2},
    "k6_loader_compute_storer": {"sm_80": 1, "sm_86": 0, "sm_89": 0, "sm_90": 1},
}
# Spill bytes (stores + loads) a kernel may have on one architecture; every other pair must not spill.
# k6 on sm_80: 10 warps cap a thread at 168 registers and sm_80's ptxas (nvcc 13.0) reloads a few
# loop-invariant scalars once per K tile (74 B stored, 88 B loaded); sm_86, sm_89 and sm_90 do not spill.
SPILL_ALLOWANCE = {("k6_loader_compute_storer", "sm_80"): 256}


def _defines(kernel: CudaKernel) -> dict[str, str]:
    """The -D macros the launcher builds ``kernel`` with at its default stage count."""
    defs = {k: "" if v is None else str(v) for k, v in kernel.defines}
    if kernel.default_stages is not None and kernel.stage_bytes:
        defs["PIPECHECK_STAGES"] = str(kernel.default_stages)
    return defs


def _compile(source: str, arch: str, defines: dict[str, str] | None = None) -> Any:
    from pytest_pipecheck.resources.cubin import compile_resources

    return compile_resources(source, arch, options=("-std=c++17",), include_dirs=(str(CUDA_DIR),),
                             defines=defines)


@pytest.fixture(scope="session")
def compiled() -> dict[tuple[str, str], Any]:
    """{(name, arch): resources dict or the exception} for every kernel and mutant."""
    jobs: list[tuple[str, str, str, dict[str, str]]] = []
    for name, k in KERNELS.items():
        jobs += [(name, arch, kernel_source(name), _defines(k)) for arch in ARCHS]
    for name, m in MUTANTS.items():
        jobs += [(f"mutant:{name}", arch, m.source(), _defines(m.kernel)) for arch in MUTANT_ARCHS]

    def run(job: tuple[str, str, str, dict[str, str]]) -> Any:
        try:
            return _compile(job[2], job[1], job[3])
        except Exception as exc:  # reported by the test that needs it
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, jobs))
    return {(n, a): r for (n, a, _, _), r in zip(jobs, results)}


def _one(compiled: dict[tuple[str, str], Any], name: str, arch: str, entry: str) -> Any:
    res = compiled[(name, arch)]
    if isinstance(res, Exception):
        pytest.fail(f"{name} does not compile for {arch}: {res}")
    assert entry in res, f"{name} on {arch}: kernel {entry} not in ptxas output ({sorted(res)})"
    return res[entry]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_reference_kernel_resources(compiled: dict[tuple[str, str], Any], name: str, arch: str) -> None:
    k = KERNELS[name]
    r = _one(compiled, name, arch, k.entry)
    assert r.registers > 0
    allowed = SPILL_ALLOWANCE.get((name, arch), 0)
    assert r.spills <= allowed, (f"{name} spills on {arch}: {r.spill_stores} B stored, {r.spill_loads} B loaded "
                                 f"(allowed: {allowed} B)")
    assert r.static_smem == STATIC_SMEM[name], f"{name} on {arch}: static smem {r.static_smem}"
    stages = source_stages(kernel_source(name), k)
    occ = occupancy(arch, k.threads, r.registers, r.static_smem, dynamic_smem(k, stages))
    assert occ.blocks_per_sm >= FLOOR[name][arch], (
        f"{name} (stages={stages}) on {arch}: {occ.blocks_per_sm} blocks/SM < floor {FLOOR[name][arch]}")


@pytest.mark.parametrize("arch", MUTANT_ARCHS)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_compiles(compiled: dict[tuple[str, str], Any], name: str, arch: str) -> None:
    r = _one(compiled, f"mutant:{name}", arch, MUTANTS[name].entry)
    assert r.registers > 0


def test_no_rung_has_arch_specific_code() -> None:
    """What MUTANT_ARCHS relies on: the same source for every target."""
    for path in sorted((Path(__file__).resolve().parents[2] / "reference_kernels" / "cuda").glob("*.cu*")):
        assert "__CUDA_ARCH__" not in path.read_text(), path.name


def test_compile_error_names_the_target() -> None:
    from pytest_pipecheck.resources.cubin import CompileError

    broken = kernel_source("k1_sync_tiled").replace("pc::zero_acc(acc);", "pc::zero_acc(acc)", 1)
    with pytest.raises(CompileError) as info:
        _compile(broken, "sm_80")
    assert "sm_80" in str(info.value)


@pytest.mark.parametrize("name", ["k3_cp_async_wide", "k6_loader_compute_storer"])
def test_every_stage_count_of_the_one_block_per_sm_kernels_compiles_without_spills(name: str) -> None:
    """The 1-block/SM designs at each stage count they accept, on sm_90 (their target)."""
    k = KERNELS[name]
    stages = range(k.min_stages, k.max_stages + 1)

    def run(s: int) -> Any:
        return _compile(kernel_source(name), "sm_90", {**_defines(k), "PIPECHECK_STAGES": str(s)})[k.entry]

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(stages, pool.map(run, stages)))
    for s, r in results.items():
        assert r.spills == 0, f"{name} stages={s} spills on sm_90: {r.spill_stores} B / {r.spill_loads} B"
        occ = occupancy("sm_90", k.threads, r.registers, r.static_smem, dynamic_smem(k, s))
        assert occ.blocks_per_sm == 1, f"{name} stages={s} on sm_90: {occ}"
