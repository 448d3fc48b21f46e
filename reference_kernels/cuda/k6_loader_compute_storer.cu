// k6_loader_compute_storer.cu -- rung 6: three roles, persistent: loader, compute, storer warps.
//
// What it demonstrates: overlapping the epilogue too. A persistent block walks over output tiles;
// a loader warp streams K tiles through a partitioned cuda::pipeline without pausing at tile
// boundaries, four compute warps (64 x 32 each) multiply and then hand their accumulators to a shared-memory
// staging tile, and a storer warp writes that tile to global memory while the compute warps are
// already on the next output tile. The compute -> storer hand-off uses two named barriers:
//   C_FULL  : compute warps bar.arrive after staging; the storer bar.sync's before reading
//   C_EMPTY : the storer bar.arrive's after reading; compute warps bar.sync before staging again
// (bar.arrive orders the arriving thread's prior shared-memory accesses before the waiter's.)
//
// Pipeline scheme: STAGES operand buffers (loader up to STAGES K tiles ahead, across output tiles) +
// one C staging buffer (storer one output tile behind the compute warps).
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32,
// row-major, unit column stride; M, N, K >= 1. Tile 128 x 64 (smaller than k1..k5 so that the operand
// ring plus the fp32 staging tile fit in 101 KB, i.e. on sm_86/sm_89 too).
// Launch: grid min(#tiles, 2 * #SMs) (any grid size is correct), 192 threads (1 loader + 4 compute +
// 1 storer warp), dynamic smem STAGES * 14848 + 34816 bytes (79360 for the default STAGES=3).
// Numbers reached (2026-11-22, benchmarks/results/2026-11-22-h200/cuda_ladder_bench-run2.md): 209 TFLOP/s
// at 4096^3 on an H200 (28% of torch.matmul's 742): slower than the synchronous k1 (218), an open problem.
#include <cuda/pipeline>

#include "gemm_common.cuh"

#ifndef PIPECHECK_STAGES
#define PIPECHECK_STAGES 3
#endif

namespace {
constexpr int STAGES = PIPECHECK_STAGES;
static_assert(STAGES >= 2 && STAGES <= 4, "PIPECHECK_STAGES must be 2..4");
constexpr int BM = 128, BN = 64;
constexpr int LOADER_WARP = 0;
constexpr int COMPUTE_WARPS = 4;         // 2 (M) x 2 (N)
constexpr int STORER_WARP = 1 + COMPUTE_WARPS;
constexpr int PIPE_THREADS = (1 + COMPUTE_WARPS) * pc::kWarp;     // 160: loader + compute
constexpr int HANDOFF_THREADS = (COMPUTE_WARPS + 1) * pc::kWarp;  // 160: compute + storer
constexpr int THREADS = (2 + COMPUTE_WARPS) * pc::kWarp;          // 192
constexpr int WARPS_N = 2;
constexpr int WM = 4, WN = 4;            // compute warp tile 64 x 32
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int STAGE_ELEMS = AT::ELEMS + BT::ELEMS;  // 7424 halves = 14848 B
constexpr int C_LD = BN + 4;             // floats; +4 keeps the 8-byte fragment stores conflict-free
using Map = pc::ChunkMap<BM, BN, pc::kWarp, AT::LD, BT::LD>;  // the loader warp: 16 A + 8 B chunks per lane
// Named barrier ids (0 is __syncthreads).
constexpr int BAR_PIPE_INIT = 1, BAR_C_FULL = 2, BAR_C_EMPTY = 3;
using Pipe = cuda::pipeline<cuda::thread_scope_block>;

__device__ __forceinline__ void bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// The loader and compute warps as a group for cuda::make_pipeline; the storer is not a member, so the
// pipeline's per-stage barriers never wait for it.
struct PipeGroup {
  __device__ unsigned long long size() const { return PIPE_THREADS; }
  __device__ unsigned long long thread_rank() const { return threadIdx.x; }
  __device__ void sync() const { bar_sync(BAR_PIPE_INIT, PIPE_THREADS); }
};

__device__ __forceinline__ void copy_chunk(Pipe& pipe, __half* dst, const __half* base, int rows, int cols,
                                           int ld, int r, int c) {
  if (pc::chunk_in_bounds(base, rows, cols, ld, r, c)) {
    cuda::memcpy_async(dst, base + static_cast<long long>(r) * ld + c, cuda::aligned_size_t<16>(16), pipe);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_k6_loader_compute_storer(const __half* __restrict__ A, const __half* __restrict__ B,
                              float* __restrict__ C, int M, int N, int K, int lda, int ldb, int ldc) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* ring = reinterpret_cast<__half*>(smem_raw);                          // (STAGES, STAGE_ELEMS)
  float* c_stage = reinterpret_cast<float*>(smem_raw + STAGES * STAGE_ELEMS * 2);  // (BM, C_LD)
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> pipe_state;

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int num_tiles = tiles_m * tiles_n;
  const int num_k_tiles = (K + pc::BK - 1) / pc::BK;

  if (warp == STORER_WARP) {
    const bool vec4 = (ldc & 3) == 0 && (reinterpret_cast<unsigned long long>(C) & 15ull) == 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const int row0 = (tile / tiles_n) * BM, col0 = (tile % tiles_n) * BN;
      bar_sync(BAR_C_FULL, HANDOFF_THREADS);
      if (vec4 && row0 + BM <= M && col0 + BN <= N) {
        // interior tile: 16-byte stores, two rows of 64 floats per warp instruction (512 B, coalesced)
        const int half = lane >> 4, c = (lane & 15) * 4;
#pragma unroll 4
        for (int r = half; r < BM; r += 2) {
          *reinterpret_cast<float4*>(C + static_cast<long long>(row0 + r) * ldc + col0 + c) =
              *reinterpret_cast<const float4*>(&c_stage[r * C_LD + c]);
        }
      } else {
        for (int r = 0; r < BM && row0 + r < M; ++r) {
          const float2 v = *reinterpret_cast<const float2*>(&c_stage[r * C_LD + lane * 2]);
          float* dst = C + static_cast<long long>(row0 + r) * ldc + col0 + lane * 2;
          if (col0 + lane * 2 < N) dst[0] = v.x;
          if (col0 + lane * 2 + 1 < N) dst[1] = v.y;
        }
      }
      if (tile + static_cast<int>(gridDim.x) < num_tiles) bar_arrive(BAR_C_EMPTY, HANDOFF_THREADS);
    }
    return;
  }

  // 32 loader threads arrive on "produced", 128 compute threads on "consumed"
  Pipe pipe = cuda::make_pipeline(PipeGroup{}, &pipe_state, static_cast<size_t>(pc::kWarp));

  if (warp == LOADER_WARP) {
    const Map map(lane);
    int step = 0;  // K tiles issued so far by this block, over all its output tiles: the ring position
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const int row0 = (tile / tiles_n) * BM, col0 = (tile % tiles_n) * BN;
      const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, row0, col0);
      const __half* a_src = A + static_cast<long long>(row0 + map.a_row) * lda + map.a_col;
      const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + col0 + map.b_col;
      for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile, ++step) {
        pipe.producer_acquire();
        __half* As = ring + (step % STAGES) * STAGE_ELEMS;  // (BM, BK + skew)
        __half* Bs = As + AT::ELEMS;                        // (BK, BN + skew)
        const int k0 = k_tile * pc::BK;
        if (interior && k0 + pc::BK <= K) {  // warp-uniform fast path: whole, aligned chunks
#pragma unroll
          for (int i = 0; i < Map::A_PER; ++i) {
            cuda::memcpy_async(&As[map.a_smem(i)], a_src + k0 + static_cast<long long>(i * Map::A_ROW_STEP) * lda,
                               cuda::aligned_size_t<16>(16), pipe);
          }
#pragma unroll
          for (int i = 0; i < Map::B_PER; ++i) {
            cuda::memcpy_async(&Bs[map.b_smem(i)], b_src + static_cast<long long>(k0 + i * Map::B_ROW_STEP) * ldb,
                               cuda::aligned_size_t<16>(16), pipe);
          }
        } else {
          for (int i = 0; i < Map::A_PER; ++i) {
            copy_chunk(pipe, &As[map.a_smem(i)], A, M, K, lda, row0 + map.a_row + i * Map::A_ROW_STEP,
                       k0 + map.a_col);
          }
          for (int i = 0; i < Map::B_PER; ++i) {
            copy_chunk(pipe, &Bs[map.b_smem(i)], B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP,
                       col0 + map.b_col);
          }
        }
        pipe.producer_commit();
      }
    }
    return;
  }

  // compute warps
  const int compute_warp = warp - 1;
  const int warp_m0 = (compute_warp / WARPS_N) * (WM * 16);
  const int warp_n0 = (compute_warp % WARPS_N) * (WN * 8);
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  int step = 0;
  bool first_tile = true;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    float acc[WM][WN][4];
    pc::zero_acc(acc);
    for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile, ++step) {
      pipe.consumer_wait();
      const __half* As = ring + (step % STAGES) * STAGE_ELEMS;
      pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
      pipe.consumer_release();
    }
    if (!first_tile) bar_sync(BAR_C_EMPTY, HANDOFF_THREADS);  // the storer has read the previous tile
    first_tile = false;
#pragma unroll
    for (int i = 0; i < WM; ++i) {
#pragma unroll
      for (int j = 0; j < WN; ++j) {
#pragma unroll
        for (int half_row = 0; half_row < 2; ++half_row) {
          const int r = warp_m0 + i * 16 + g + half_row * 8;
          const int c = warp_n0 + j * 8 + t2;
          *reinterpret_cast<float2*>(&c_stage[r * C_LD + c]) =
              make_float2(acc[i][j][half_row * 2], acc[i][j][half_row * 2 + 1]);
        }
      }
    }
    bar_arrive(BAR_C_FULL, HANDOFF_THREADS);
  }
}
