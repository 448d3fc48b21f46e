"""Mutant of reference_kernels/triton/gemm.py: the last K tile is counted twice.

The bug: on the last K step the consumer multiplies the stage it just consumed a second time (as if
the epilogue drained the last ring slot once more, a stage index that wraps one step too far), so the
last K tile is accumulated twice. The second MMA sits inside the loop, under ``kt == k_tiles - 1``:
compiled Triton does not let a loop's block values (``a``, ``b``) be used after the loop (only the
Triton interpreter accepts that), so the bug is written in a form that compiles everywhere.
Expected to be caught by the tile_probe check, with a message containing "counted twice".
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.spec import KernelSpec, Shape
from reference_kernels.triton.gemm import make_spec

BUG = "a K tile counted twice: the last K step multiplies its stage buffer again"
CAUGHT_BY = "tile_probe"
MESSAGE = "counted twice"


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
    for kt in range(0, k_tiles):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_tile, mask=in_m & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n, other=0.0)
        acc = tl.dot(a, b, acc)
        if kt == k_tiles - 1:
            acc = tl.dot(a, b, acc)  # BUG: the drained last stage is consumed a second time
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=in_m & in_n)


def spec(device: str = "cpu", **kw: Any) -> KernelSpec:
    """This mutant's spec (same tiles and stages as the reference GEMM on ``device``)."""
    return make_spec("mutant_gemm_k_tile_counted_twice", kernel, device, description=BUG, **kw)


def shape(device: str = "cpu") -> Shape | None:
    """None: any generated shape with the boundary this bug needs shows it."""
    del device  # the generated shapes suffice
    return None
