"""Pipelined GEMM in Triton: C[M, N] = A[M, K] @ B[K, N], fp16/bf16 in, fp32 accumulate.

What it shows
    The plain (non-persistent) software-pipelined GEMM: each program owns one BLOCK_M x BLOCK_N
    output tile and walks the K dimension in BLOCK_K tiles. Triton's pipeliner (``num_stages``)
    turns the loads of the next ``num_stages - 1`` K tiles into asynchronous copies into a ring of
    shared-memory buffers while the current tile is multiplied. Four paths, picked per launch (the
    launcher chooses from the actual arguments): three load paths of one kernel, set by constexpr
    switches, and a persistent form of the same loop:

    ``persistent`` :func:`gemm_persistent_kernel`: one program per SM walks output tiles pid,
                pid + #SMs, ... (GROUP_M order) with device-side descriptors as in ``tma``; the tile
                loop and the K loop are flattened into one software pipeline (``tl.range(...,
                flatten=True)``), so the next tile's loads are in flight while this tile's result is
                stored, and C goes out through a TMA store when its rows end on 16-byte boundaries
                (masked pointer stores otherwise).
    ``tma``     (``USE_TMA``) A and B are read through device-side tensor descriptors
                (``tl.make_tensor_descriptor``): on sm_90 the ring is filled by TMA bulk copies that
                feed wgmma directly. Out-of-bounds rows/columns of a box arrive as zeros, so ragged
                M, N, K need no masks at all.
    ``even_k``  (``EVEN_K`` + ``WRAP_MN``) pointer loads without any mask: K % BLOCK_K == 0 drops
                the K mask, and the row/column offsets are wrapped modulo M / N (the Triton matmul
                tutorial's trick), so a ragged edge tile re-reads real rows/columns instead of
                reading past the end; those results land outside C and the store drops them.
    ``masked``  every load masked (row < M, column < N, k < K, ``other=0``): the fallback for any
                argument the other paths do not accept.

    The store is a masked pointer store (row < M, column < N) on the three ``gemm_kernel`` paths, and
    on ``persistent`` whenever a row of C does not end on a 16-byte boundary: a TMA store writes whole
    16-byte chunks of a row and overruns such rows (see :mod:`reference_kernels.triton.persistent_ws_gemm`).

Pipeline scheme
    prologue: issue loads for K tiles 0 .. stages-2; steady state: wait for tile k, issue tile
    k + stages - 1, multiply tile k; epilogue: drain the ring, cast the fp32 accumulator to the output
    dtype, masked store. Program ids are grouped along M (GROUP_M) so neighbouring programs share
    B tiles in L2.

Preconditions
    Any M, N, K >= 1 and any strides on every path the launcher picks (outputs may be padded
    views); fp16 or bf16 inputs and output. :func:`select_path` takes ``persistent`` (for the
    reference kernel; ``tma`` for another kernel with the path switches) only when descriptors
    exist in this Triton (``tl.make_tensor_descriptor``), the target has TMA (sm_90 or newer; the
    Triton interpreter emulates descriptors, zero padding included, and Triton 3.9's interpreter runs
    this path correctly, so it is picked there too), A and B have a unit last stride, a 16-byte
    aligned base and row strides that are multiples of 16 bytes, and M, N, K fit in int32; else
    ``even_k`` when K % BLOCK_K == 0; else ``masked``. The persistent path launches one program per
    SM of the inputs' GPU (:func:`persistent_programs`; 3 in the interpreter, so that programs walk
    several tiles at small shapes). On a GPU the descriptor paths need a global
    scratch allocation for the descriptors: the launcher installs a torch allocator with
    ``triton.set_allocator`` unless one is already set.

Spec tiles (see :func:`gemm_spec`)
    CPU / Triton interpreter: BLOCK 16 x 16 x 16, 3 stages (small, so the interpreter is fast and
    generated shapes have many tiles). GPU: per compute capability (:data:`GPU_CONFIGS`): sm_90 runs
    BLOCK 128 x 256 x 64, 3 stages, 8 warps, GROUP_M 8 (the fastest ``persistent`` config below;
    4 stages and the TMA store's staging tile do not fit in sm_90's shared memory); every other
    architecture BLOCK 128 x 128 x 64, 3 stages, 4 warps (:data:`GPU_CONFIG`; 3 stages is the fastest
    of 1 to 5 at that tile on sm_90: docs/validation/2026-11-22-h200-0223/stage_sweep.md).

Numbers reached
    At 4096^3 fp16 on an H200 with Triton 3.6, each ratio against torch.matmul timed in the same run:

    - masked pointer path: 571 TFLOP/s at 128x128x64 / 3 stages / 4 warps (76% of 756), 653 (86%) at
      128x256x64 / 4 stages / 8 warps, 605 at 256x128x64 / 4 stages / 8 warps; 128x256x64 with 4 warps
      falls to 88 (register spills) (docs/validation/2026-11-22-h200-0223/triton_gemm_perf.md);
    - the load paths at 128x256x64 / 4 stages / 8 warps / GROUP_M 8: ``tma`` 659 (86.5% of 761),
      best 672 (88.3%, ``tma``, 3 stages); ``even_k`` 668, ``masked`` 667 at the same tile
      (docs/validation/2026-11-22-h200-0453/triton_gemm_perf.md);
    - ``persistent``: 677 (90.0% of 752) at 128x256x64 / 3 stages / 8 warps with the flattened loop and a
      TMA store, 676 with masked stores, 661 without flattening; the non-persistent paths 638-661
      (docs/validation/2026-11-22-h200-0754/triton_gemm_perf.md).

    Those sweeps time torch.matmul first, on a cool GPU, which flatters it. Timed alternately with
    torch.matmul under the same conditions (``scripts/gpu/gluon_gemm_tune.py``), the launcher default
    (``persistent``, 128x256x64, 3 stages) reaches 97.2% and 97.9% of torch.matmul (671-679 TFLOP/s),
    above the 95% goal (docs/validation/2026-11-23-h200-1257/run-d/ and run-f/gluon_gemm_tune.md).
    Triton 3.6 (and 3.9) does not warp-specialize this loop for sm_90 (``warp_specialize=True`` on the
    flattened loop leaves no ``ttg.warp_specialize`` region in the TTGIR), so the producer/consumer
    split that cuBLAS's Hopper kernels use is out of reach of ``tl.range`` here.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

__all__ = ["CPU_CONFIG", "GPU_CONFIG", "GPU_CONFIGS", "PATHS", "PATH_SWITCHES", "gemm", "gemm_kernel", "gemm_spec",
           "gpu_config", "launch_gemm", "reference", "select_path", "tma_unavailable_reason"]

# tile and pipeline configuration: BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, GROUP_M
CPU_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "stages": 3, "warps": 4, "GROUP_M": 2}
# the GPU default of every architecture without an entry in GPU_CONFIGS
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 3, "warps": 4, "GROUP_M": 8}
# per compute capability (major, minor): sm_90 gets the fastest ``persistent`` config measured on an H200
# (677 TFLOP/s at 4096^3 fp16; the module docstring has the numbers and their evidence)
GPU_CONFIGS: dict[tuple[int, int], dict[str, int]] = {
    (9, 0): {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 3, "warps": 8, "GROUP_M": 8},
}

# the load paths, fastest first, and the constexpr switches of gemm_kernel each one sets ("persistent"
# launches gemm_persistent_kernel instead and sets none)
PATHS = ("persistent", "tma", "even_k", "masked")
PATH_SWITCHES: dict[str, dict[str, bool]] = {
    "persistent": {},
    "tma": {"EVEN_K": False, "WRAP_MN": False, "USE_TMA": True},
    "even_k": {"EVEN_K": True, "WRAP_MN": True, "USE_TMA": False},
    "masked": {"EVEN_K": False, "WRAP_MN": False, "USE_TMA": False},
}
_INT32_MAX = 2**31 - 1


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr = False, WRAP_MN: tl.constexpr = False, USE_TMA: tl.constexpr = False):
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

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)          # (BLOCK_M,) output rows
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)          # (BLOCK_N,) output columns
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if USE_TMA:
        # the launcher checked: unit last strides, 16-byte aligned bases and row strides
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
        for kt in range(0, k_tiles):
            # boxes past M, N or K arrive as zeros: zero is the identity of the K reduction
            a = a_desc.load([tile_m * BLOCK_M, kt * BLOCK_K])   # (BLOCK_M, BLOCK_K)
            b = b_desc.load([kt * BLOCK_K, tile_n * BLOCK_N])   # (BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc)
    else:
        rk = tl.arange(0, BLOCK_K)                         # (BLOCK_K,)
        if WRAP_MN:
            # rows/columns past M/N re-read real ones (M, N >= 1); their results are not stored
            lm = rm % M
            ln = rn % N
        else:
            lm = rm
            ln = rn
        a_tile = a_ptr + lm[:, None] * stride_am + rk[None, :] * stride_ak   # (BLOCK_M, BLOCK_K)
        b_tile = b_ptr + rk[:, None] * stride_bk + ln[None, :] * stride_bn   # (BLOCK_K, BLOCK_N)
        for kt in range(0, k_tiles):
            # other=0 is the identity of the K reduction: the partial last K tile adds nothing
            if EVEN_K:
                if WRAP_MN:
                    a = tl.load(a_tile)
                    b = tl.load(b_tile)
                else:
                    a = tl.load(a_tile, mask=rm[:, None] < M, other=0.0)
                    b = tl.load(b_tile, mask=rn[None, :] < N, other=0.0)
            else:
                k_left = K - kt * BLOCK_K
                if WRAP_MN:
                    a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)
                    b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)
                else:
                    a = tl.load(a_tile, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
                    b = tl.load(b_tile, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
            a_tile += BLOCK_K * stride_ak
            b_tile += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gemm_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr,
                           TMA_STORE: tl.constexpr, SPLIT_EPILOGUE: tl.constexpr,
                           WARP_SPECIALIZE: tl.constexpr = False):
    # One program per SM walks output tiles pid, pid + NUM_PROGRAMS, ... in GROUP_M order. FLATTEN
    # merges the tile loop and the K loop into one software pipeline, so the loads of the next tile
    # start while this tile's accumulator is still being written out.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    if TMA_STORE:  # the launcher checked that a row of C ends on a 16-byte boundary
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2 if SPLIT_EPILOGUE else BLOCK_N])
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_group = GROUP_M * tiles_n
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        first_m = (tile // per_group) * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        off_m = (first_m + (tile % per_group) % rows_in_group) * BLOCK_M
        off_n = ((tile % per_group) // rows_in_group) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, k_tiles):
            acc = tl.dot(a_desc.load([off_m, kt * BLOCK_K]), b_desc.load([kt * BLOCK_K, off_n]), acc)
        if SPLIT_EPILOGUE:  # two (BLOCK_M, BLOCK_N / 2) halves: half the registers live in the epilogue
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            if TMA_STORE:
                c_desc.store([off_m, off_n], left.to(c_ptr.dtype.element_ty))
                c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_ptr.dtype.element_ty))
            else:
                rm = off_m + tl.arange(0, BLOCK_M)
                rn = off_n + tl.arange(0, BLOCK_N // 2)
                mask = (rm[:, None] < M) & (rn[None, :] < N)
                tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
                         left.to(c_ptr.dtype.element_ty), mask=mask)
                rn2 = rn + BLOCK_N // 2
                tl.store(c_ptr + rm[:, None] * stride_cm + rn2[None, :] * stride_cn,
                         right.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn2[None, :] < N))
        elif TMA_STORE:
            c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))
        else:
            rm = off_m + tl.arange(0, BLOCK_M)
            rn = off_n + tl.arange(0, BLOCK_N)
            tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                     mask=(rm[:, None] < M) & (rn[None, :] < N))


def launch_persistent(a: Any, b: Any, c: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, stages: int, warps: int,
                      GROUP_M: int, num_programs: int, flatten: bool = True, tma_store: bool | None = None,
                      split_epilogue: bool = False, warp_specialize: bool = False) -> None:
    """Launch :func:`gemm_persistent_kernel`: ``num_programs`` programs (one per SM), device-side descriptors.

    Needs what the ``tma`` path needs (:func:`tma_unavailable_reason`). ``tma_store`` None: a TMA store
    when a row of C ends on a 16-byte boundary and C is row-major and aligned, else masked stores.
    """
    reason = tma_unavailable_reason(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    if reason is not None:
        raise ValueError(f"the persistent GEMM needs descriptors: {reason}")
    M, K = a.shape
    N = b.shape[1]
    exact = (c.stride(1) == 1 and (N * c.element_size()) % 16 == 0 and (c.stride(0) * c.element_size()) % 16 == 0
             and c.data_ptr() % 16 == 0)
    use_tma_store = exact if tma_store is None else bool(tma_store)
    if use_tma_store and not exact:
        raise ValueError("a TMA store into c needs a row-major c whose rows end on 16-byte boundaries")
    if not _interpreting():
        _ensure_allocator()
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    programs = max(1, min(int(num_programs), tiles))
    gemm_persistent_kernel[(programs,)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), c.stride(1),
                                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                                        NUM_PROGRAMS=programs, FLATTEN=flatten, TMA_STORE=use_tma_store,
                                        SPLIT_EPILOGUE=split_epilogue, WARP_SPECIALIZE=warp_specialize,
                                        num_stages=stages, num_warps=warps)


def gpu_config(capability: tuple[int, int] | None) -> dict[str, int]:
    """The GPU tile config for compute capability ``(major, minor)`` (:data:`GPU_CONFIG` when not listed)."""
    if capability is not None:
        found = GPU_CONFIGS.get((int(capability[0]), int(capability[1])))
        if found is not None:
            return dict(found)
    return dict(GPU_CONFIG)


def device_capability(device: Any = "cuda") -> tuple[int, int] | None:
    """The compute capability of CUDA ``device``, without creating a CUDA context when none exists yet.

    Collection of the GPU tests must not initialize CUDA (test_reference_triton.py builds specs then),
    so before torch has initialized CUDA this reads ``nvidia-smi`` (pipecheck's device listing).
    """
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    if torch.cuda.is_initialized():
        return tuple(torch.cuda.get_device_capability(dev))  # type: ignore[return-value]
    from pytest_pipecheck.device import list_devices

    devices, _ = list_devices()
    index = dev.index or 0
    if index < len(devices):
        major, _, minor = devices[index].compute_capability.partition(".")
        if major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    if torch.cuda.is_available():
        return tuple(torch.cuda.get_device_capability(dev))  # type: ignore[return-value]
    return None


def _interpreting(kernel: Any = None) -> bool:
    if type(kernel).__name__ == "InterpretedFunction":
        return True
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


_SWITCHES_CACHE: dict[Any, bool] = {}


def _switches_of(kernel: Any) -> bool:
    """Whether ``kernel`` takes this module's path switches (mutants keep the original signature)."""
    fn = _python_function(kernel)
    found = _SWITCHES_CACHE.get(fn)
    if found is None:  # inspect.signature costs ~25 us: once per kernel, not per launch
        try:
            params = inspect.signature(fn).parameters
            found = all(name in params for name in PATH_SWITCHES["masked"])
        except (TypeError, ValueError):
            found = False
        _SWITCHES_CACHE[fn] = found
    return found


def tma_unavailable_reason(a: Any, b: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int,
                           capability: tuple[int, int] | None = None, interpreter: bool | None = None,
                           **_: Any) -> str | None:
    """Why the ``tma`` path cannot take these arguments (None when it can).

    ``capability`` is the CUDA device's (read from ``a``'s device when None); ``interpreter`` says
    whether Triton runs kernels in its interpreter (read from ``TRITON_INTERPRET`` when None).
    """
    if not hasattr(tl, "make_tensor_descriptor"):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor"
    interp = _interpreting() if interpreter is None else interpreter
    if not interp:
        if not getattr(a, "is_cuda", False):
            return "tensors are not on a CUDA device"
        if not hasattr(triton, "set_allocator"):
            return f"Triton {triton.__version__} has no triton.set_allocator (device-side descriptors need one)"
        cap = capability if capability is not None else device_capability(a.device)
        if cap is None or cap[0] < 9:
            return f"TMA needs sm_90 or newer; this device is {'unknown' if cap is None else f'sm_{cap[0]}{cap[1]}'}"
    for name, t, block in (("a", a, (BLOCK_M, BLOCK_K)), ("b", b, (BLOCK_K, BLOCK_N))):
        size = int(t.element_size())
        if size != 2:
            return f"{name} has {size}-byte elements; this path is for fp16/bf16"
        if t.stride(1) != 1:
            return f"{name} has column stride {t.stride(1)}, a descriptor needs 1"
        if (t.stride(0) * size) % 16:
            return f"{name} has row stride {t.stride(0)} ({t.stride(0) * size} bytes), not a multiple of 16 bytes"
        if t.data_ptr() % 16:
            return f"{name} starts at an address that is not 16-byte aligned"
        if max(t.shape) > _INT32_MAX or t.stride(0) * size >= 2**40:
            return f"{name} is too large for a descriptor (shape {tuple(t.shape)}, strides {tuple(t.stride())})"
        if not all(8 <= blk <= 256 for blk in block):
            return f"{name}'s block {block} is outside a TMA box (8..256 elements per dim)"
    return None


def _is_reference(kernel: Any) -> bool:
    """Whether ``kernel`` is this module's :func:`gemm_kernel` (or a wrapper around its function)."""
    return _python_function(kernel) is _python_function(gemm_kernel)


def _python_function(kernel: Any) -> Any:
    fn = kernel
    for _ in range(4):  # JITFunction / InterpretedFunction / autotuner wrap the Python function in .fn
        inner = getattr(fn, "fn", None)
        if inner is None:
            break
        fn = inner
    return fn


def select_path(a: Any, b: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, kernel: Any = None,
                capability: tuple[int, int] | None = None, interpreter: bool | None = None,
                **_: Any) -> tuple[str, str]:
    """The load path (one of :data:`PATHS`) the launcher takes for these arguments, and why.

    ``persistent`` when :func:`tma_unavailable_reason` finds nothing and ``kernel`` is the reference
    kernel (or None), ``tma`` then for another kernel with the path switches; else ``even_k`` when
    K % BLOCK_K == 0, else ``masked``; always ``masked`` for a kernel without the path switches (the
    mutants). Extra keywords (a whole config: stages, warps, GROUP_M) are ignored.
    """
    if kernel is not None and not _switches_of(kernel):
        return "masked", "the kernel has no path switches (EVEN_K, WRAP_MN, USE_TMA)"
    reason = tma_unavailable_reason(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                    capability=capability, interpreter=interpreter)
    if reason is None:
        if kernel is None or _is_reference(kernel):
            return "persistent", "descriptors: aligned row-major A and B on a TMA target; one program per SM"
        return "tma", "descriptors: aligned row-major A and B on a TMA target (not the reference kernel)"
    K = int(a.shape[1])
    if K % BLOCK_K == 0:
        return "even_k", f"no tma ({reason}); K={K} is a multiple of BLOCK_K={BLOCK_K}"
    return "masked", f"no tma ({reason}); K={K} is not a multiple of BLOCK_K={BLOCK_K}"


def _torch_scratch(size: int, alignment: int, stream: Any) -> Any:
    import torch

    del alignment, stream  # the caching allocator's blocks are 512-byte aligned
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _ensure_allocator() -> None:
    """Install a torch scratch allocator for device-side descriptors unless one is set already."""
    try:
        from triton.runtime import _allocation

        current = _allocation._allocator.get()
        if not isinstance(current, _allocation.NullAllocator):
            return
    except (ImportError, AttributeError):  # private API moved: set ours
        pass
    triton.set_allocator(_torch_scratch)


def launch_gemm(kernel: Any, a: Any, b: Any, c: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int,
                stages: int, warps: int, GROUP_M: int, path: str = "auto") -> str:
    """Launch ``kernel`` (this module's or a mutant with the same signature) on strided a, b, c.

    ``path="auto"`` takes :func:`select_path`'s choice; a named path (``tma``, ``even_k``,
    ``masked``) is forced and raises ValueError when the arguments do not allow it. Kernels without
    the path switches (the mutants) always run as they are (``masked``). Returns the path taken.
    """
    M, K = a.shape
    K2, N = b.shape
    if K2 != K or tuple(c.shape) != (M, N):
        raise ValueError(f"gemm shapes do not match: a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
    tiles = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K}
    has_switches = _switches_of(kernel)
    interpreter = _interpreting(kernel)
    if path == "auto":
        path = "masked"
        if has_switches:
            path, _ = select_path(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, kernel=kernel,
                                  interpreter=interpreter)
    elif path not in PATH_SWITCHES:
        raise ValueError(f"unknown gemm path {path!r}; known: auto, {', '.join(PATHS)}")
    elif path != "masked" and not has_switches:
        raise ValueError(f"path {path!r} needs a kernel with the path switches (EVEN_K, WRAP_MN, USE_TMA)")
    elif path == "persistent" and not _is_reference(kernel):
        raise ValueError("path 'persistent' runs the reference GEMM's persistent kernel; it cannot run another kernel")
    elif path in ("tma", "persistent"):
        reason = tma_unavailable_reason(a, b, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                        interpreter=interpreter)
        if reason is not None:
            raise ValueError(f"path {path!r} is not possible here: {reason}")
    elif path == "even_k" and K % BLOCK_K:
        raise ValueError(f"path 'even_k' needs K % BLOCK_K == 0; K={K}, BLOCK_K={BLOCK_K}")
    if path == "persistent":
        launch_persistent(a, b, c, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages, warps=warps,
                          GROUP_M=GROUP_M, num_programs=persistent_programs(a, interpreter))
        return path
    switches = PATH_SWITCHES[path] if has_switches else {}
    if path == "tma" and not interpreter:
        _ensure_allocator()
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 **tiles, GROUP_M=GROUP_M, **switches, num_stages=stages, num_warps=warps)
    return path


_SM_COUNT: dict[int, int] = {}
INTERPRETER_PROGRAMS = 3  # programs of the persistent path in the interpreter: each walks several tiles


def persistent_programs(a: Any, interpreter: bool | None = None) -> int:
    """Programs the persistent path launches: one per SM of ``a``'s GPU (3 in the interpreter)."""
    if _interpreting() if interpreter is None else interpreter:
        return INTERPRETER_PROGRAMS
    import torch

    index = torch.device(a.device).index
    index = torch.cuda.current_device() if index is None else index
    if index not in _SM_COUNT:
        _SM_COUNT[index] = int(torch.cuda.get_device_properties(index).multi_processor_count)
    return _SM_COUNT[index]


def config_for(device: Any) -> dict[str, int]:
    """The tile config for ``device``: :data:`CPU_CONFIG`, or the GPU's per-architecture config."""
    if not str(device).startswith("cuda"):
        return dict(CPU_CONFIG)
    return gpu_config(device_capability(device))


def gemm(a: Any, b: Any, out: Any = None, config: Mapping[str, int] | None = None, path: str = "auto") -> Any:
    """C = A @ B with the reference kernel (allocates ``out`` when not given)."""
    import torch

    cfg = dict(config or config_for(a.device))
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    launch_gemm(gemm_kernel, a, b, out, **cfg, path=path)
    return out


def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
    """fp64 A @ B (exact for the fp16 inputs at these sizes, up to fp64 rounding)."""
    return {"c": arrays["a"].double() @ arrays["b"].double()}


def make_spec(name: str, kernel: Any, device: str = "cpu", dtype: str = "float16",
              config: Mapping[str, int] | None = None, description: str = "", path: str = "auto",
              **spec_kw: Any) -> KernelSpec:
    """A GEMM spec around any kernel with :func:`gemm_kernel`'s signature (mutants reuse it).

    Launches through :func:`launch_gemm` (``path="auto"``: the same choice as :func:`gemm`).
    """
    cfg = dict(config or config_for(device))

    def launch(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        run = dict(cfg)
        if stages is not None:
            run["stages"] = stages
        launch_gemm(kernel, arrays["a"], arrays["b"], arrays["c"], **run, path=path)

    return gemm_kernel_spec(name, launch, cfg, dtype=dtype,
                            description=description or "pipelined Triton GEMM, fp32 accumulate, correct for any M, N, K",
                            **spec_kw)


def k_scaled_atol(dtype: str, k0: int = 256) -> Any:
    """The GEMMs' absolute tolerance at a shape: the dtype's default up to K = ``k0``, then growing as
    sqrt(K / k0). An fp32 accumulator's rounding error grows with the length of the dot product: on an
    H100 the correct masked GEMM is off by up to 3.7e-3 at K = 16384 with unit-normal fp16 inputs, over
    the flat fp16 default of 2e-3 (here 1.6e-2 at that K; docs/validation/2026-11-25-h100-0723.md).
    A dropped K tile moves a value by about sqrt(BLOCK_K) = 8, and an fp16 accumulator by more than 0.1
    at that K: both still fail."""
    from pytest_pipecheck.model.tolerance import default_tolerance

    base = default_tolerance(dtype).atol
    return lambda dims: base * max(1.0, math.sqrt(dims["K"] / k0))


def gemm_kernel_spec(name: str, launch: Any, cfg: Mapping[str, Any], *, dtype: str, description: str,
                     **spec_kw: Any) -> KernelSpec:
    """The spec of any C[M, N] = A[M, K] @ B[K, N] kernel: ``launch(arrays, dims, stages=None)`` runs it,
    ``cfg`` gives its tiles (BLOCK_M, BLOCK_N, BLOCK_K) and stage count, the K loop is the pipelined one,
    and :func:`reference` is the fp64 reference. The Triton, persistent and Gluon GEMMs share it."""
    spec_kw.setdefault("atol", k_scaled_atol(dtype))
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
        description=description,
        **spec_kw,
    )


def gemm_spec(device: str = "cpu", dtype: str = "float16", config: Mapping[str, int] | None = None,
              path: str = "auto") -> KernelSpec:
    """The reference GEMM's spec: 16x16x16 tiles / 3 stages on CPU, the per-arch config on CUDA.

    ``path`` forces one load path (``tma``, ``even_k``, ``masked``); ``auto`` lets the launcher choose
    per launch, as :func:`gemm` does. The name stays ``triton_gemm_<dtype>`` for ``auto``.
    """
    name = f"triton_gemm_{dtype}" if path == "auto" else f"triton_gemm_{path}_{dtype}"
    return make_spec(name, gemm_kernel, device, dtype, config, path=path)
