"""CPU tier for the CUDA ladder: every kernel and every mutant compiles for sm_80/86/89/90, and the
reference kernels use the resources their headers promise (no spills, designed shared memory, the
occupancy floor they are built for). Compiles once per (source, arch), two at a time."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pytest_pipecheck import occupancy
from reference_kernels.cuda.launch import CUDA_DIR, KERNELS, dynamic_smem, kernel_source, source_stages
from reference_kernels.mutants.cuda import MUTANTS

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

# static __shared__ bytes each reference kernel declares (k4..k6: the cuda::pipeline shared state only)
STATIC_SMEM = {"k1_sync_tiled": 18944, "k2_register_prefetch": 37888, "k3_cp_async": 0,
               "k4_cuda_pipeline": 64, "k5_warp_specialized": 64, "k6_loader_compute_storer": 64}
# blocks/SM each kernel is designed to reach at its default stage count
FLOOR = {
    "k1_sync_tiled": dict.fromkeys(ARCHS, 2),
    "k2_register_prefetch": dict.fromkeys(ARCHS, 2),
    "k3_cp_async": dict.fromkeys(ARCHS, 2),
    "k4_cuda_pipeline": {"sm_80": 2, "sm_86": 1, "sm_89": 1, "sm_90": 2},
    "k5_warp_specialized": {"sm_80": 2, "sm_86": 1, "sm_89": 1, "sm_90": 2},
    "k6_loader_compute_storer": {"sm_80": 2, "sm_86": 1, "sm_89": 1, "sm_90": 2},
}


def _compile(source: str, arch: str) -> Any:
    from pytest_pipecheck.resources.cubin import compile_resources

    return compile_resources(source, arch, options=("-std=c++17",), include_dirs=(str(CUDA_DIR),))


@pytest.fixture(scope="session")
def compiled() -> dict[tuple[str, str], Any]:
    """{(name, arch): resources dict or the exception} for every kernel and mutant."""
    jobs: list[tuple[str, str, str]] = []
    for name in KERNELS:
        jobs += [(name, arch, kernel_source(name)) for arch in ARCHS]
    for name, m in MUTANTS.items():
        jobs += [(f"mutant:{name}", arch, m.source()) for arch in ARCHS]

    def run(job: tuple[str, str, str]) -> Any:
        try:
            return _compile(job[2], job[1])
        except Exception as exc:  # reported by the test that needs it
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, jobs))
    return {(n, a): r for (n, a, _), r in zip(jobs, results)}


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
    assert r.spills == 0, f"{name} spills on {arch}: {r.spill_stores} B stored, {r.spill_loads} B loaded"
    assert r.static_smem == STATIC_SMEM[name], f"{name} on {arch}: static smem {r.static_smem}"
    stages = source_stages(kernel_source(name), k)
    occ = occupancy(arch, k.threads, r.registers, r.static_smem, dynamic_smem(k, stages))
    assert occ.blocks_per_sm >= FLOOR[name][arch], (
        f"{name} (stages={stages}) on {arch}: {occ.blocks_per_sm} blocks/SM < floor {FLOOR[name][arch]}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_compiles(compiled: dict[tuple[str, str], Any], name: str, arch: str) -> None:
    r = _one(compiled, f"mutant:{name}", arch, MUTANTS[name].entry)
    assert r.registers > 0


def test_compile_error_names_the_target() -> None:
    from pytest_pipecheck.resources.cubin import CompileError

    broken = kernel_source("k1_sync_tiled").replace("pc::zero_acc(acc);", "pc::zero_acc(acc)", 1)
    with pytest.raises(CompileError) as info:
        _compile(broken, "sm_80")
    assert "sm_80" in str(info.value)
