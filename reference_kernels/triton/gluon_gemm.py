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
    and runs the epilogue: the fp32 accumulator is cast to C's dtype and stored either with TMA stores
    (``EPILOGUE_TMA``: the tile goes out in EPI_SPLIT column chunks, each written to one of EPI_BUFS
    staging buffers in shared memory and stored from there; a buffer is rewritten only once the TMA
    store that read it has finished reading, ``tma.store_wait(EPI_BUFS - 1)``) or with masked stores
    straight from the wgmma register layout. With 8 consumer warps the two warpgroups issue separate
    wgmmas (rows 0-63 and 64-127 of the tile), so before one thread arrives on ``empty`` every consumer
    warp passes a partition barrier: the arrive then means both warpgroups are done with the slot.

Edges
    TMA zero-fills the parts of a box outside A or B, so ragged M, N and K (K not a multiple of
    BLOCK_K included) need no masks on the load side: the extra products are 0 * 0. The TMA store
    clips the box to C's shape, but writes whole 16-byte chunks of a row (see
    :mod:`reference_kernels.triton.persistent_ws_gemm`: at N = 65, fp16, it wrote columns 65..71), so
    the launcher uses it only when ``N * itemsize`` is a multiple of 16 and a staging buffer fits in
    shared memory next to the ring (:func:`epilogue_plan`: the whole tile next to 3 stages of
    128x256x64, two 128x128 chunks next to 4); otherwise the epilogue uses masked pointer stores.

Preconditions (checked by :func:`launch_gluon_gemm`, which raises ValueError naming the problem)
    sm_90 (wgmma exists on sm_90a only), CUDA tensors, fp16 or bf16, one dtype for A, B and C, 2-D,
    shapes (M, K) @ (K, N) -> (M, N), row-major with unit inner stride, base pointers and row strides
    16-byte aligned (TMA's rules), M, N, K < 2**31, and a ring that fits in sm_90's 232448 bytes of
    shared memory per block. :func:`gluon_unavailable_reason` says when this Triton cannot build the
    kernel at all. The Triton interpreter cannot run Gluon kernels; :func:`compile_for_sm90` compiles
    it ahead of time without a GPU (tests/unit/test_gluon_gemm.py).

Triton versions
    Written against Triton 3.6 and 3.9. Two spellings differ and are bound
    once at import (see ``_tma_load`` below): the TMA copies (``async_copy_global_to_shared`` /
    ``async_copy_shared_to_global`` in 3.6, ``async_load`` / ``async_store`` in 3.9, where the old
    names raise) and the CTA barrier (``thread_barrier`` in 3.6, ``barrier`` in 3.9).

Numbers (H200, Triton 3.6, fp16 4096^3; docs/validation/2026-11-23-h200-1257/)
    Correct at every generated shape under pipecheck's coverage, tile probe and determinism checks
    (fp16 and bf16), synccheck clean; racecheck's only hazards are on Triton's warp-specialize
    dispatch state, none on this kernel's ring or staging buffers, and Triton's ConSan finds no race
    (run-e/gluon_race_probe.md). Against torch.matmul, timed alternately with 1 s idle before each
    timing (scripts/gpu/gluon_gemm_tune.py, the median over 7 and over 9 rounds: run-d/ and run-f/):
    this default (128x256x64, 4 stages, 8 consumer warps, GROUP_M 8, two-chunk TMA epilogue) 98.6% and
    99.3%; 3 stages with GROUP_M 16 and the whole-tile TMA epilogue 100.5% in both (686-701 TFLOP/s);
    the reference Triton GEMM's launcher default 97.2% and 97.9% in the same rounds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["GPU_CONFIG", "LOADER_REGS", "SMEM_LIMIT_SM90", "aot_signature", "check_preconditions",
           "compile_for_sm90", "epilogue_plan", "gluon_gemm_spec", "gluon_unavailable_reason", "gluon_ws_gemm_kernel",
           "kernel_config", "launch_gluon_gemm", "shared_memory_bytes", "unavailable_reason",
           "uses_tma_epilogue"]

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
                                WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, EPILOGUE_TMA: gl.constexpr,
                                EPI_SPLIT: gl.constexpr, EPI_BUFS: gl.constexpr):
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
            c_smem = gl.allocate_shared_memory(out_dtype, [EPI_BUFS, BLOCK_M, BLOCK_N // EPI_SPLIT], c_desc.layout)
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
                parts = _split_columns(out, EPI_SPLIT)
                for i in gl.static_range(EPI_SPLIT):
                    staging = c_smem.index(i % EPI_BUFS)
                    # the TMA store that last read this staging buffer has finished reading it
                    # (stores complete in order; EPI_BUFS - 1 newer ones may still be in flight)
                    tma.store_wait(EPI_BUFS - 1)
                    _cta_barrier()                        # only the issuing thread tracked that store
                    staging.store(parts[i])
                    fence_async_shared()                  # generic-proxy writes before the TMA read
                    _cta_barrier()                        # every warp's part of the chunk is written
                    _tma_store(c_desc, [off_m, off_n + i * (BLOCK_N // EPI_SPLIT)], staging)  # clipped to (M, N)
            else:
                rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
                cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
                ptrs = c_ptr + rows[:, None].to(gl.int64) * stride_cm + cols[None, :]
                gl.store(ptrs, out, mask=(rows[:, None] < M) & (cols[None, :] < N))
        if EPILOGUE_TMA:
            tma.store_wait(0)

    @gluon.jit
    def _split_columns(x, PARTS: gl.constexpr):
        """``x`` cut into PARTS equal column blocks, left to right (PARTS a power of two).

        Each halving reshapes (M, N) to (M, 2, N / 2), moves the 2 last and splits it; in the wgmma
        accumulator layout the highest column bits are register bits, so no data changes threads.
        """
        xs = (x,)
        for _ in gl.static_range(PARTS.bit_length() - 1):
            halves = ()
            for j in gl.static_range(len(xs)):
                y = xs[j]
                halves += y.reshape(y.shape[0], 2, y.shape[1] // 2).permute(0, 2, 1).split()
            xs = halves  # type: ignore[assignment]  # a tuple that doubles each round
        return xs

    @gluon.jit
    def gluon_ws_gemm_kernel(a_desc, b_desc, c_desc, c_ptr, M, N, K, stride_cm,
                             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                             GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr,
                             WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, EPILOGUE_TMA: gl.constexpr,
                             EPI_SPLIT: gl.constexpr, EPI_BUFS: gl.constexpr, LOADER_REGS: gl.constexpr):
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
                                           WARPS_M, WARPS_N, EPILOGUE_TMA, EPI_SPLIT, EPI_BUFS)),
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
                        epilogue_tma: bool, epi_split: int = 1, epi_bufs: int = 1) -> int:
    """Shared memory the kernel allocates: the A/B ring, its barriers and, with a TMA epilogue, the
    ``epi_bufs`` staging buffers of one ``BLOCK_M x BLOCK_N / epi_split`` column chunk of C each."""
    ring = stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * itemsize
    barriers = 2 * stages * _BARRIER_BYTES
    staging = epi_bufs * BLOCK_M * (BLOCK_N // epi_split) * itemsize if epilogue_tma else 0
    return ring + barriers + staging


EpiloguePlan = tuple[bool, int, int]
"""(TMA store or masked stores, column chunks per tile, staging buffers)."""

_MASKED: EpiloguePlan = (False, 1, 1)


def epilogue_plan(n_cols: int, itemsize: int, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, stages: int,
                  tma: bool | None = None, split: int | None = None, bufs: int | None = None) -> EpiloguePlan:
    """How the epilogue stores a tile of C with ``n_cols`` columns: ``(tma, split, bufs)``.

    A TMA store writes whole 16-byte chunks of a row, so it is used only when a row of C
    (``n_cols * itemsize`` bytes) ends on a 16-byte boundary; otherwise, or with ``tma=False``,
    masked stores from registers. The tile goes out in ``split`` column chunks through ``bufs``
    staging buffers in shared memory (two let one chunk's store overlap the next chunk's writes).
    Unless given, the plan is the first whose staging fits in shared memory next to the ring, in the
    order: the whole tile in one buffer, then 2, 4 and 8 column chunks, each tried with two buffers
    before one. ValueError for a given split or bufs that cannot work or does not fit; masked stores
    when nothing fits and nothing was forced.
    """
    if split is not None and (split not in (1, 2, 4, 8) or BLOCK_N % split or (BLOCK_N // split) * itemsize < 16):
        raise ValueError(f"epilogue split must be 1, 2, 4 or 8 and leave chunks of at least 16 bytes of "
                         f"BLOCK_N={BLOCK_N}; got {split}")
    if bufs is not None and bufs not in (1, 2):
        raise ValueError(f"epilogue staging buffers must be 1 or 2; got {bufs}")
    if tma is False or (n_cols * itemsize) % 16:
        return _MASKED
    plans = [(sp, bf) for sp in ((split,) if split else (1, 2, 4, 8)) for bf in ((bufs,) if bufs else (2, 1))
             if not (sp == 1 and bf == 2 and bufs is None) and BLOCK_N % sp == 0 and (BLOCK_N // sp) * itemsize >= 16]
    for sp, bf in plans:
        if shared_memory_bytes(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, stages=stages, itemsize=itemsize,
                               epilogue_tma=True, epi_split=sp, epi_bufs=bf) <= SMEM_LIMIT_SM90:
            return (True, sp, bf)
    if tma or split or bufs:
        raise ValueError(f"no TMA epilogue with split={split} bufs={bufs} fits in shared memory next to {stages} "
                         f"stages of {BLOCK_M}x{BLOCK_K} + {BLOCK_K}x{BLOCK_N} tiles")
    return _MASKED


def uses_tma_epilogue(c: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, stages: int) -> bool:
    """Whether the launcher's default plan (:func:`epilogue_plan`) stores this C through TMA."""
    return epilogue_plan(int(c.shape[-1]), int(c.element_size()), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                         BLOCK_K=BLOCK_K, stages=stages)[0]


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
                      num_programs: int | None = None, epilogue_tma: bool | None = None,
                      epi_split: int | None = None, epi_bufs: int | None = None, return_kernel: bool = False) -> Any:
    """C = A @ B with the persistent warp-specialized Gluon kernel; returns ``c`` (with ``return_kernel``,
    Triton's compiled kernel instead, which is what ``pipecheck.check_sass`` inspects; None when no
    kernel ran because C is empty or K is 0).

    ``a`` (M, K), ``b`` (K, N), ``c`` (M, N) are torch CUDA tensors (see :func:`check_preconditions`;
    ValueError names what is wrong). ``consumer_warps`` (4 or 8) is the default partition's size; the
    loader adds one warp. ``num_programs`` defaults to the device's SM count (never more than the
    number of tiles). The epilogue stores through TMA when C's rows end on 16-byte boundaries and a
    staging buffer fits in shared memory next to the ring, else with masked stores; ``epilogue_tma``
    (False forces masked stores), ``epi_split`` and ``epi_bufs`` override :func:`epilogue_plan`.
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
        return None if return_kernel else c
    if k == 0:
        c.zero_()
        return None if return_kernel else c
    tma_store, split, bufs = epilogue_plan(n, item, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                           stages=stages, tma=epilogue_tma, split=epi_split, bufs=epi_bufs)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = _dtype_name(a)
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], _shared_layout([BLOCK_M, BLOCK_K], dt))
    b_desc = TensorDescriptor.from_tensor(b, [BLOCK_K, BLOCK_N], _shared_layout([BLOCK_K, BLOCK_N], dt))
    c_block = [BLOCK_M, BLOCK_N // split]
    c_desc = TensorDescriptor.from_tensor(c, c_block, _shared_layout(c_block, dt))
    if num_programs is None:
        import torch

        num_programs = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = -(-m // BLOCK_M) * -(-n // BLOCK_N)
    grid = (max(1, min(int(num_programs), tiles)),)
    compiled = gluon_ws_gemm_kernel[grid](a_desc, b_desc, c_desc, c, m, n, k, c.stride(0),
                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                               NUM_STAGES=stages, EPILOGUE_TMA=tma_store, EPI_SPLIT=split, EPI_BUFS=bufs,
                               LOADER_REGS=LOADER_REGS,
                               num_warps=consumer_warps, **warps)
    return compiled if return_kernel else c


GPU_CONFIG: dict[str, int] = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8,
                              "GROUP_M": 8}
"""The spec's and the launcher's default configuration."""


def unavailable_reason(device: str) -> str | None:
    """Why the kernel cannot run on ``device`` here (None when it can): the CPU tier, an older Triton, not sm_90."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "the Triton interpreter (CPU tier) cannot run Gluon kernels; tests/unit/test_gluon_gemm.py checks its sm_90 build"
    if not str(device).startswith("cuda"):
        return "needs an sm_90 CUDA GPU (wgmma and TMA)"
    reason = gluon_unavailable_reason()
    if reason is not None:
        return reason
    import torch

    cap = tuple(torch.cuda.get_device_capability())
    if cap != (9, 0):
        return f"the Gluon wgmma/TMA kernel targets sm_90 only; this GPU is sm_{cap[0]}{cap[1]}"
    return None


def gluon_gemm_spec(dtype: str = "float16", config: Mapping[str, int] | None = None) -> Any:
    """The pipecheck spec of the kernel (GPU only: call :func:`unavailable_reason` first).

    pipecheck's guarded allocations pad rows to 16 elements and align base pointers, which TMA needs;
    a stage sweep re-launches with ``stages`` overridden.
    """
    from reference_kernels.triton.gemm import gemm_kernel_spec

    cfg: dict[str, Any] = {**GPU_CONFIG, **(config or {})}

    def run(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        launch_gluon_gemm(arrays["a"], arrays["b"], arrays["c"], **{**cfg, **({"stages": stages} if stages else {})})

    return gemm_kernel_spec(
        f"gluon_ws_gemm_{dtype}", run, cfg, dtype=dtype,
        description="persistent warp-specialized Gluon GEMM: 1-warp TMA loader, wgmma consumers, mbarrier ring")


def aot_signature(*, dtype: str = "float16", BLOCK_M: int = 128, BLOCK_N: int = 256, BLOCK_K: int = 64,
                  stages: int = 4, consumer_warps: int = 8, GROUP_M: int = 8, epilogue_tma: bool | None = None,
                  epi_split: int | None = None, epi_bufs: int | None = None,
                  ) -> tuple[dict[str, str], dict[str, Any], dict[Any, Any]]:
    """(signature, constexprs, attrs) for ``triton.compile`` of the kernel, as the JIT derives them.

    The JIT's view of a launch with 16-byte aligned C and M, N, K and C's row stride divisible by 16:
    those arguments get ``tt.divisibility`` 16, and each host Gluon ``TensorDescriptor`` becomes
    ``tensordesc<fp16[128, 64],NVMMASharedLayout(...)>`` (block shape and shared layout). The epilogue
    is what :func:`epilogue_plan` picks for such a C with the same overrides as the launcher's.
    Raises ValueError for a config :func:`kernel_config` or :func:`epilogue_plan` rejects.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be float16 or bfloat16; got {dtype}")
    warps = kernel_config(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, consumer_warps=consumer_warps)
    tma_store, split, bufs = epilogue_plan(BLOCK_N, 2, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                           stages=stages, tma=epilogue_tma, split=epi_split, bufs=epi_bufs)
    ty = _DTYPES[dtype]

    def desc(block: list[int]) -> str:
        return f"tensordesc<{ty}[{', '.join(map(str, block))}],{_shared_layout(block, dtype)!r}>"

    runtime = {"a_desc": desc([BLOCK_M, BLOCK_K]), "b_desc": desc([BLOCK_K, BLOCK_N]),
               "c_desc": desc([BLOCK_M, BLOCK_N // split]), "c_ptr": f"*{ty}", "M": "i32", "N": "i32", "K": "i32",
               "stride_cm": "i32"}
    constexprs: dict[str, Any] = {"BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "GROUP_M": GROUP_M,
                                  "NUM_STAGES": stages, "EPILOGUE_TMA": tma_store, "EPI_SPLIT": split,
                                  "EPI_BUFS": bufs,
                                  "LOADER_REGS": LOADER_REGS, **warps}
    names = list(gluon_ws_gemm_kernel.arg_names)
    if set(names) != set(runtime) | set(constexprs):
        raise RuntimeError(f"aot_signature is out of date with the kernel's parameters {names}")
    signature = {name: runtime.get(name, "constexpr") for name in names}
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in ("c_ptr", "M", "N", "K", "stride_cm")}
    return signature, constexprs, attrs


def compile_for_sm90(*, dtype: str = "float16", BLOCK_M: int = 128, BLOCK_N: int = 256, BLOCK_K: int = 64,
                     stages: int = 4, consumer_warps: int = 8, GROUP_M: int = 8,
                     epilogue_tma: bool | None = None, epi_split: int | None = None, epi_bufs: int | None = None,
                     arch: int = 90) -> Any:
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
                                                 epilogue_tma=epilogue_tma, epi_split=epi_split,
                                                 epi_bufs=epi_bufs)
    source = GluonASTSource(gluon_ws_gemm_kernel, signature, constexprs, attrs)
    return triton_compile(source, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": consumer_warps, "num_stages": 1})
