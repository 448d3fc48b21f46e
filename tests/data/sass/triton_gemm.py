"""Triton GEMMs for the IR/SASS inspector tests (AOT-compiled without a GPU).

``matmul_kernel`` is the classic pointer-based tiled GEMM shared with the rest of the suite
(``reference_kernels.triton.simple_gemm``): its K loop is software-pipelined by Triton only when
the pointers and strides carry the divisibility the JIT derives from real arguments.
``matmul_tma_kernel`` uses host-side-free device tensor descriptors, so on sm_90 the loads become
TMA (UTMALDG) and the dots warpgroup MMAs (HGMMA); ``WARP_SPECIALIZE`` asks the compiler to split
producer and consumer warps.
"""

from __future__ import annotations

import triton
import triton.language as tl

from reference_kernels.triton.simple_gemm import gemm_kernel as matmul_kernel

__all__ = ["matmul_kernel", "matmul_tma_kernel"]


@triton.jit
def matmul_tma_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=NUM_STAGES, warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))
