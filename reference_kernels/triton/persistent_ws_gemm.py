"""Persistent, warp-specialized GEMM in Triton with tensor descriptors (TMA): C = A @ B.

What it shows
    A persistent kernel: one program per SM loops over output tiles (tile = pid, pid + NUM_SMS, ...),
    so the last wave is a partial loop iteration, not a partial grid. A and B are read through host
    tensor descriptors (TMA on sm_90: bulk asynchronous copies into shared memory, completion tracked
    by mbarriers), and the inner K loop is ``tl.range(..., num_stages=STAGES, warp_specialize=True)``:
    Triton splits it into a producer partition that issues the TMA loads and consumer warps that run
    the MMAs, handing stages over through the ring.

Pipeline scheme
    Producer: wait "slot free", TMA-load A and B tiles of K step k into ring slot k % STAGES, signal
    "slot full"; consumer: wait "slot full", MMA, release the slot. Load edges are handled by TMA
    itself: out-of-bounds rows/columns load as zero. The epilogue stores C through its descriptor
    only when a row of C ends on a 16-byte boundary (``N * itemsize % 16 == 0``): a TMA store writes
    whole 16-byte chunks, so at N = 65 (fp16) it writes columns 65..71 of every row although the
    descriptor's shape is (M, 65) (:func:`tma_store_is_exact`). Otherwise it uses masked pointer stores.

Preconditions
    Hopper or newer (sm_90+), a Triton with ``tl.range(warp_specialize=...)`` and
    ``triton.tools.tensor_descriptor`` (3.4 or later; validated with 3.6); base pointers 16-byte
    aligned and row strides multiples of 16 bytes (pipecheck's padded allocations are); fp16/bf16.
    Elsewhere :func:`unavailable_reason` says why and the tests skip with that reason. The Triton
    interpreter (CPU tier) does not model warp specialization, so it is skipped there too.

Spec tiles
    GPU: BLOCK 128 x 128 x 64, 3 stages, 8 warps (a non-persistent Triton GEMM at this tile with
    ``warp_specialize=True`` reaches about 683 TFLOP/s at 4096^3 fp16 on an H200). This kernel on an
    H200 with Triton 3.6: 496 TFLOP/s at 4096^3 with 8 warps (65% of torch.matmul), 508 with the
    outer-loop form at 4 warps (docs/validation/2026-11-22-h200-0453/ws_partition_probe.md). Triton 3.6
    partitions neither the inner K loop nor the flattened outer loop of this persistent kernel for
    sm_90 (no ttg.warp_specialize region in the TTGIR), so the warp-specialization check is a skip with
    that reason there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.model.spec import KernelSpec
from reference_kernels.triton.gemm import gemm_kernel_spec

__all__ = ["GPU_CONFIG", "launch", "persistent_ws_gemm_spec", "tma_store_is_exact", "unavailable_reason",
           "ws_gemm_kernel"]

GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 3, "warps": 8, "warp_specialize": True}


@triton.jit
def ws_gemm_kernel(a_desc, b_desc, c_desc, c_ptr, M, N, K, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   NUM_SMS: tl.constexpr, STAGES: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                   TMA_STORE: tl.constexpr, WS_OUTER: tl.constexpr = False):
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # WS_OUTER: specialize the persistent tile loop, flattened with the K loop into one loop (the form
    # Triton's persistent-matmul tutorial uses); otherwise specialize the inner K loop
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=WS_OUTER,
                         warp_specialize=WARP_SPECIALIZE and WS_OUTER):
        off_m = (tile // tiles_n) * BLOCK_M
        off_n = (tile % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in tl.range(0, k_tiles, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE and not WS_OUTER):
            a = a_desc.load([off_m, kt * BLOCK_K])               # (BLOCK_M, BLOCK_K), zero past edges
            b = b_desc.load([kt * BLOCK_K, off_n])               # (BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)
        if TMA_STORE:
            # exact only because N * itemsize is a multiple of 16 bytes (see tma_store_is_exact)
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))  # clipped to (M, N) by the descriptor
        else:
            rm = off_m + tl.arange(0, BLOCK_M)                   # (BLOCK_M,)
            rn = off_n + tl.arange(0, BLOCK_N)                   # (BLOCK_N,)
            tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                     mask=(rm[:, None] < M) & (rn[None, :] < N))


def tma_store_is_exact(c: Any) -> bool:
    """Whether a TMA store into ``c`` (2-D, unit column stride, 16-byte aligned rows) writes only ``c``.

    A TMA store writes whole 16-byte chunks of a row: where a row of the view ends inside a chunk
    (``N * itemsize`` not a multiple of 16) it also writes the rest of that chunk, past column N, into
    the row padding or the next tensor's columns. On an H200 at M65-K33-N65 (fp16, 130-byte rows) the
    descriptor store writes columns 65..71 of all 65 rows (455 elements) although the descriptor's
    shape is (65, 65) (docs/validation/2026-11-22-h200-0223.md). Loads are not affected (out-of-bounds
    elements arrive as zeros).
    """
    return (int(c.shape[-1]) * int(c.element_size())) % 16 == 0


def unavailable_reason(device: str) -> str | None:
    """Why this kernel cannot run on ``device`` here (None when it can)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "the Triton interpreter (CPU tier) does not run warp-specialized tensor-descriptor kernels"
    if not str(device).startswith("cuda"):
        return "needs a CUDA GPU (sm_90 or newer)"
    try:
        import inspect

        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
        if "warp_specialize" not in inspect.signature(tl.range.__init__).parameters:
            return f"Triton {triton.__version__} has no tl.range(warp_specialize=...)"
    except ImportError:
        return f"Triton {triton.__version__} has no triton.tools.tensor_descriptor"
    import torch

    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return f"needs sm_90 or newer for TMA and warp specialization; this GPU is sm_{major}{minor}"
    return None


def launch(arrays: Mapping[str, Any], cfg: Mapping[str, Any], num_sms: int) -> Any:
    """Build descriptors for strided a (M,K), b (K,N), c (M,N) and launch one program per SM.

    Every descriptor is the view's own shape and strides (``TensorDescriptor.from_tensor``: shape
    ``t.shape``, strides ``t.stride()``), never the allocation's. C is written through its descriptor
    only when :func:`tma_store_is_exact`; otherwise through masked pointer stores (row < M, col < N).
    Returns the compiled kernel (what ``pipecheck.check_sass`` inspects).
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    M, K = a.shape
    N = b.shape[1]
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            raise ValueError(f"TMA needs {name} row-major with 16-byte aligned base and row stride; "
                             f"got strides {tuple(t.stride())}")
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    tma_store = tma_store_is_exact(c)
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn]) if tma_store else None
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(num_sms, tiles),)
    return ws_gemm_kernel[grid](a_desc, b_desc, c_desc, c, M, N, K, c.stride(0), c.stride(1),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_SMS=num_sms, STAGES=cfg["stages"],
                         WARP_SPECIALIZE=cfg["warp_specialize"], TMA_STORE=tma_store,
                         WS_OUTER=cfg.get("ws_loop", "inner") == "outer", num_warps=cfg["warps"])


def persistent_ws_gemm_spec(device: str = "cuda", dtype: str = "float16",
                            config: Mapping[str, Any] | None = None, num_sms: int | None = None) -> KernelSpec:
    """The spec (GPU only: call :func:`unavailable_reason` first). ``num_sms`` defaults to the device's."""
    cfg = dict(config or GPU_CONFIG)
    if num_sms is None:
        import torch

        num_sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 1
    sms = int(num_sms)

    def run(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        launch(arrays, {**cfg, **({"stages": stages} if stages else {})}, sms)

    return gemm_kernel_spec(f"triton_persistent_ws_gemm_{dtype}", run, cfg, dtype=dtype,
                            description="persistent TMA GEMM, warp-specialized K loop")
