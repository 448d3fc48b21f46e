"""The simple pointer-based Triton GEMM that tests and GPU scripts share.

``gemm_kernel`` computes ``C = A @ B`` (fp16 in, fp32 accumulate, fp16 out) one ``BLOCK_M x BLOCK_N``
tile per program on a 2-D grid, walking K in ``BLOCK_K`` steps. Every load and the store are masked
against M, N and K, so any shape is safe. Its K loop is software-pipelined by Triton (``num_stages``)
only when the pointers and strides carry the divisibility the JIT derives from real arguments, which
makes it the reference for the stage sweep, the resource and SASS inspectors, and the perf gate.

Preconditions: row-major or strided fp16 ``A (M, K)``, ``B (K, N)``, ``C (M, N)``; grid
``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``. It lives in a real file so ``inspect.getsource`` and
fresh-process compiles see it.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["gemm_kernel"]


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] + k * BLOCK_K < K), other=0.0)
        y = tl.load(b, mask=(rk[:, None] + k * BLOCK_K < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))
