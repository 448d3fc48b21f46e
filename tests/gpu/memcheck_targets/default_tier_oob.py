"""Target suite for tests/gpu/test_default_tier_oob_gpu.py: reads past a tensor whose values are discarded,
under the GPU tier's default tools (no ``--pipecheck-sanitizer``).

Copied into a pytester directory as ``test_default_tier_oob.py``. Four kernels, each as a mutant with one
masked-load bug and as its masked twin; in every mutant the values read out of bounds never reach an output,
so the normal run's coverage passes (the guard bands around each tensor are valid memory) and only memcheck,
whose child allocates each tensor exactly, sees the reads:

* ``triton_gemm``: the bundled Triton mutant ``gemm_a_rows_unmasked`` (A's load has no M mask; the masked
  store drops the rows past M) against the mutants' base;
* ``cuda_gemm``: the CUDA ladder mutant ``a_rows_unguarded`` (k3's edge-tile copies of A are not bounded by M)
  against k3;
* ``triton_reduce``: a row sum that walks N's tiles from the end; the mutant masks the value (``tl.where``)
  instead of the load, so the last tile reads before the start of each row, and of ``x`` for row 0;
* ``cuda_reduce``: a row sum in chunks of 4; the mutant reads each chunk whole and drops the lanes past N
  after the read, so the last row's tail reads past the end of ``x``.

The mutants' buggy lines carry ``# BUG`` / ``// BUG``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402

GEMM_SHAPE = Shape(M=129, N=128, K=64)  # M: one row into the second 128-row tile
REDUCE_SHAPE = Shape(M=33, N=301)  # N: not a multiple of the tile (128) nor of the CUDA chunk (4)


# ----------------------------------------------------------------------------- GEMMs: the bundled mutants


def _triton_gemm(mutant: bool) -> tuple[KernelSpec, Shape]:
    from reference_kernels.mutants import triton as triton_mutants

    built = triton_mutants.load("gemm_a_rows_unmasked") if mutant else triton_mutants.base()
    return built.spec("cuda"), GEMM_SHAPE


def _cuda_gemm(mutant: bool) -> tuple[KernelSpec, Shape]:
    from reference_kernels.cuda.specs import mutant_spec, spec

    return (mutant_spec("a_rows_unguarded") if mutant else spec("k3_cp_async")), GEMM_SHAPE


# ----------------------------------------------------------------------------- a Triton row sum


@triton.jit
def row_sum_reverse(x_ptr, out_ptr, M, N, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    STAGES: tl.constexpr, LOW_MASK: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows
    in_m = rm[:, None] < M
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in tl.range(0, tl.cdiv(N, BLOCK_N), num_stages=STAGES):
        rn = N - (t + 1) * BLOCK_N + tl.arange(0, BLOCK_N)  # tiles from the end: the last starts before column 0
        ptrs = x_ptr + rm[:, None] * stride_m + rn[None, :] * stride_n
        if LOW_MASK:
            x = tl.load(ptrs, mask=in_m & (rn[None, :] >= 0), other=0.0)
        else:
            x = tl.load(ptrs, mask=in_m, other=0.0)  # BUG: the columns before 0 are read
            x = tl.where(rn[None, :] >= 0, x, 0.0)  # the mask applied to the value, not to the read
        acc += tl.sum(x, axis=1)
    tl.store(out_ptr + rm, acc, mask=rm < M)


def _triton_reduce(mutant: bool) -> tuple[KernelSpec, Shape]:
    block_m, block_n = 16, 128

    def launch(arrays, dims):
        x, out = arrays["x"], arrays["out"]
        m, n = x.shape
        row_sum_reverse[(triton.cdiv(m, block_m),)](x, out, m, n, x.stride(0), x.stride(1), BLOCK_M=block_m,
                                                     BLOCK_N=block_n, STAGES=3, LOW_MASK=not mutant)

    return KernelSpec(name=f"triton_row_sum_reverse{'_mutant' if mutant else ''}", launch=launch,
                      reference=lambda arrays, dims: {"out": arrays["x"].double().sum(dim=1)},
                      tensors=[Tensor("x", ("M", "N"), "float32", init="randint"),
                               Tensor("out", ("M",), "float32", role="output")],
                      tiles={"M": block_m, "N": block_n}, loop_dim="N", stages=3), REDUCE_SHAPE


# ----------------------------------------------------------------------------- a CUDA row sum (CuPy)

_ROW_SUM = r"""
extern "C" __global__ void row_sum4(const float* __restrict__ x, float* __restrict__ out, int M, int N,
                                    long long ld) {
  __shared__ float part[128];  // one block of 128 threads per row
  const float* xr = x + blockIdx.x * ld;
  float acc = 0.f;
  for (int c = threadIdx.x * 4; c < N; c += blockDim.x * 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#ifdef PIPECHECK_MUTANT
      float v;  // BUG: the whole chunk is read, past N at the row's tail
      asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(xr + c + j));
      acc += (c + j < N) ? v : 0.f;  // the bound applied to the value, not to the read
#else
      acc += (c + j < N) ? xr[c + j] : 0.f;
#endif
    }
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""


def _cuda_reduce(mutant: bool) -> tuple[KernelSpec, Shape]:
    def launch(arrays, dims):
        import cupy
        import numpy as np

        x, out = arrays["x"], arrays["out"]
        kernel = cupy.RawKernel(_ROW_SUM, "row_sum4", options=("-DPIPECHECK_MUTANT",) if mutant else ())
        m, n = x.shape
        kernel((m,), (128,), (x, out, np.int32(m), np.int32(n), np.int64(x.strides[0] // x.itemsize)))

    def reference(arrays, dims):
        import cupy

        return {"out": cupy.asarray(arrays["x"]).astype(cupy.float64).sum(axis=1)}

    return KernelSpec(name=f"cuda_row_sum4{'_mutant' if mutant else ''}", launch=launch, reference=reference,
                      tensors=[Tensor("x", ("M", "N"), "float32", init="randint"),
                               Tensor("out", ("M",), "float32", role="output")],
                      tiles={"M": 1, "N": 512}, loop_dim="N", backend="cupy"), REDUCE_SHAPE


KERNELS = {"triton_gemm": _triton_gemm, "cuda_gemm": _cuda_gemm, "triton_reduce": _triton_reduce,
           "cuda_reduce": _cuda_reduce}


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_mutant(pipecheck, kernel):
    spec, shape = KERNELS[kernel](True)
    pipecheck.check_kernel(spec, shape)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_twin(pipecheck, kernel):
    spec, shape = KERNELS[kernel](False)
    pipecheck.check_kernel(spec, shape)
