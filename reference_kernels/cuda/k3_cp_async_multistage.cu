// k3_cp_async_multistage.cu -- rung 3: cp.async multi-stage pipeline (cuda_pipeline.h primitives).
//
// What it demonstrates: asynchronous global->shared copies that bypass registers
// (__pipeline_memcpy_async = cp.async), grouped per tile (__pipeline_commit) and awaited by age
// (__pipeline_wait_prior). STAGES-1 tiles are in flight while the warps multiply the oldest one, so
// the per-tile cost approaches max(load latency, compute) instead of their sum.
//
// Pipeline scheme: a ring of STAGES smem buffers, STAGES-1 tiles in flight, one barrier per tile.
//   prologue : issue tiles 0 .. STAGES-2, one commit group each (empty groups past the last tile
//              keep the group count uniform, so the wait below never needs a runtime argument)
//   main loop: k = 0 .. n-1 :
//                wait_prior(STAGES-2)  -> this thread's copies of tile k have landed
//                __syncthreads          -> everyone's copies have landed, AND everyone finished tile k-1
//                issue tile k+STAGES-1 into stage (k-1) % STAGES (just freed), commit
//                mma stage k % STAGES
//   epilogue : the last STAGES-1 iterations issue nothing (the drain); then the accumulators go to C.
//   STAGES == 1 is the unpipelined reference point of the stage sweep: issue, wait, compute.
//
// Preconditions (checked by the launcher): sm_80+ (cp.async); A (M,K) fp16, B (K,N) fp16, C (M,N)
// fp32, row-major, unit column stride; M, N, K >= 1. Chunks that are not fully inside the matrix or
// not 16-byte aligned are gathered synchronously with zero fill (gemm_common.cuh).
// Launch (default build): grid (ceil(N/128), ceil(M/128)), 128 threads (4 warps of 64 x 64, 2 (M) x 2 (N)),
// dynamic smem STAGES * 18944 bytes per block (A 128 x 40 + B 32 x 136 halves per stage; 37888 for the
// default STAGES=2: two blocks per SM on sm_80, sm_86, sm_89 and sm_90).
// Wide build (-DPIPECHECK_K3_WIDE, launch.py's "k3_cp_async_wide"): 128 x 256 block tile, grid
// (ceil(N/256), ceil(M/128)), 256 threads (8 warps of 64 x 64, 2 (M) x 4 (N)), one block per SM
// (__launch_bounds__(256, 1)), dynamic smem STAGES * 27136 bytes (A 128 x 40 + B 32 x 264 halves per
// stage; 108544 for its default STAGES=4: sm_80 and sm_90; sm_86 / sm_89 (99 KB) take at most 3 stages,
// 81408 bytes). A K tile feeds 128 x 256 outputs with 128 + 256 rows of operands instead of 128 x 128
// with 128 + 128: 25% fewer global->smem bytes per FLOP (the default build is bound by those loads:
// load-only 0.398 ms vs compute-only 0.261 ms at 3 stages).
// With one block per SM nothing hides a barrier: the classic loop above stalls all 8 warps at every
// __syncthreads, and the wide build with it reaches 283 TFLOP/s (0.491 ms against the cost model's 0.303). So
// the wide build runs the cross-tile loop (xtile_mainloop, -DPIPECHECK_XTILE, below): the barrier of
// tile k+1 sits inside tile k, after the last fragments of tile k are loaded and before its last mma,
// and every stage holds a tile from the prologue on. With -DPIPECHECK_XTILE_SPLIT (also on in the wide
// build) the refill after the barrier issues only A's chunks; B's follow at the next tile's first k16
// step, so the copies are spread over the tile instead of bursting at the barrier.
// Numbers (H200, 4096^3, torch.matmul 763-765 TFLOP/s, docs/validation/2026-11-22-h200-0754/):
// classic loop 283 TFLOP/s; cross-tile 368 / 376 / 367 / 366 with 3 / 4 / 5 / 6 stages; cross-tile with
// split issue 399 / 392 / 392 with 4 / 5 / 6 stages: 399 TFLOP/s is 52% of cuBLAS, the ladder's best.
// Against a cuBLAS at 696 TFLOP/s the same build reaches 400 TFLOP/s, 0.58 of cuBLAS
// (docs/validation/2026-11-23-h200-1121/cuda_ladder_bench.md, the number the README quotes).
// In the default 128 x 128 build (two blocks per SM) the cross-tile loop gains little (332 vs 325 at 4
// stages; 335 with split issue): the other block already fills the barrier bubbles there.
// Compile-time knobs: PIPECHECK_STAGES (1..4; the wide build 2..6); PIPECHECK_K3_WIDE (the wide build above);
// PIPECHECK_XTILE (1: the cross-tile loop; 0: the classic loop, for comparison) and PIPECHECK_XTILE_SPLIT;
// PIPECHECK_SUBTILES (1 or 2: BK-deep K tiles per stage, i.e. per barrier; smem per stage scales with it);
// PIPECHECK_LOAD_ONLY / PIPECHECK_COMPUTE_ONLY build the load-only and compute-only variants the cost
// model is fed with (results are then meaningless).
// Numbers reached by the default build (docs/validation/2026-11-22-h200-0223/cuda_ladder_bench.md):
// 272 / 325 / 328 TFLOP/s at 4096^3 with 2 / 3 / 4 stages on an H200 (37% / 44% / 44% of
// torch.matmul's 742); 1 stage 231. The cost model predicts 0.400 ms at 3 stages from load-only
// 0.398 ms and compute-only 0.261 ms; measured 0.423 ms.
#include <cuda_pipeline.h>

#include "gemm_common.cuh"

#ifndef PIPECHECK_STAGES
#ifndef PIPECHECK_K3_WIDE
#define PIPECHECK_STAGES 2  // pipecheck:stages
#else
#define PIPECHECK_STAGES 4  // the wide build's default (launch.py passes the stage count explicitly)
#endif
#endif

namespace {
constexpr int STAGES = PIPECHECK_STAGES;
#ifdef PIPECHECK_K3_WIDE
static_assert(STAGES >= 1 && STAGES <= 6, "PIPECHECK_STAGES must be 1..6 (6 stages = 162816 B of smem)");
constexpr int BM = 128, BN = 256;
constexpr int THREADS = 256;             // 8 warps, 2 (M) x 4 (N)
constexpr int WARPS_N = 4;
constexpr int MIN_BLOCKS = 1;            // launch-bounds occupancy target (register cap 255)
#else
static_assert(STAGES >= 1 && STAGES <= 4, "PIPECHECK_STAGES must be 1..4 (4 stages = 75776 B of smem)");
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 128;             // 4 warps, 2 (M) x 2 (N)
constexpr int WARPS_N = 2;
constexpr int MIN_BLOCKS = 2;            // launch-bounds occupancy target
#endif
constexpr int WM = 4, WN = 8;            // warp tile 64 x 64
static_assert(THREADS / pc::kWarp == (BM / (WM * 16)) * WARPS_N && BN == WARPS_N * WN * 8, "warps must tile the block");
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
#ifndef PIPECHECK_SUBTILES
#define PIPECHECK_SUBTILES 1
#endif
// BK-deep K tiles per stage, copied and multiplied between two barriers: 2 halves the number of
// barriers per FLOP (with one block per SM nothing else runs while a barrier drains)
constexpr int SUB = PIPECHECK_SUBTILES;
static_assert(SUB == 1 || SUB == 2, "PIPECHECK_SUBTILES must be 1 or 2");
constexpr int SUB_ELEMS = AT::ELEMS + BT::ELEMS;  // one K tile: A (BM, BK+skew) then B (BK, BN+skew)
constexpr int STAGE_ELEMS = SUB * SUB_ELEMS;      // one stage: SUB consecutive K tiles
constexpr int KT = SUB * pc::BK;                  // K depth of one stage
using Map = pc::ChunkMap<BM, BN, THREADS, AT::LD, BT::LD>;  // per thread: 4 A + 4 B chunks (wide: 2 A + 4 B)

// One 16-byte chunk: cp.async when it is whole and aligned, otherwise a zero-filled gather.
__device__ __forceinline__ void copy_chunk(__half* dst, const __half* base, int rows, int cols, int ld, int r,
                                           int c) {
  const bool whole = pc::chunk_in_bounds(base, rows, cols, ld, r, c);  // pipecheck:tail_guard
  if (whole) {
    __pipeline_memcpy_async(dst, base + static_cast<long long>(r) * ld + c, 16);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}

// Issue this thread's copies of stage-sized K tile k_tile (SUB BK-deep tiles) into smem stage `stage`
// (no commit). a_src / b_src: this thread's first A / B chunk of K tile 0 (valid only when interior is true).
// PART: 0 both operands, 1 A only, 2 B only (the cross-tile build can issue the two halves apart).
template <int PART = 0>
__device__ __forceinline__ void issue_tile(__half* smem, int stage, int k_tile, const __half* A, const __half* B,
                                           int M, int N, int K, int lda, int ldb, int block_m0, int block_n0,
                                           const Map& map, bool interior, const __half* a_src,
                                           const __half* b_src) {
#pragma unroll
  for (int sub = 0; sub < SUB; ++sub) {
    __half* As = smem + stage * STAGE_ELEMS + sub * SUB_ELEMS;  // (BM, BK + skew)
    __half* Bs = As + AT::ELEMS;                                // (BK, BN + skew)
    const int k0 = (k_tile * SUB + sub) * pc::BK;  // past K (SUB = 2, odd tile count): zero-filled below
    if (interior && k0 + pc::BK <= K) {  // block-uniform: every chunk whole and aligned, no per-chunk test
      const __half* a = a_src + k0;
      const __half* b = b_src + static_cast<long long>(k0) * ldb;
      if (PART != 2) {
#pragma unroll
        for (int i = 0; i < Map::A_PER; ++i) {
          __pipeline_memcpy_async(&As[map.a_smem(i)], a + static_cast<long long>(i * Map::A_ROW_STEP) * lda, 16);
        }
      }
      if (PART != 1) {
#pragma unroll
        for (int i = 0; i < Map::B_PER; ++i) {
          __pipeline_memcpy_async(&Bs[map.b_smem(i)], b + static_cast<long long>(i * Map::B_ROW_STEP) * ldb, 16);
        }
      }
      continue;
    }
    if (PART != 2) {
#pragma unroll
      for (int i = 0; i < Map::A_PER; ++i) {
        const int r = map.a_row + i * Map::A_ROW_STEP;
        copy_chunk(&As[map.a_smem(i)], A, M, K, lda, block_m0 + r, k0 + map.a_col);  // pipecheck:a_rows
      }
    }
    if (PART != 1) {
#pragma unroll
      for (int i = 0; i < Map::B_PER; ++i) {
        const int r = map.b_row + i * Map::B_ROW_STEP;
        copy_chunk(&Bs[map.b_smem(i)], B, K, N, ldb, k0 + r, block_n0 + map.b_col);
      }
    }
  }
}

__device__ __forceinline__ void compute_stage(const __half* smem, int stage, float (&acc)[WM][WN][4],
                                              int warp_m0, int warp_n0, int lane) {
#ifndef PIPECHECK_LOAD_ONLY
#pragma unroll
  for (int sub = 0; sub < SUB; ++sub) {
    const __half* As = smem + stage * STAGE_ELEMS + sub * SUB_ELEMS;
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
  }
#endif
}

#if defined(PIPECHECK_XTILE) && (PIPECHECK_XTILE + 0) == 0  // -DPIPECHECK_XTILE=0: the classic loop
#undef PIPECHECK_XTILE
#endif
#if defined(PIPECHECK_XTILE) && (defined(PIPECHECK_LOAD_ONLY) || defined(PIPECHECK_COMPUTE_ONLY))
// The cost model's load-only and compute-only builds time the copies alone and the math alone; the
// cross-tile order only changes how the two overlap, so those builds keep the classic loop.
#undef PIPECHECK_XTILE
#endif
#ifdef PIPECHECK_XTILE
static_assert(STAGES >= 2, "PIPECHECK_XTILE needs at least 2 stages");
// Cross-tile build (-DPIPECHECK_XTILE): the barrier of K tile k+1 moves inside tile k. Every stage
// holds a tile from the prologue on (STAGES tiles issued, not STAGES-1); in tile k, once the fragments
// of its last k16 step are being loaded, the warps wait for tile k+1, meet at the barrier (after which
// nobody reads stage k % STAGES any more), refill that stage with tile k + STAGES, load tile k+1's
// first fragments and only then issue tile k's last mma. So the tensor pipe still holds queued mma
// while the warps meet, and tile k+1's first ldmatrix latency hides behind tile k's last step.
// Fragments are double-buffered by k16-step parity (the steps per stage, KSTEPS, are even).
__device__ __forceinline__ void xtile_mainloop(__half* smem, float (&acc)[WM][WN][4], const __half* A,
                                               const __half* B, int M, int N, int K, int lda, int ldb,
                                               int block_m0, int block_n0, const Map& map, bool interior,
                                               const __half* a_src, const __half* b_src, int num_k_tiles,
                                               int warp_m0, int warp_n0, int lane) {
  constexpr int STEPS_PER_SUB = pc::BK / 16;
  constexpr int KSTEPS = SUB * STEPS_PER_SUB;
  static_assert(KSTEPS % 2 == 0, "fragment buffers alternate by step parity");
  unsigned a[2][WM][4];
  unsigned b[2][WN][2];
  // prologue: tiles 0 .. STAGES-1, one group each (empty groups past the last tile)
  for (int fill = 0; fill < STAGES; ++fill) {
    if (fill < num_k_tiles) {
      issue_tile(smem, fill, fill, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
    }
    __pipeline_commit();
  }
  __pipeline_wait_prior(STAGES - 1);  // group 0 (tile 0) has landed for this thread
  __syncthreads();                    // ... and for every thread
  pc::load_frags<WM, WN, AT::LD, BT::LD>(a[0], b[0], smem, smem + AT::ELEMS, 0, warp_m0, warp_n0, lane);
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int stage = k_tile % STAGES;
    const __half* st = smem + stage * STAGE_ELEMS;
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
      const int nb = (s + 1) & 1;
#ifdef PIPECHECK_XTILE_SPLIT
      if (s == 0 && k_tile > 0) {  // the B half of the tile the previous barrier freed a stage for
        const int fetch_tile = k_tile - 1 + STAGES;
        if (fetch_tile < num_k_tiles) {
          issue_tile<2>(smem, (k_tile - 1) % STAGES, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map,
                        interior, a_src, b_src);
        }
        __pipeline_commit();
      }
#endif
      if (s + 1 < KSTEPS) {
        const __half* As = st + ((s + 1) / STEPS_PER_SUB) * SUB_ELEMS;
        pc::load_frags<WM, WN, AT::LD, BT::LD>(a[nb], b[nb], As, As + AT::ELEMS, ((s + 1) % STEPS_PER_SUB) * 16,
                                               warp_m0, warp_n0, lane);
      } else {
        // groups committed so far: tiles 0 .. k_tile + STAGES - 1; tile k_tile + 1 must have landed
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();  // tile k+1 landed everywhere; every warp's last read of `stage` was issued
        const int fetch_tile = k_tile + STAGES;
#ifdef PIPECHECK_XTILE_SPLIT  // A now, B (and the commit) at the next tile's first step
        if (fetch_tile < num_k_tiles) {
          issue_tile<1>(smem, stage, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src,
                        b_src);
        }
#else
        if (fetch_tile < num_k_tiles) {
          issue_tile(smem, stage, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src,
                     b_src);
        }
        __pipeline_commit();
#endif
        if (k_tile + 1 < num_k_tiles) {
          const __half* As = smem + ((k_tile + 1) % STAGES) * STAGE_ELEMS;
          pc::load_frags<WM, WN, AT::LD, BT::LD>(a[nb], b[nb], As, As + AT::ELEMS, 0, warp_m0, warp_n0, lane);
        }
      }
      pc::mma_step<WM, WN>(acc, a[s & 1], b[s & 1]);
    }
  }
}
#endif  // PIPECHECK_XTILE
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gemm_k3_cp_async(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K, int lda, int ldb, int ldc) {
  extern __shared__ __align__(16) __half smem[];  // (STAGES, STAGE_ELEMS)

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const int block_m0 = blockIdx.y * BM;
  const int block_n0 = blockIdx.x * BN;
  const int warp_m0 = (warp / WARPS_N) * (WM * 16);
  const int warp_n0 = (warp % WARPS_N) * (WN * 8);
  const int num_k_tiles = (K + KT - 1) / KT;  // stage-sized K tiles
  const Map map(tid);
  const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, block_m0, block_n0);
  const __half* a_src = A + static_cast<long long>(block_m0 + map.a_row) * lda + map.a_col;
  const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + block_n0 + map.b_col;

  float acc[WM][WN][4];
  pc::zero_acc(acc);

#ifdef PIPECHECK_COMPUTE_ONLY
  // Compute-only variant: stage 0 is filled once, then the loop only multiplies.
  issue_tile(smem, 0, 0, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) compute_stage(smem, 0, acc, warp_m0, warp_n0, lane);
#else
  if constexpr (STAGES == 1) {
    for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
      issue_tile(smem, 0, k_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
      __pipeline_commit();
      __pipeline_wait_prior(0);
      __syncthreads();
      compute_stage(smem, 0, acc, warp_m0, warp_n0, lane);
      __syncthreads();
    }
  } else {
#ifdef PIPECHECK_XTILE
    xtile_mainloop(smem, acc, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src,
                   num_k_tiles, warp_m0, warp_n0, lane);
#else
    // prologue: fill STAGES-1 stages
    for (int fill = 0; fill < STAGES - 1; ++fill) {  // pipecheck:prologue_depth
      if (fill < num_k_tiles) {
        issue_tile(smem, fill, fill, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
      }
      __pipeline_commit();
    }
    // main loop (its last STAGES-1 iterations are the drain: nothing left to issue)
    for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
      const int read_stage = k_tile % STAGES;
      __pipeline_wait_prior(STAGES - 2);  // pipecheck:wait
      __syncthreads();                    // pipecheck:sync_after_wait
      const int fetch_tile = k_tile + STAGES - 1;  // pipecheck:fetch_distance
      if (fetch_tile < num_k_tiles) {
        issue_tile(smem, fetch_tile % STAGES, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map,
                   interior, a_src, b_src);
      }
      __pipeline_commit();  // pipecheck:commit
      compute_stage(smem, read_stage, acc, warp_m0, warp_n0, lane);
    }
#endif  // PIPECHECK_XTILE
  }
#endif
  // epilogue: accumulators to C
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
