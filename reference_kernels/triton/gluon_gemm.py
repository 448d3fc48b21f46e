"""Persistent, warp-specialized Hopper GEMM written in Gluon: C[M, N] = A[M, K] @ B[K, N].

What it shows
    The producer/consumer pipeline of a Hopper GEMM spelled out by hand instead of left to Triton's
    pipeliner: one program per SM walks the output tiles pid, pid + #programs, ... (in GROUP_M order,
    so programs that run at the same time share B tiles and A row panels in L2); inside each program
    a 1-warp loader partition streams K tiles of A and B into shared memory with TMA while the
    default partition (4 warps = one warpgroup, or 8 warps = two) multiplies them with asynchronous
    ``wgmma`` and writes the tile out. Because the loader does not stop at tile boundaries, the next
    tile's first K tiles are already arriving while the consumer runs this tile's epilogue.

Pipeline scheme
    Shared memory holds a ring of NUM_STAGES slots, each one A box (BLOCK_M x BLOCK_K) and one B box
    (BLOCK_K x BLOCK_N), and two mbarriers per slot:

    ``ready[s]``  (count 1) the loader arms it with ``expect(bytes of both boxes)`` and issues the two
                  TMA loads on it; it completes when the TMA engine has delivered that many bytes.
    ``empty[s]``  (count 1) the consumer arrives on it once the wgmma that read slot s has retired.

    Both partitions count the K steps they have handled over all their tiles in ``it``; step ``it``
    uses slot ``it % NUM_STAGES`` and the barrier parity ``(it // NUM_STAGES) & 1``.
    Loader: wait ``empty[s]`` at parity ^ 1 (a freshly initialised barrier counts as having completed
    the phase before phase 0, so the first NUM_STAGES waits return at once), arm ``ready[s]``, issue
    the loads. Consumer: wait ``ready[s]`` at parity, issue ``wgmma`` on slot s asynchronously, wait
    until at most one wgmma is in flight (so the one of step it - 1 has retired) and arrive on the
    previous step's ``empty``; after the last K step of a tile it drains the last wgmma, frees its slot
    and runs the epilogue: the fp32 accumulator is cast to C's dtype and stored either through a
    staging tile in shared memory with a TMA store (``EPILOGUE_TMA``) or with masked stores straight
    from the wgmma register layout. With 8 consumer warps the two warpgroups issue separate wgmmas
    (rows 0-63 and 64-127 of the tile), so before one thread arrives on ``empty`` every consumer warp
    passes a partition barrier: the arrive then means both warpgroups are done with the slot.

Edges
    TMA zero-fills the parts of a box outside A or B, so ragged M, N and K (K not a multiple of
    BLOCK_K included) need no masks on the load side: the extra products are 0 * 0. The TMA store
    clips the box to C's shape, but writes whole 16-byte chunks of a row (see
    :mod:`reference_kernels.triton.persistent_ws_gemm`: at N = 65, fp16, it wrote columns 65..71), so
    the launcher uses it only when ``N * itemsize`` is a multiple of 16 and the staging tile fits in
    shared memory next to the ring; otherwise the epilogue uses masked pointer stores.

Preconditions (checked by :func:`launch_gluon_gemm`, which raises ValueError naming the problem)
    sm_90 (wgmma exists on sm_90a only), CUDA tensors, fp16 or bf16, one dtype for A, B and C, 2-D,
    shapes (M, K) @ (K, N) -> (M, N), row-major with unit inner stride, base pointers and row strides
    16-byte aligned (TMA's rules), M, N, K < 2**31, and a ring that fits in sm_90's 232448 bytes of
    shared memory per block. :func:`gluon_unavailable_reason` says when this Triton cannot build the
    kernel at all. The Triton interpreter cannot run Gluon kernels; :func:`compile_for_sm90` compiles
    it ahead of time without a GPU (tests/unit/test_gluon_gemm.py).

Triton versions
    Written against Triton 3.6 (the GPU machine) and 3.9 (CI). Two spellings differ and are bound
    once at import (see ``_tma_load`` below): the TMA copies (``async_copy_global_to_shared`` /
    ``async_copy_shared_to_global`` in 3.6, ``async_load`` / ``async_store`` in 3.9, where the old
    names raise) and the CTA barrier (``thread_barrier`` in 3.6, ``barrier`` in 3.9).

Numbers
    Not yet measured on a GPU. scripts/gpu/triton_gemm_perf.py times it (rows ``gluon_ws_gemm``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LOADER_REGS", "SMEM_LIMIT_SM90", "aot_signature", "check_preconditions", "compile_for_sm90",
           "gluon_unavailable_reason", "gluon_ws_gemm_kernel", "kernel_config", "launch_gluon_gemm",
           "shared_memory_bytes", "uses_tma_epilogue"]

SMEM_LIMIT_SM90 = 232448
"""sm_90's opt-in shared memory per block (227 KB)."""

_BARRIER_BYTES = 8
_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia import hopper
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
except ImportError as _exc:  # an older Triton, or one without the NVIDIA Gluon modules
    _GLUON_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    _GLUON_ERROR = None


def gluon_unavailable_reason() -> str | None:
    """None when this Triton can build the kernel, else a sentence saying why it cannot."""
    import triton

    version = getattr(triton, "__version__", "?")
    if _GLUON_ERROR is not None:
        return (f"Triton {version} has no usable triton.experimental.gluon Hopper module "
                f"(needs 3.5 or later; import failed with {_GLUON_ERROR})")
    missing = [name for name in ("warpgroup_mma", "warpgroup_mma_wait", "fence_async_shared", "tma", "mbarrier")
               if not hasattr(hopper, name)]
    if not hasattr(gl, "warp_specialize"):
        missing.append("gl.warp_specialize")
    if not (hasattr(tma, "async_load") or hasattr(tma, "async_copy_global_to_shared")):
        missing.append("a TMA load (tma.async_load or tma.async_copy_global_to_shared)")
    if not (hasattr(gl, "barrier") or hasattr(gl, "thread_barrier")):
        missing.append("a CTA barrier (gl.barrier or gl.thread_barrier)")
    if missing:
        return f"Triton {version}'s Gluon lacks {', '.join(missing)}"
    try:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    except ImportError:
        return f"Triton {version} has no host-side Gluon TensorDescriptor (triton.experimental.gluon.nvidia.hopper)"
    return None


if _GLUON_ERROR is None:
    # Version switch (see the module docstring): Triton 3.9 renamed the TMA copies and the CTA barrier,
    # and its old names raise. Bound here once; Gluon accepts builtins held in module globals.
    if hasattr(tma, "async_load"):
        _tma_load = tma.async_load                        # Triton >= 3.7
        _tma_store = tma.async_store
    else:
        _tma_load = tma.async_copy_global_to_shared       # Triton 3.5 / 3.6
        _tma_store = tma.async_copy_shared_to_global
    _cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier

    @gluon.jit
    def _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      GROUP_M: gl.constexpr):
        """Row and column offset of output tile ``tile`` in GROUP_M order.

        Tiles are numbered down columns of groups of GROUP_M tile rows: consecutive tiles share a
        column of B, and the GROUP_M rows of A of a group are reused across its columns.
        """
        tiles_per_group = GROUP_M * num_pid_n
        group = tile // tiles_per_group
        first_m = group * GROUP_M
        rows = gl.minimum(num_pid_m - first_m, GROUP_M)   # the last group may be shorter
        in_group = tile % tiles_per_group
        pid_m = first_m + in_group % rows
        pid_n = in_group // rows
        return pid_m * BLOCK_M, pid_n * BLOCK_N

    @gluon.jit
    def _loader_partition(a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K,
                          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                          GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr):
        """Worker partition (1 warp): TMA-load the K tiles of every tile of this program into the ring."""
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        k_tiles = gl.cdiv(K, BLOCK_K)
        stage_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
        it = 0
        for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
            for kt in range(k_tiles):
                s = it % NUM_STAGES
                parity = (it // NUM_STAGES) & 1
                # slot s is free once the consumer released it NUM_STAGES steps ago (parity ^ 1:
                # the first pass over the ring finds fresh barriers and does not wait)
                mbarrier.wait(empty.index(s), parity ^ 1)
                # ready[s] completes when both boxes have landed; out-of-bounds elements are
                # zero-filled and still count towards the bytes
                mbarrier.expect(ready.index(s), stage_bytes)
                _tma_load(a_desc, [off_m, kt * BLOCK_K], ready.index(s), a_ring.index(s))
                _tma_load(b_desc, [kt * BLOCK_K, off_n], ready.index(s), b_ring.index(s))
                it += 1

    @gluon.jit
    def _mma_epilogue_partition(c_desc, c_ptr, stride_cm, a_ring, b_ring, ready, empty, M, N, K,
                                BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                                GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr,
                                WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, EPILOGUE_TMA: gl.constexpr):
        """Default partition (WARPS_M * WARPS_N warps): wgmma over the ring, then store the tile."""
        # wgmma accumulator layout: warps tile the block WARPS_M x WARPS_N, instruction 16 x n x 16
        # (k = 256 bits of the 16-bit inputs), n = this warp column's share of BLOCK_N (<= 256)
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[WARPS_M, WARPS_N], instr_shape=[16, BLOCK_N // WARPS_N, 16])
        out_dtype: gl.constexpr = c_desc.dtype
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        k_tiles = gl.cdiv(K, BLOCK_K)
        if EPILOGUE_TMA:
            c_smem = gl.allocate_shared_memory(out_dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
        acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
        it = 0
        for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            off_m, off_n = _tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
            for kt in range(k_tiles):
                s = it % NUM_STAGES
                mbarrier.wait(ready.index(s), (it // NUM_STAGES) & 1)
                # use_acc=False on the first K tile starts the tile from zero
                acc = warpgroup_mma(a_ring.index(s), b_ring.index(s), acc, use_acc=kt > 0, is_async=True)
                # keep this wgmma in flight; the one of step it - 1 has now retired ...
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                # ... in every consumer warp (two warpgroups issue separate wgmmas) ...
                _cta_barrier()
                # ... so its slot goes back to the loader (no previous step inside this tile at kt == 0:
                # the last slot of the previous tile was released after its drain below)
                mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=kt > 0)
                it += 1
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            _cta_barrier()
            mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES), pred=k_tiles > 0)
            out = acc.to(out_dtype)
            if EPILOGUE_TMA:
                _stage_output(c_smem, out)
                fence_async_shared()                      # generic-proxy writes before the TMA read
                _cta_barrier()                            # every warp's part of the tile is written
                _tma_store(c_desc, [off_m, off_n], c_smem)  # clipped to (M, N) by the descriptor
            else:
                rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
                cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
                ptrs = c_ptr + rows[:, None].to(gl.int64) * stride_cm + cols[None, :]
                gl.store(ptrs, out, mask=(rows[:, None] < M) & (cols[None, :] < N))
        if EPILOGUE_TMA:
            tma.store_wait(0)

    @gluon.jit
    def _stage_output(c_smem, out):
        """Wait until the previous tile's TMA store has read the staging tile, then overwrite it."""
        tma.store_wait(0)
        _cta_barrier()                                    # only the issuing thread tracked that store
        c_smem.store(out)

    @gluon.jit
    def gluon_ws_gemm_kernel(a_desc, b_desc, c_desc, c_ptr, M, N, K, stride_cm,
                             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                             GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr,
                             WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, EPILOGUE_TMA: gl.constexpr,
                             LOADER_REGS: gl.constexpr):
        """Persistent warp-specialized GEMM; launch with num_warps = WARPS_M * WARPS_N, one program per SM."""
        dtype: gl.constexpr = a_desc.dtype
        a_ring = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
        b_ring = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NUM_STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        fence_async_shared()                              # barrier inits visible to the TMA unit

        gl.warp_specialize(
            [
                (_mma_epilogue_partition, (c_desc, c_ptr, stride_cm, a_ring, b_ring, ready, empty, M, N, K,
                                           BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES,
                                           WARPS_M, WARPS_N, EPILOGUE_TMA)),
                (_loader_partition, (a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K,
                                     BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES)),
            ],
            [1],              # loader warps
            [LOADER_REGS],    # registers per loader thread (setmaxnreg); the consumer gets the rest
        )

        for i in gl.static_range(NUM_STAGES):
            mbarrier.invalidate(ready.index(i))
            mbarrier.invalidate(empty.index(i))


# ----------------------------------------------------------------------------- host side

LOADER_REGS = 40
"""Registers per thread of the 1-warp loader partition (it only computes tile offsets)."""


def kernel_config(*, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, consumer_warps: int) -> dict[str, int]:
    """The wgmma warp grid (WARPS_M, WARPS_N) for a tile and consumer warp count; ValueError if none fits.

    Warps go along M while each warp still gets 16 rows of its own, then along N; each warp column's
    share of BLOCK_N is the wgmma instruction's n, which must be a multiple of 8 and at most 256.
    """
    if consumer_warps not in (4, 8):
        raise ValueError(f"consumer_warps must be 4 (one warpgroup) or 8 (two); got {consumer_warps}")
    if BLOCK_M % 64 or BLOCK_M <= 0:
        raise ValueError(f"BLOCK_M must be a positive multiple of 64 (wgmma M per warpgroup); got {BLOCK_M}")
    if BLOCK_K % 16 or BLOCK_K <= 0:
        raise ValueError(f"BLOCK_K must be a positive multiple of 16 (wgmma K for 16-bit inputs); got {BLOCK_K}")
    warps_m, warps_n = 4, 1
    while warps_m * warps_n < consumer_warps:
        if BLOCK_M >= 16 * warps_m * 2:
            warps_m *= 2
        else:
            warps_n *= 2
    if BLOCK_N % warps_n or (BLOCK_N // warps_n) % 8 or BLOCK_N // warps_n > 256:
        raise ValueError(f"BLOCK_N={BLOCK_N} over {warps_n} warp column(s) does not give a wgmma n that is a "
                         f"multiple of 8 and at most 256")
    return {"WARPS_M": warps_m, "WARPS_N": warps_n}


def shared_memory_bytes(*, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, stages: int, itemsize: int = 2,
                        epilogue_tma: bool) -> int:
    """Shared memory the kernel allocates: the A/B ring, its barriers and, with a TMA epilogue, C's staging tile."""
    ring = stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * itemsize
    barriers = 2 * stages * _BARRIER_BYTES
    staging = BLOCK_M * BLOCK_N * itemsize if epilogue_tma else 0
    return ring + barriers + staging


def uses_tma_epilogue(c: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, stages: int) -> bool:
    """Whether the launcher stores C through TMA: its rows end on 16-byte boundaries and the staging tile fits.

    A TMA store writes whole 16-byte chunks of a row, so a row of ``N * itemsize`` bytes that ends
    inside a chunk would be overrun; and the BLOCK_M x BLOCK_N staging tile must fit in shared memory
    next to the ring. Otherwise the epilogue uses masked stores from registers.
    """
    item = int(c.element_size())
    fits = shared_memory_bytes(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages, itemsize=item,
                               epilogue_tma=True) <= SMEM_LIMIT_SM90
    return fits and (int(c.shape[-1]) * item) % 16 == 0


def _dtype_name(t: Any) -> str:
    return str(t.dtype).rsplit(".", 1)[-1]


def check_preconditions(a: Any, b: Any, c: Any) -> None:
    """Raise ValueError naming the first precondition of the kernel that ``a``, ``b``, ``c`` break.

    Checks what needs no GPU first (rank, dtypes, shapes, strides, alignment), then that the tensors
    live on an sm_90 CUDA device.
    """
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D; got {t.dim()}-D with shape {tuple(t.shape)}")
    dtypes = {name: _dtype_name(t) for name, t in (("a", a), ("b", b), ("c", c))}
    for name, dt in dtypes.items():
        if dt not in _DTYPES:
            raise ValueError(f"dtype of {name} must be float16 or bfloat16; got {dt}")
    if len(set(dtypes.values())) != 1:
        raise ValueError(f"dtype mismatch: a, b and c must share one dtype; got a={dtypes['a']}, "
                         f"b={dtypes['b']}, c={dtypes['c']}")
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k or tuple(c.shape) != (m, n):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)} @ b {tuple(b.shape)} -> c must be ({m}, {n}) "
                         f"with b's rows == a's columns; got c {tuple(c.shape)}")
    if max(m, n, k) >= 2**31:
        raise ValueError(f"M, N, K must be below 2**31 (int32 tile offsets); got M={m}, N={n}, K={k}")
    for name, t in (("a", a), ("b", b), ("c", c)):
        item = t.element_size()
        if t.stride(1) != 1:
            raise ValueError(f"{name} must be row-major with unit inner stride (TMA); got strides {tuple(t.stride())}")
        if (t.stride(0) * item) % 16:
            raise ValueError(f"row stride of {name} must be a multiple of 16 bytes (TMA); got {t.stride(0)} "
                             f"elements = {t.stride(0) * item} bytes")
        if t.data_ptr() % 16:
            raise ValueError(f"base pointer of {name} must be 16-byte aligned (TMA); got address {t.data_ptr():#x}")
    devices = {str(t.device) for t in (a, b, c)}
    if len(devices) != 1 or a.device.type != "cuda":
        raise ValueError(f"a, b and c must be CUDA tensors on one sm_90 GPU; got devices {sorted(devices)}")
    import torch

    cap = torch.cuda.get_device_capability(a.device)
    if tuple(cap) != (9, 0):
        raise ValueError(f"the Gluon wgmma/TMA kernel targets sm_90 only; {a.device} is sm_{cap[0]}{cap[1]}")


def _shared_layout(block: list[int], dtype_name: str) -> Any:
    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, dtype_name))


def launch_gluon_gemm(a: Any, b: Any, c: Any, *, BLOCK_M: int = 128, BLOCK_N: int = 256, BLOCK_K: int = 64,
                      stages: int = 4, consumer_warps: int = 8, GROUP_M: int = 8,
                      num_programs: int | None = None) -> Any:
    """C = A @ B with the persistent warp-specialized Gluon kernel; returns ``c``.

    ``a`` (M, K), ``b`` (K, N), ``c`` (M, N) are torch CUDA tensors (see :func:`check_preconditions`;
    ValueError names what is wrong). ``consumer_warps`` (4 or 8) is the default partition's size; the
    loader adds one warp. ``num_programs`` defaults to the device's SM count (never more than the
    number of tiles). The epilogue stores through TMA when C's rows end on 16-byte boundaries and the
    staging tile fits in shared memory next to the ring, else with masked stores.
    """
    check_preconditions(a, b, c)
    reason = gluon_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    warps = kernel_config(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, consumer_warps=consumer_warps)
    if stages < 2:
        raise ValueError(f"stages must be at least 2 (one slot loading while one is multiplied); got {stages}")
    item = a.element_size()
    ring_only = shared_memory_bytes(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages,
                                    itemsize=item, epilogue_tma=False)
    if ring_only > SMEM_LIMIT_SM90:
        raise ValueError(f"{stages} stages of {BLOCK_M}x{BLOCK_K} + {BLOCK_K}x{BLOCK_N} tiles need {ring_only} bytes "
                         f"of shared memory; sm_90 allows {SMEM_LIMIT_SM90}")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    epilogue_tma = uses_tma_epilogue(c, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = _dtype_name(a)
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], _shared_layout([BLOCK_M, BLOCK_K], dt))
    b_desc = TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N], _shared_layout([BLOCK_K, BLOCK_N], dt))
    c_desc = TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N], _shared_layout([BLOCK_M, BLOCK_N], dt))
    if num_programs is None:
        import torch

        num_programs = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = -(-m // BLOCK_M) * -(-n // BLOCK_N)
    grid = (max(1, min(int(num_programs), tiles)),)
    gluon_ws_gemm_kernel[grid](a_desc, b_desc, c_desc, c, m, n, k, c.stride(0),
                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                               NUM_STAGES=stages, EPILOGUE_TMA=epilogue_tma, LOADER_REGS=LOADER_REGS,
                               num_warps=consumer_warps, **warps)
    return c


def aot_signature(*, dtype: str = "float16", BLOCK_M: int = 128, BLOCK_N: int = 256, BLOCK_K: int = 64,
                  stages: int = 4, consumer_warps: int = 8, GROUP_M: int = 8,
                  epilogue_tma: bool | None = None) -> tuple[dict[str, str], dict[str, Any], dict[Any, Any]]:
    """(signature, constexprs, attrs) for ``triton.compile`` of the kernel, as the JIT derives them.

    The JIT's view of a launch with 16-byte aligned C and M, N, K and C's row stride divisible by 16:
    those arguments get ``tt.divisibility`` 16, and each host Gluon ``TensorDescriptor`` becomes
    ``tensordesc<fp16[128, 64],NVMMASharedLayout(...)>`` (block shape and shared layout). ``epilogue_tma``
    None picks what the launcher picks for such a C: the TMA store when its staging tile fits next to
    the ring. Raises ValueError for a config :func:`kernel_config` rejects.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be float16 or bfloat16; got {dtype}")
    warps = kernel_config(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, consumer_warps=consumer_warps)
    if epilogue_tma is None:
        epilogue_tma = shared_memory_bytes(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages,
                                           epilogue_tma=True) <= SMEM_LIMIT_SM90
    ty = _DTYPES[dtype]

    def desc(block: list[int]) -> str:
        return f"tensordesc<{ty}[{', '.join(map(str, block))}],{_shared_layout(block, dtype)!r}>"

    runtime = {"a_desc": desc([BLOCK_M, BLOCK_K]), "b_desc": desc([BLOCK_K, BLOCK_N]),
               "c_desc": desc([BLOCK_M, BLOCK_N]), "c_ptr": f"*{ty}", "M": "i32", "N": "i32", "K": "i32",
               "stride_cm": "i32"}
    constexprs: dict[str, Any] = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "GROUP_M": GROUP_M,
                                  "NUM_STAGES": stages, "EPILOGUE_TMA": bool(epilogue_tma),
                                  "LOADER_REGS": LOADER_REGS, **warps}
    names = list(gluon_ws_gemm_kernel.arg_names)
    if set(names) != set(runtime) | set(constexprs):
        raise RuntimeError(f"aot_signature is out of date with the kernel's parameters {names}")
    signature = {name: runtime.get(name, "constexpr") for name in names}
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in ("c_ptr", "M", "N", "K", "stride_cm")}
    return signature, constexprs, attrs


def compile_for_sm90(*, dtype: str = "float16", BLOCK_M: int = 128, BLOCK_N: int = 256, BLOCK_K: int = 64,
                     stages: int = 4, consumer_warps: int = 8, GROUP_M: int = 8,
                     epilogue_tma: bool | None = None, arch: int = 90) -> Any:
    """Compile the kernel ahead of time for ``sm_{arch}`` (no GPU needed); return Triton's CompiledKernel.

    Specialized as :func:`aot_signature` describes (the JIT's view of an aligned launch); its
    ``asm`` holds the TTGIR, PTX and cubin, ``metadata.shared`` the shared memory per block.
    Raises RuntimeError when :func:`gluon_unavailable_reason` says this Triton cannot build it.
    """
    reason = gluon_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile
    from triton.experimental.gluon._runtime import GluonASTSource

    signature, constexprs, attrs = aot_signature(dtype=dtype, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                                 stages=stages, consumer_warps=consumer_warps, GROUP_M=GROUP_M,
                                                 epilogue_tma=epilogue_tma)
    source = GluonASTSource(gluon_ws_gemm_kernel, signature, constexprs, attrs)
    return triton_compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": consumer_warps, "num_stages": 1})
