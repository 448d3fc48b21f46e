"""FlashAttention-style forward in Triton: o = softmax(q k^T * scale [causal]) v, one pass over K/V.

What it shows
    The pipelined K/V loop of attention: each program owns BLOCK_M query rows of one (batch, head)
    and streams K and V in BLOCK_N tiles with ``tl.range(..., num_stages=STAGES)``, keeping a running
    row maximum and row sum (online softmax) in fp32, so the whole score matrix never exists.
    Ragged sequence lengths (M queries, N keys, neither a multiple of a tile) are handled by
    masking scores of keys past N to -inf, the identity of the max, so they add exp(-inf) = 0.

Pipeline scheme
    ``tl.range`` overlaps the loads of K/V tile j + stages - 1 with the two dots of tile j; the
    epilogue divides by the running sum and stores with a row mask. With ``causal=True`` query i
    sees keys 0..i (top-left aligned) and the loop stops at the last tile a program needs.

Preconditions
    Any M, N >= 1; head dim D fixed by the spec (a power of two >= 16: 16 on CPU, 64 on GPU); any
    strides; fp16 or bf16 inputs and output.

Spec tiles (see :func:`flash_attention_spec`)
    CPU / interpreter: BLOCK_M 16, BLOCK_N 16, D 16, 2 stages. GPU: BLOCK_M 128, BLOCK_N 64, D 64,
    3 stages, 4 warps. Tolerance rtol = atol = 1e-2 (p is rounded to the input dtype before the
    second dot, as FlashAttention does).

Numbers reached
    to be measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.model.preconditions import Range
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

__all__ = ["attention_kernel", "flash_attention_spec", "launch", "reference"]

CPU_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "D": 16, "stages": 2, "warps": 4}
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "D": 64, "stages": 3, "warps": 4}


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, M, N, qk_scale,
                     sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                     CAUSAL: tl.constexpr, STAGES: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rm = start_m + tl.arange(0, BLOCK_M)                       # (BLOCK_M,)
    rd = tl.arange(0, D)                                       # (D,)
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd,
                mask=rm[:, None] < M, other=0.0)               # (BLOCK_M, D)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)  # running row max (log2 domain)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)               # running row sum
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    n_end = N
    if CAUSAL:
        n_end = tl.minimum(N, start_m + BLOCK_M)
    for j in tl.range(0, tl.cdiv(n_end, BLOCK_N), num_stages=STAGES):
        rn = j * BLOCK_N + tl.arange(0, BLOCK_N)               # (BLOCK_N,)
        k = tl.load(k_ptr + b * skb + h * skh + rn[None, :] * skn + rd[:, None] * skd,
                    mask=rn[None, :] < N, other=0.0)           # (D, BLOCK_N)
        s = tl.dot(q, k) * qk_scale                            # (BLOCK_M, BLOCK_N), log2 domain
        keep = rn[None, :] < N
        if CAUSAL:
            keep = keep & (rn[None, :] <= rm[:, None])
        s = tl.where(keep, s, float("-inf"))                   # -inf: the identity of max
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + b * svb + h * svh + rn[:, None] * svn + rd[None, :] * svd,
                    mask=rn[:, None] < N, other=0.0)           # (BLOCK_N, D)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + b * sob + h * soh + rm[:, None] * som + rd[None, :] * sod,
             o.to(o_ptr.dtype.element_ty), mask=rm[:, None] < M)


def launch(kernel: Any, arrays: Mapping[str, Any], cfg: Mapping[str, int], causal: bool) -> None:
    """Launch ``kernel`` on strided q (B,H,M,D), k, v (B,H,N,D) and o (B,H,M,D)."""
    q, k, v, o = arrays["q"], arrays["k"], arrays["v"], arrays["o"]
    B, H, M, D = q.shape
    N = k.shape[2]
    if D != cfg["D"]:
        raise ValueError(f"head dim {D} does not match the compiled D={cfg['D']}")
    scale = (1.0 / math.sqrt(D)) * 1.4426950408889634  # softmax scale, times log2(e) for exp2
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), B * H)
    kernel[grid](q, k, v, o, H, M, N, scale, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                 BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], D=D, CAUSAL=causal, STAGES=cfg["stages"],
                 num_warps=cfg["warps"])


def reference_fn(causal: bool) -> Any:
    def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
        """fp64 softmax(q k^T / sqrt(D)) v with the same causal rule."""
        import torch

        q, k, v = (arrays[n].double() for n in ("q", "k", "v"))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            m, n = s.shape[-2], s.shape[-1]
            keep = torch.arange(n, device=s.device)[None, :] <= torch.arange(m, device=s.device)[:, None]
            s = s.masked_fill(~keep, float("-inf"))
        return {"o": torch.softmax(s, dim=-1) @ v}

    return reference


reference = reference_fn(False)


def flash_attention_spec(device: str = "cpu", causal: bool = False, dtype: str = "float16",
                         config: Mapping[str, int] | None = None, kernel: Any = None,
                         name: str | None = None) -> KernelSpec:
    """The spec: loop dimension N (keys); tiles M/N 16/16 (D 16) on CPU, 128/64 (D 64) on CUDA."""
    cfg = dict(config or (GPU_CONFIG if str(device).startswith("cuda") else CPU_CONFIG))
    fn = kernel or attention_kernel

    def run(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        launch(fn, arrays, {**cfg, **({"stages": stages} if stages else {})}, causal)

    return KernelSpec(
        name=name or f"triton_flash_attention{'_causal' if causal else ''}_{dtype}",
        launch=run,
        reference=reference_fn(causal),
        tensors=(Tensor("q", ("B", "H", "M", "D"), dtype), Tensor("k", ("B", "H", "N", "D"), dtype),
                 Tensor("v", ("B", "H", "N", "D"), dtype), Tensor("o", ("B", "H", "M", "D"), dtype, role="output")),
        tiles={"M": cfg["BLOCK_M"], "N": cfg["BLOCK_N"]},
        loop_dim="N",
        stages=cfg["stages"],
        preconditions=(Range("D", cfg["D"], cfg["D"]), Range("B", 1, 4), Range("H", 1, 4)),
        rtol=1e-2,
        atol=1e-2,
        flops=lambda d: 4.0 * d["B"] * d["H"] * d["M"] * d["N"] * d["D"] * (0.5 if causal else 1.0),
        bytes_moved=lambda d: 2.0 * d["B"] * d["H"] * d["D"] * (2 * d["M"] + 2 * d["N"]),
        description="FlashAttention-style forward, online softmax, pipelined K/V loop, ragged M/N"
                    + (", causal" if causal else ""),
    )
