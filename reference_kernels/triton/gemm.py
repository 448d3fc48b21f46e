"""Pipelined GEMM in Triton: C[M, N] = A[M, K] @ B[K, N], fp16/bf16 in, fp32 accumulate.

What it shows
    The plain software-pipelined GEMM: each program owns one BLOCK_M x BLOCK_N output tile and walks
    the K dimension in BLOCK_K tiles. Triton's pipeliner (``num_stages``) turns the loads of the next
    ``num_stages - 1`` K tiles into asynchronous copies (cp.async on sm_80, TMA-free on sm_90 too)
    into a ring of shared-memory buffers while the current tile is multiplied.

Pipeline scheme
    prologue: issue loads for K tiles 0 .. stages-2; steady state: wait for tile k, issue tile
    k + stages - 1, multiply tile k; epilogue: drain the ring, cast the fp32 accumulator to the output
    dtype, masked store. Program ids are grouped along M (GROUP_M) so neighbouring programs share
    B tiles in L2.

Preconditions
    Any M, N, K >= 1 (every load and the store are masked); any strides (taken from the arrays), so
    outputs may be padded views. fp16 or bf16 inputs and output.

Spec tiles (see :func:`gemm_spec`)
    CPU / Triton interpreter: BLOCK 16 x 16 x 16, 3 stages (small, so the interpreter is fast and
    generated shapes have many tiles). GPU: BLOCK 128 x 128 x 64, 3 stages, 4 warps (FACTS.md
    section 4: the fastest stage count on sm_90 at this tile).

Numbers reached
    on an H200 (2026-11-22, Triton 3.6, benchmarks/results/2026-11-22-h200/triton_gemm_perf.md) at 4096^3 fp16:
    571 TFLOP/s with the default 128x128x64 / 3 stages / 4 warps (76% of torch.matmul's 756), best 653
    (86%) with 128x256x64 / 4 stages / 8 warps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.spec import KernelSpec, Tensor

__all__ = ["CPU_CONFIG", "GPU_CONFIG", "gemm", "gemm_kernel", "gemm_spec", "launch_gemm", "reference"]

# tile and pipeline configuration: BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, GROUP_M
CPU_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "stages": 3, "warps": 4, "GROUP_M": 2}
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 3, "warps": 4, "GROUP_M": 8}


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # grouped launch order: GROUP_M row-blocks share each column of B while it is hot in L2
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)          # (BLOCK_M,)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)          # (BLOCK_N,)
    rk = tl.arange(0, BLOCK_K)                             # (BLOCK_K,)
    in_m = rm[:, None] < M                                 # (BLOCK_M, 1)
    in_n = rn[None, :] < N                                 # (1, BLOCK_N)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for kt in range(0, k_tiles):
        k_left = K - kt * BLOCK_K
        # other=0 is the identity of the K reduction: the partial last K tile adds nothing
        a = tl.load(a_tile, mask=in_m & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=in_m & in_n)


def launch_gemm(kernel: Any, a: Any, b: Any, c: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int,
                stages: int, warps: int, GROUP_M: int) -> None:
    """Launch ``kernel`` (this module's or a mutant with the same signature) on strided a, b, c."""
    M, K = a.shape
    K2, N = b.shape
    if K2 != K or tuple(c.shape) != (M, N):
        raise ValueError(f"gemm shapes do not match: a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                 num_stages=stages, num_warps=warps)


def gemm(a: Any, b: Any, out: Any = None, config: Mapping[str, int] | None = None) -> Any:
    """C = A @ B with the reference kernel (allocates ``out`` when not given)."""
    import torch

    cfg = dict(config or (GPU_CONFIG if a.is_cuda else CPU_CONFIG))
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch_gemm(gemm_kernel, a, b, out, **cfg)
    return out


def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
    """fp64 A @ B (exact for the fp16 inputs at these sizes, up to fp64 rounding)."""
    return {"c": arrays["a"].double() @ arrays["b"].double()}


def config_for(device: str) -> dict[str, int]:
    return dict(GPU_CONFIG if str(device).startswith("cuda") else CPU_CONFIG)


def make_spec(name: str, kernel: Any, device: str = "cpu", dtype: str = "float16",
              config: Mapping[str, int] | None = None, description: str = "", **spec_kw: Any) -> KernelSpec:
    """A GEMM spec around any kernel with :func:`gemm_kernel`'s signature (mutants reuse it)."""
    cfg = dict(config or config_for(device))

    def launch(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        run = dict(cfg)
        if stages is not None:
            run["stages"] = stages
        launch_gemm(kernel, arrays["a"], arrays["b"], arrays["c"], **run)

    return KernelSpec(
        name=name,
        launch=launch,
        reference=reference,
        tensors=(Tensor("a", ("M", "K"), dtype), Tensor("b", ("K", "N"), dtype),
                 Tensor("c", ("M", "N"), dtype, role="output")),
        tiles={"M": cfg["BLOCK_M"], "N": cfg["BLOCK_N"], "K": cfg["BLOCK_K"]},
        loop_dim="K",
        stages=cfg["stages"],
        flops=lambda d: 2.0 * d["M"] * d["N"] * d["K"],
        bytes_moved=lambda d: 2.0 * (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"]),
        description=description or "pipelined Triton GEMM, fp32 accumulate, masked for any M, N, K",
        **spec_kw,
    )


def gemm_spec(device: str = "cpu", dtype: str = "float16", config: Mapping[str, int] | None = None) -> KernelSpec:
    """The reference GEMM's spec: 16x16x16 tiles / 3 stages on CPU, 128x128x64 / 3 stages on CUDA."""
    return make_spec(f"triton_gemm_{dtype}", gemm_kernel, device, dtype, config)
