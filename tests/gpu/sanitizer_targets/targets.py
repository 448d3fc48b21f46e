"""Target tests for tests/gpu/test_sanitizer_gpu.py: one seeded bug each, plus clean kernels.

Copied into a pytester directory as ``test_targets.py`` and run with ``--pipecheck``. A buggy kernel
is launched only inside the sanitizer child (PIPECHECK_CHILD is set there): in the parent, a hang
would hang the run and a memcheck/synccheck abort would kill the CUDA context for later tests.
Each bug line carries ``// BUG`` so the test can compute the line the sanitizer must name.
"""

from __future__ import annotations

import os

import pytest

cp = pytest.importorskip("cupy")

OPTS = ("--generate-line-info", "--std=c++17")

RACE = r"""
extern "C" __global__ void racy_tile(const float* in, float* out) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    tile[t] = in[t];
    out[t] = tile[(t + 32) % 256];  // BUG: no __syncthreads between the write and this read
}
"""
CLEAN_TILE = RACE.replace("racy_tile", "clean_tile").replace("    out[t]", "    __syncthreads();\n    out[t]")
CPASYNC = r"""
#include <cuda_pipeline.h>
extern "C" __global__ void cpasync_nowait(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x;
    __pipeline_memcpy_async(&s[t], &in[t], sizeof(float));
    __pipeline_commit();
    __syncthreads();
    out[t] = s[(t + 1) % 256];  // BUG: read before __pipeline_wait_prior(0)
}
"""
CPASYNC_CLEAN = CPASYNC.replace("cpasync_nowait", "cpasync_waits").replace(
    "    __syncthreads();", "    __pipeline_wait_prior(0);\n    __syncthreads();")
DIVERGENT = r"""
extern "C" __global__ void divergent_barrier(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();  // BUG: half a warp reaches the barrier
    }
    out[threadIdx.x] = 1.0f;
}
"""
TAIL = r"""
extern "C" __global__ void tail_oob(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 2.0f * x[i];  // BUG: no `if (i < n)` for the ragged last block
}
"""
UNINIT = r"""
extern "C" __global__ void uninit_read(const float* in, float* out) {
    out[threadIdx.x] = in[threadIdx.x] + 1.0f;  // BUG: in was never written
}
"""
UNINIT_SHARED = r"""
extern "C" __global__ void uninit_shared(const float* in, float* out) {
    __shared__ float s[256];
    if (threadIdx.x < 128) s[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x] + 1.0f;  // BUG: threads 128-255 read shared memory nobody wrote
}
"""
# One bulk copy (the TMA engine's cp.async.bulk, sm_90+) of 1 KiB from global into shared memory, waited
# on with an mbarrier; the source starts 128 floats before the end of a 256-float buffer.
BULK_OOB = r"""
extern "C" __global__ void bulk_copy_oob(const float* in, float* out, int n) {
    __shared__ alignas(128) float s[256];
    __shared__ alignas(8) unsigned long long bar;
    unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
    unsigned ss = (unsigned)__cvta_generic_to_shared(s);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sbar));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sbar), "r"(1024) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(ss), "l"(in + n - 128), "r"(1024), "r"(sbar) : "memory");  // BUG: 128 floats past the end
    }
    asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
                 " @!p bra WAIT_%=;\n}" :: "r"(sbar) : "memory");
    out[threadIdx.x] = s[threadIdx.x];
}
"""
# One warpgroup (128 threads) multiplies a 64x16 fp16 tile of A by a 16x8 tile of B with one
# wgmma.mma_async (sm_90a), both operands read from shared memory through matrix descriptors with no
# swizzle: 8x8 core matrices of 128 contiguous bytes, the next one along K at +128 bytes (the leading
# byte offset), the next 8 rows at +256 (the stride byte offset). WGMMA_SKIP is the same kernel with the
# classic guard bug: the last warp of the warpgroup does not issue the wgmma (a kernel that may hang
# without the sanitizer, so only the child runs it); WGMMA_DESC_OOB points B's descriptor past the
# block's shared memory. compute-sanitizer reports both only with --check-warpgroup-mma (default yes in
# 2026.4.0): synccheck the first ("Warpgroup MMA sequence error"), memcheck the second.
WGMMA = r"""
#include <cuda_fp16.h>
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem) {
    unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16)
           | ((unsigned long long)(256 >> 4) << 32);
}
extern "C" __global__ void wgmma_tile(const __half* a, const __half* b, float* d) {
    __shared__ alignas(256) __half sa[64 * 16];
    __shared__ alignas(256) __half sb[8 * 16];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    for (int i = t; i < 64 * 16; i += 128) {  // A row-major 64x16 into core-matrix order
        int m = i / 16, k = i % 16;
        sa[((m / 8) * 2 + k / 8) * 64 + (m % 8) * 8 + k % 8] = a[i];
    }
    for (int i = t; i < 16 * 8; i += 128) {  // B row-major 16x8, stored N-major (K contiguous)
        int k = i / 8, n = i % 8;
        sb[(k / 8) * 64 + n * 8 + k % 8] = b[i];
    }
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    unsigned long long da = wgmma_desc(sa), db = wgmma_desc(sb);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    {  // the whole warpgroup issues the wgmma
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
                     " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}"
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(0) : "memory");
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    const int r = warp * 16 + lane / 4, c = (lane % 4) * 2;
    d[r * 8 + c] = d0;
    d[r * 8 + c + 1] = d1;
    d[(r + 8) * 8 + c] = d2;
    d[(r + 8) * 8 + c + 1] = d3;
}
"""
WGMMA_SKIP = WGMMA.replace("wgmma_tile", "wgmma_skips_a_warp").replace(
    "    {  // the whole warpgroup issues the wgmma", "    if (warp < 3) {  // BUG: the last warp of the warpgroup does not issue the wgmma")
WGMMA_DESC_OOB = WGMMA.replace("wgmma_tile", "wgmma_desc_oob").replace(
    "db = wgmma_desc(sb);", "db = wgmma_desc(sb) + (16384 >> 4);  // BUG: B's descriptor starts 16 KiB past sb")
NEVER_WAITS = r"""
#include <cuda/pipeline>
#include <cooperative_groups.h>
extern "C" __global__ void ws_never_waits(const float* in, float* out, int tiles) {
    namespace cg = cooperative_groups;
    __shared__ float buf[2][128];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, 2> state;
    auto block = cg::this_thread_block();
    const bool producer = threadIdx.x < 32;
    auto pipe = cuda::make_pipeline(block, &state,
                                    producer ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer);
    float acc = 0.0f;
    for (int tile = 0; tile < tiles; ++tile) {
        int stage = tile % 2;
        if (producer) {
            pipe.producer_acquire();
            for (int i = threadIdx.x; i < 128; i += 32)
                cuda::memcpy_async(&buf[stage][i], &in[tile * 128 + i], sizeof(float), pipe);
            pipe.producer_commit();
        } else {
            acc += buf[stage][threadIdx.x - 32];  // BUG: no pipe.consumer_wait() before this read
            pipe.consumer_release();
        }
    }
    if (!producer) out[threadIdx.x - 32] = acc;
}
"""


def bug_line(source: str) -> int:
    """1-based line of the ``// BUG`` comment in ``source``."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if "// BUG" in line)


def _in_child() -> bool:
    return bool(os.environ.get("PIPECHECK_CHILD"))


def _kernel(src: str, name: str):  # type: ignore[no-untyped-def]
    return cp.RawModule(code=src, options=OPTS).get_function(name)


def _sync() -> None:
    cp.cuda.runtime.deviceSynchronize()


def _buggy(src: str, name: str, threads: int, *args, blocks: int = 1) -> None:  # type: ignore[no-untyped-def]
    """Launch a buggy kernel, only in the sanitizer child (see the module docstring), and wait for it."""
    if not _in_child():
        return
    _kernel(src, name)((blocks,), (threads,), args)
    _sync()


def _tile(src: str, name: str):  # type: ignore[no-untyped-def]
    """One block of 256 threads over in = 0..255; returns out (a race's result is whatever it is)."""
    y = cp.zeros(256, dtype=cp.float32)
    _kernel(src, name)((1,), (256,), (cp.arange(256, dtype=cp.float32), y))
    _sync()
    return y


@pytest.mark.pipecheck(sanitizer="all")
def test_clean_tile(pipecheck):  # type: ignore[no-untyped-def]
    assert float(_tile(CLEAN_TILE, "clean_tile")[0]) == 32.0


@pytest.mark.pipecheck(sanitizer="all")
def test_cpasync_clean(pipecheck):  # type: ignore[no-untyped-def]
    assert float(_tile(CPASYNC_CLEAN, "cpasync_waits")[0]) == 1.0


@pytest.mark.pipecheck(sanitizer="racecheck")
def test_missing_syncthreads(pipecheck):  # type: ignore[no-untyped-def]
    _tile(RACE, "racy_tile")


@pytest.mark.pipecheck(sanitizer="racecheck")
def test_missing_pipeline_wait(pipecheck):  # type: ignore[no-untyped-def]
    _tile(CPASYNC, "cpasync_nowait")


@pytest.mark.pipecheck(sanitizer="synccheck")
def test_divergent_barrier(pipecheck):  # type: ignore[no-untyped-def]
    _buggy(DIVERGENT, "divergent_barrier", 32, cp.zeros(32, dtype=cp.float32))


@pytest.mark.pipecheck(sanitizer="memcheck")
def test_oob_tail(pipecheck):  # type: ignore[no-untyped-def]
    n = 200
    _buggy(TAIL, "tail_oob", 128, cp.ones(n, dtype=cp.float32), cp.zeros(n, dtype=cp.float32), cp.int32(n), blocks=2)


@pytest.mark.pipecheck(sanitizer="initcheck")
def test_uninit_read(pipecheck):  # type: ignore[no-untyped-def]
    _buggy(UNINIT, "uninit_read", 32, cp.empty(32, dtype=cp.float32), cp.zeros(32, dtype=cp.float32))


@pytest.mark.pipecheck(sanitizer="initcheck")
def test_uninit_shared_read(pipecheck):  # type: ignore[no-untyped-def]
    """Seen only with ``--initcheck-address-space shared|all`` (compute-sanitizer 2025.4 and newer), which
    pipecheck passes to the versions that have it."""
    _buggy(UNINIT_SHARED, "uninit_shared", 256, cp.arange(256, dtype=cp.float32), cp.zeros(256, dtype=cp.float32))


@pytest.mark.pipecheck(sanitizer="memcheck")
def test_bulk_copy_out_of_bounds(pipecheck):  # type: ignore[no-untyped-def]
    """A TMA bulk copy reading past its source: memcheck checks bulk copies (``--check-bulk-copy yes``,
    passed explicitly to the versions that have the option)."""
    if cp.cuda.Device().compute_capability < "90":
        pytest.skip("cp.async.bulk needs sm_90 or newer")
    n = 256
    _buggy(BULK_OOB, "bulk_copy_oob", 256, cp.ones(n, dtype=cp.float32), cp.zeros(n, dtype=cp.float32), cp.int32(n))


def _wgmma(src: str, name: str, *, bug: bool):  # type: ignore[no-untyped-def]
    """One warpgroup's wgmma tile (sm_90a, built by nvcc or NVRTC): returns (A, B, D) on the device; a
    buggy build runs only in the sanitizer child and returns None."""
    if cp.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma needs an sm_90 GPU (built for sm_90a)")
    if bug and not _in_child():
        return None
    import tempfile

    from pytest_pipecheck.toolkit import compile_cuda

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compile_cuda(src, "sm_90a", options=("-std=c++17",)).cubin)
        f.flush()
        fn = cp.RawModule(path=f.name).get_function(name)
    a = cp.asarray((cp.arange(64 * 16) % 7 - 3).reshape(64, 16), dtype=cp.float16)
    b = cp.asarray((cp.arange(16 * 8) % 5 - 2).reshape(16, 8), dtype=cp.float16)
    d = cp.full((64, 8), float("nan"), dtype=cp.float32)
    fn((1,), (128,), (a, b, d))
    _sync()
    return a, b, d


@pytest.mark.pipecheck(sanitizer="synccheck,memcheck")
def test_wgmma_clean(pipecheck):  # type: ignore[no-untyped-def]
    a, b, d = _wgmma(WGMMA, "wgmma_tile", bug=False)
    # small integers: the fp32-accumulated product is exact
    assert bool(cp.array_equal(d, a.astype(cp.float32) @ b.astype(cp.float32))), "wgmma tile differs from A @ B"


@pytest.mark.pipecheck(sanitizer="synccheck")
def test_wgmma_warp_skips_the_mma(pipecheck):  # type: ignore[no-untyped-def]
    _wgmma(WGMMA_SKIP, "wgmma_skips_a_warp", bug=True)


@pytest.mark.pipecheck(sanitizer="memcheck")
def test_wgmma_descriptor_past_shared_memory(pipecheck):  # type: ignore[no-untyped-def]
    _wgmma(WGMMA_DESC_OOB, "wgmma_desc_oob", bug=True)


# a hang by design: the watchdog ends it. 20 s covers the kernel's compile (NVRTC, about 1 s) many times over;
# every second above that is a second the GPU tier waits for a kernel that never finishes
@pytest.mark.pipecheck(sanitizer="racecheck", sanitizer_timeout=20)
def test_consumer_never_waits(pipecheck):  # type: ignore[no-untyped-def]
    tiles = 64
    _buggy(NEVER_WAITS, "ws_never_waits", 160, cp.ones(tiles * 128, dtype=cp.float32), cp.zeros(128, dtype=cp.float32),
           cp.int32(tiles))


@pytest.mark.pipecheck(sanitizer="racecheck,synccheck,memcheck")
def test_triton_matmul_clean(pipecheck):  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    M = N = K = 256
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    mm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, BM=64, BN=64, BK=32, num_stages=3)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-1)
