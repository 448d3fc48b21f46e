"""The base of the Triton GEMM mutants: the reference GEMM's ``masked`` path as a kernel of its own.

This is the loop of :func:`reference_kernels.triton.gemm.gemm_kernel` with every load masked
(``row < M``, ``column < N``, ``k < K``, ``other=0``) and a masked store, without the path switches,
so :func:`reference_kernels.triton.gemm.launch_gemm` always runs it (and every mutant) as it is.
Each mutant of :mod:`reference_kernels.mutants.triton` is this file with one named, exact text edit,
written to a generated module and compiled with ``triton.jit`` from there: keep this file
self-contained (it imports only triton) and keep each snippet a mutant replaces occurring once.
tests/unit/test_triton_mutants.py checks that this base passes every check the mutants fail.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def kernel(a_ptr, b_ptr, c_ptr, M, N, K,
           stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)          # (BLOCK_M,) output rows
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)          # (BLOCK_N,) output columns
    rk = tl.arange(0, BLOCK_K)                             # (BLOCK_K,)
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for kt in range(0, k_tiles):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_tile, mask=in_m & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=in_m & in_n)
