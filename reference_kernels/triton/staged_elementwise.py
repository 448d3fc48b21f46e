"""Staged elementwise kernel in Triton: out = relu((q * k) * scale) * v over an (M, N) array.

What it shows
    The simplest pipelined loop: each program owns BLOCK_M rows and walks the N dimension in
    BLOCK_N tiles with ``tl.range(..., num_stages=STAGES)``, so Triton overlaps the loads of the next
    tiles with the arithmetic of the current one. There is no reduction: a dropped or doubled tile
    shows up as an unwritten or wrong slice of ``out``, which the coverage check and the tile probe
    name.

Pipeline scheme
    ``tl.range`` software-pipelines the loop body (loads of q, k, v for tile t + stages - 1 issued
    while tile t is computed); every load and the store are masked on both M and N.

Preconditions
    Any M, N >= 1; any strides (taken from the arrays); fp16, bf16 or fp32 inputs and output.

Spec tiles (see :func:`staged_elementwise_spec`)
    CPU / interpreter: BLOCK 8 x 16, 2 stages. GPU: BLOCK 32 x 128, 3 stages, 4 warps.

Numbers reached
    to be measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

__all__ = ["SCALE", "launch", "reference", "staged_elementwise_kernel", "staged_elementwise_spec"]

SCALE = 0.5
CPU_CONFIG = {"BLOCK_M": 8, "BLOCK_N": 16, "stages": 2, "warps": 4}
GPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 128, "stages": 3, "warps": 4}


@triton.jit
def staged_elementwise_kernel(q_ptr, k_ptr, v_ptr, o_ptr, M, N, scale,
                              stride_qm, stride_qn, stride_km, stride_kn, stride_vm, stride_vn,
                              stride_om, stride_on,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)       # (BLOCK_M,)
    in_m = rm[:, None] < M
    for t in tl.range(0, tl.cdiv(N, BLOCK_N), num_stages=STAGES):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)                  # (BLOCK_N,)
        mask = in_m & (rn[None, :] < N)                            # (BLOCK_M, BLOCK_N)
        q = tl.load(q_ptr + rm[:, None] * stride_qm + rn[None, :] * stride_qn, mask=mask, other=0.0)
        k = tl.load(k_ptr + rm[:, None] * stride_km + rn[None, :] * stride_kn, mask=mask, other=0.0)
        v = tl.load(v_ptr + rm[:, None] * stride_vm + rn[None, :] * stride_vn, mask=mask, other=0.0)
        # compute in fp32, round once on the store
        x = (q.to(tl.float32) * k.to(tl.float32)) * scale
        y = tl.maximum(x, 0.0) * v.to(tl.float32)
        tl.store(o_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on,
                 y.to(o_ptr.dtype.element_ty), mask=mask)


def launch(kernel: Any, arrays: Mapping[str, Any], cfg: Mapping[str, int], scale: float = SCALE) -> None:
    """Launch ``kernel`` (this module's, or a mutant with its signature) on strided q, k, v, out."""
    q, k, v, o = arrays["q"], arrays["k"], arrays["v"], arrays["out"]
    M, N = q.shape
    grid = (triton.cdiv(M, cfg["BLOCK_M"]),)
    kernel[grid](q, k, v, o, M, N, scale, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                 v.stride(0), v.stride(1), o.stride(0), o.stride(1),
                 BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], STAGES=cfg["stages"], num_warps=cfg["warps"])


def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
    """fp64 relu((q * k) * scale) * v."""
    q, k, v = (arrays[n].double() for n in ("q", "k", "v"))
    return {"out": ((q * k) * SCALE).clamp_min(0.0) * v}


def staged_elementwise_spec(device: str = "cpu", dtype: str = "float16",
                            config: Mapping[str, int] | None = None, kernel: Any = None,
                            name: str | None = None) -> KernelSpec:
    """The spec: 8x16 tiles / 2 stages on CPU, 32x128 / 3 stages on CUDA; loop dimension N."""
    cfg = dict(config or (GPU_CONFIG if str(device).startswith("cuda") else CPU_CONFIG))
    fn = kernel or staged_elementwise_kernel

    def run(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        launch(fn, arrays, {**cfg, **({"stages": stages} if stages else {})})

    return KernelSpec(
        name=name or f"triton_staged_elementwise_{dtype}",
        launch=run,
        reference=reference,
        tensors=(Tensor("q", ("M", "N"), dtype), Tensor("k", ("M", "N"), dtype), Tensor("v", ("M", "N"), dtype),
                 Tensor("out", ("M", "N"), dtype, role="output")),
        tiles={"M": cfg["BLOCK_M"], "N": cfg["BLOCK_N"]},
        loop_dim="N",
        stages=cfg["stages"],
        flops=lambda d: 4.0 * d["M"] * d["N"],
        bytes_moved=lambda d: 8.0 * d["M"] * d["N"],
        description="relu((q*k)*scale)*v with tl.range(num_stages) over N tiles",
    )
