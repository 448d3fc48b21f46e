"""Target suite for tests/gpu/test_memcheck_exact_gpu.py: a Triton GEMM whose A load drops its row mask.

Copied into a pytester directory as ``test_oob_reads.py`` and run with ``pytest --pipecheck
--pipecheck-sanitizer=memcheck``. The unmasked load reads the rows of A past M; the masked store never
writes the rows of C past M, so the values read are discarded and the normal run's coverage check, whose
guard bands are valid memory, passes on the GPU. memcheck, whose child allocates each tensor exactly, must
report the read and name 'a'. The twin masks its load and is clean. The bug's line carries ``# BUG``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
SHAPE = Shape(M=129, N=128, K=64)  # M: 3 tiles of 64, the last holding one row


@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROW_MASK: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a_ptrs = a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak
        in_k = (k0 + rk)[None, :] < K
        if ROW_MASK:
            a = tl.load(a_ptrs, mask=(rm[:, None] < M) & in_k, other=0.0)
        else:
            a = tl.load(a_ptrs, mask=in_k, other=0.0)  # BUG: no row mask: rows past M are read
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _spec(row_mask: bool) -> KernelSpec:
    def launch(arrays, dims):
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        M, K = a.shape
        N = b.shape[1]
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        gemm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                   BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, ROW_MASK=row_mask)

    return KernelSpec(name=f"gemm_rowmask{int(row_mask)}", launch=launch,
                      reference=lambda arrays, dims: {"c": arrays["a"].double() @ arrays["b"].double()},
                      tensors=[Tensor("a", ("M", "K")), Tensor("b", ("K", "N")),
                               Tensor("c", ("M", "N"), role="output")],
                      tiles={"M": BLOCK_M, "N": BLOCK_N, "K": BLOCK_K}, loop_dim="K")


def test_a_rows_unmasked(pipecheck):
    pipecheck.check_coverage(_spec(row_mask=False), SHAPE)


def test_a_rows_masked(pipecheck):
    pipecheck.check_coverage(_spec(row_mask=True), SHAPE)
