"""Mutant of reference_kernels/triton/gemm.py: the K-tail loads are unmasked.

The bug: the loads of A and B drop the K mask, so the partial last K tile reads past the end of
each row of A and past the last row of B (pipecheck's NaN guard bands turn that into NaN).
Expected to be caught by the coverage check, with a message containing "NaN where the reference is finite".
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.spec import KernelSpec, Shape
from reference_kernels.triton.gemm import make_spec

BUG = "unmasked tail load: A and B are loaded without the K mask (assumes K % BLOCK_K == 0)"
CAUGHT_BY = "coverage"
MESSAGE = "NaN where the reference is finite"


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
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    in_m = rm[:, None] < M
    in_n = rn[None, :] < N
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for _kt in range(0, k_tiles):
        a = tl.load(a_tile, mask=in_m, other=0.0)  # BUG: no K mask
        b = tl.load(b_tile, mask=in_n, other=0.0)  # BUG: no K mask
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=in_m & in_n)


def spec(device: str = "cpu", **kw: Any) -> KernelSpec:
    """This mutant's spec (same tiles and stages as the reference GEMM on ``device``)."""
    return make_spec("mutant_gemm_unmasked_tail_load", kernel, device, description=BUG, **kw)


def shape(device: str = "cpu") -> Shape | None:
    """None: any generated shape with the boundary this bug needs shows it."""
    del device  # the generated shapes suffice
    return None
