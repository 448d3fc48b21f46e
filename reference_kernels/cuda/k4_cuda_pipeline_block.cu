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
// Launch: grid (ceil(N/128), ceil(M/128)), 256 threads, dynamic smem STAGES * 18944 bytes (56832 for
// the default STAGES=3: two blocks per SM on sm_80 and sm_90, one on sm_86/sm_89).
// Numbers reached: to be measured on H100/H200 (scripts/gpu/cuda_ladder_bench.py).
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
constexpr int THREADS = 256;             // 8 warps, 2 (M) x 4 (N), each producer and consumer
constexpr int WARPS_N = 4;
constexpr int WM = 4, WN = 4;            // warp tile 64 x 32
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int STAGE_ELEMS = AT::ELEMS + BT::ELEMS;
constexpr int A_CHUNKS_PER_ROW = pc::BK / pc::kChunk;
constexpr int B_CHUNKS_PER_ROW = BN / pc::kChunk;
constexpr int CHUNKS_PER_THREAD = (BM * pc::BK / pc::kChunk) / THREADS;  // 2
using Pipe = cuda::pipeline<cuda::thread_scope_block>;

__device__ __forceinline__ void copy_chunk(Pipe& pipe, __half* dst, const __half* base, int rows, int cols,
                                           int ld, int r, int c) {
  if (pc::chunk_in_bounds(base, rows, cols, ld, r, c)) {
    cuda::memcpy_async(dst, base + static_cast<long long>(r) * ld + c, cuda::aligned_size_t<16>(16), pipe);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}

__device__ __forceinline__ void produce(Pipe& pipe, __half* smem, int k_tile, const __half* A, const __half* B,
                                        int M, int N, int K, int lda, int ldb, int block_m0, int block_n0,
                                        int tid) {
  pipe.producer_acquire();
  __half* As = smem + (k_tile % STAGES) * STAGE_ELEMS;  // (BM, BK + skew)
  __half* Bs = As + AT::ELEMS;                          // (BK, BN + skew)
  const int k0 = k_tile * pc::BK;
#pragma unroll
  for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
    const int chunk = tid + i * THREADS;
    const int ar = chunk / A_CHUNKS_PER_ROW, ac = (chunk % A_CHUNKS_PER_ROW) * pc::kChunk;
    const int br = chunk / B_CHUNKS_PER_ROW, bc = (chunk % B_CHUNKS_PER_ROW) * pc::kChunk;
    copy_chunk(pipe, &As[ar * AT::LD + ac], A, M, K, lda, block_m0 + ar, k0 + ac);
    copy_chunk(pipe, &Bs[br * BT::LD + bc], B, K, N, ldb, k0 + br, block_n0 + bc);
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

  float acc[WM][WN][4];
  pc::zero_acc(acc);

  // prologue: every stage gets a tile
  for (int fill = 0; fill < STAGES && fill < num_k_tiles; ++fill) {
    produce(pipe, smem, fill, A, B, M, N, K, lda, ldb, block_m0, block_n0, tid);
  }
  // main loop: consume the oldest stage, then refill it with the tile STAGES ahead
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int read_stage = k_tile % STAGES;
    pipe.consumer_wait();
    const __half* As = smem + read_stage * STAGE_ELEMS;
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
    pipe.consumer_release();
    const int fetch_tile = k_tile + STAGES;
    if (fetch_tile < num_k_tiles) produce(pipe, smem, fetch_tile, A, B, M, N, K, lda, ldb, block_m0, block_n0, tid);
  }
  // epilogue
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
