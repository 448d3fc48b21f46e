// k4_cuda_pipeline_block.cu -- rung 4: block-scoped cuda::pipeline with cuda::memcpy_async.
//
// What it demonstrates: the same multi-stage ring as k3, but the bookkeeping (which stage is free,
// which has landed, phase parity) lives in a cuda::pipeline whose shared state holds one
// "produced" and one "consumed" barrier per stage. Every thread is both producer and consumer:
// producer_acquire waits until all threads released the stage, consumer_wait until every thread's
// copies into it have completed -- so no __syncthreads appears in the main loop.
//
// Pipeline scheme: STAGES buffers, up to STAGES tiles in flight.
//   prologue : acquire / issue / commit tiles 0 .. min(STAGES, n)-1
//   main loop: k = 0 .. n-1 : consumer_wait ; mma stage k % STAGES ; consumer_release ;
//                             acquire / issue / commit tile k+STAGES (if any) into the stage just released
//   epilogue : accumulators to C
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32,
// row-major, unit column stride; M, N, K >= 1. Tail chunks are gathered with plain shared-memory
// stores between producer_acquire and producer_commit; commit's barrier arrive releases them.
// Launch: grid (ceil(N/128), ceil(M/128)), 128 threads (4 warps of 64 x 64), dynamic smem
// STAGES * 18944 bytes (56832 for the default STAGES=3: two blocks per SM on sm_80 and sm_90, one on
// sm_86/sm_89).
// Numbers reached (docs/validation/2026-11-22-h200-0223/cuda_ladder_bench.md): 316 TFLOP/s
// at 4096^3 on an H200 (43% of torch.matmul's 742).
#include <cooperative_groups.h>
#include <cuda/pipeline>

#include "gemm_common.cuh"

#ifndef PIPECHECK_STAGES
#define PIPECHECK_STAGES 3
#endif

namespace {
constexpr int STAGES = PIPECHECK_STAGES;
static_assert(STAGES >= 2 && STAGES <= 4, "PIPECHECK_STAGES must be 2..4");
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 128;             // 4 warps, 2 (M) x 2 (N), each producer and consumer
constexpr int WARPS_N = 2;
constexpr int WM = 4, WN = 8;            // warp tile 64 x 64
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int STAGE_ELEMS = AT::ELEMS + BT::ELEMS;
using Map = pc::ChunkMap<BM, BN, THREADS, AT::LD, BT::LD>;  // 4 A + 4 B chunks per thread
using Pipe = cuda::pipeline<cuda::thread_scope_block>;

__device__ __forceinline__ void copy_chunk(Pipe& pipe, __half* dst, const __half* base, int rows, int cols,
                                           int ld, int r, int c) {
  if (pc::chunk_in_bounds(base, rows, cols, ld, r, c)) {
    cuda::memcpy_async(dst, base + static_cast<long long>(r) * ld + c, cuda::aligned_size_t<16>(16), pipe);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}

// a_src / b_src: this thread's first A / B chunk of K tile 0 (dereferenced only when interior is true).
__device__ __forceinline__ void produce(Pipe& pipe, __half* smem, int k_tile, const __half* A, const __half* B,
                                        int M, int N, int K, int lda, int ldb, int block_m0, int block_n0,
                                        const Map& map, bool interior, const __half* a_src, const __half* b_src) {
  pipe.producer_acquire();
  __half* As = smem + (k_tile % STAGES) * STAGE_ELEMS;  // (BM, BK + skew)
  __half* Bs = As + AT::ELEMS;                          // (BK, BN + skew)
  const int k0 = k_tile * pc::BK;
  if (interior && k0 + pc::BK <= K) {  // block-uniform fast path: whole, aligned chunks
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
#pragma unroll
    for (int i = 0; i < Map::A_PER; ++i) {
      copy_chunk(pipe, &As[map.a_smem(i)], A, M, K, lda, block_m0 + map.a_row + i * Map::A_ROW_STEP,
                 k0 + map.a_col);
    }
#pragma unroll
    for (int i = 0; i < Map::B_PER; ++i) {
      copy_chunk(pipe, &Bs[map.b_smem(i)], B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP,
                 block_n0 + map.b_col);
    }
  }
  pipe.producer_commit();
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_k4_cuda_pipeline(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                      int M, int N, int K, int lda, int ldb, int ldc) {
  extern __shared__ __align__(16) __half smem[];  // (STAGES, STAGE_ELEMS)
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> pipe_state;

  auto block = cooperative_groups::this_thread_block();
  Pipe pipe = cuda::make_pipeline(block, &pipe_state);

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const int block_m0 = blockIdx.y * BM;
  const int block_n0 = blockIdx.x * BN;
  const int warp_m0 = (warp / WARPS_N) * (WM * 16);
  const int warp_n0 = (warp % WARPS_N) * (WN * 8);
  const int num_k_tiles = (K + pc::BK - 1) / pc::BK;
  const Map map(tid);
  const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, block_m0, block_n0);
  const __half* a_src = A + static_cast<long long>(block_m0 + map.a_row) * lda + map.a_col;
  const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + block_n0 + map.b_col;

  float acc[WM][WN][4];
  pc::zero_acc(acc);

  // prologue: every stage gets a tile
  for (int fill = 0; fill < STAGES && fill < num_k_tiles; ++fill) {
    produce(pipe, smem, fill, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
  }
  // main loop: consume the oldest stage, then refill it with the tile STAGES ahead
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int read_stage = k_tile % STAGES;
    pipe.consumer_wait();  // pipecheck:consumer_wait
    const __half* As = smem + read_stage * STAGE_ELEMS;
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
    pipe.consumer_release();
    const int fetch_tile = k_tile + STAGES;
    if (fetch_tile < num_k_tiles) {
      produce(pipe, smem, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, map, interior, a_src, b_src);
    }
  }
  // epilogue
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
