// k5_warp_specialized.cu -- rung 5: warp specialization with a partitioned cuda::pipeline.
//
// What it demonstrates: roles instead of phases. One producer warp does nothing but move tiles
// (acquire a free stage, issue cuda::memcpy_async, commit); four consumer warps (64 x 64 each) do nothing but
// wait for a full stage, multiply, and release it. Producer and consumers meet only at the
// per-stage barriers inside the pipeline's shared state, so the producer runs up to STAGES tiles
// ahead and no block-wide barrier appears anywhere in the loop.
//
// Pipeline scheme: STAGES buffers, producer up to STAGES tiles ahead of the consumers.
//   producer warp (warp 0) : for k: producer_acquire ; issue tile k into stage k % STAGES ; producer_commit
//   consumer warps (1..4)  : for k: consumer_wait ; mma stage k % STAGES ; consumer_release
//   epilogue               : consumers store their accumulators to C
// Both roles run the same trip count (num_k_tiles): a consumer that skipped consumer_wait would
// release a stage it never waited for and the pair of phase parities would never line up again.
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32,
// row-major, unit column stride; M, N, K >= 1. The producer gathers tail chunks with plain stores
// before producer_commit, whose barrier arrive releases them to the consumers.
// Launch: grid (ceil(N/128), ceil(M/128)), 160 threads (1 producer + 4 consumer warps), dynamic smem
// STAGES * 18944 bytes (56832 for the default STAGES=3); built for 2 blocks/SM on sm_80 and sm_90
// (PIPECHECK_K5_BLOCKS_PER_SM=1 lifts the register cap from 204 to 255 for the benchmark's comparison).
// Numbers reached (docs/validation/2026-11-22-h200-0223/cuda_ladder_bench.md): 290 TFLOP/s
// at 4096^3 on an H200 (39% of torch.matmul's 742).
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
constexpr int PRODUCER_WARPS = 1;
constexpr int CONSUMER_WARPS = 4;        // 2 (M) x 2 (N)
constexpr int THREADS = (PRODUCER_WARPS + CONSUMER_WARPS) * pc::kWarp;  // 160
constexpr int WARPS_N = 2;
constexpr int WM = 4, WN = 8;            // consumer warp tile 64 x 64
#ifndef PIPECHECK_K5_BLOCKS_PER_SM
#define PIPECHECK_K5_BLOCKS_PER_SM 2     // launch-bounds occupancy target (register cap 204 at 2)
#endif
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int STAGE_ELEMS = AT::ELEMS + BT::ELEMS;
using Map = pc::ChunkMap<BM, BN, pc::kWarp, AT::LD, BT::LD>;  // the producer warp: 16 A + 16 B chunks per lane
using Pipe = cuda::pipeline<cuda::thread_scope_block>;

__device__ __forceinline__ void copy_chunk(Pipe& pipe, __half* dst, const __half* base, int rows, int cols,
                                           int ld, int r, int c) {
  if (pc::chunk_in_bounds(base, rows, cols, ld, r, c)) {
    cuda::memcpy_async(dst, base + static_cast<long long>(r) * ld + c, cuda::aligned_size_t<16>(16), pipe);
  } else {
    *reinterpret_cast<uint4*>(dst) = pc::gather_chunk(base, rows, cols, ld, r, c);
  }
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, PIPECHECK_K5_BLOCKS_PER_SM)
gemm_k5_warp_specialized(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                         int M, int N, int K, int lda, int ldb, int ldc) {
  extern __shared__ __align__(16) __half smem[];  // (STAGES, STAGE_ELEMS)
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> pipe_state;

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const bool is_producer = warp < PRODUCER_WARPS;
  auto block = cooperative_groups::this_thread_block();
  // partitioned: PRODUCER_WARPS*32 threads will arrive on each stage's "produced" barrier and the rest on
  // "consumed"; which threads play which role is this kernel's choice (warp 0 produces)
  Pipe pipe = cuda::make_pipeline(block, &pipe_state, static_cast<size_t>(PRODUCER_WARPS * pc::kWarp));

  const int block_m0 = blockIdx.y * BM;
  const int block_n0 = blockIdx.x * BN;
  const int num_k_tiles = (K + pc::BK - 1) / pc::BK;

  if (is_producer) {
    const Map map(lane);
    const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, block_m0, block_n0);
    const __half* a_src = A + static_cast<long long>(block_m0 + map.a_row) * lda + map.a_col;
    const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + block_n0 + map.b_col;
    for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
      pipe.producer_acquire();  // pipecheck:producer_acquire
      __half* As = smem + (k_tile % STAGES) * STAGE_ELEMS;  // (BM, BK + skew)
      __half* Bs = As + AT::ELEMS;                          // (BK, BN + skew)
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
          copy_chunk(pipe, &As[map.a_smem(i)], A, M, K, lda, block_m0 + map.a_row + i * Map::A_ROW_STEP,
                     k0 + map.a_col);
        }
        for (int i = 0; i < Map::B_PER; ++i) {
          copy_chunk(pipe, &Bs[map.b_smem(i)], B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP,
                     block_n0 + map.b_col);
        }
      }
      pipe.producer_commit();
    }
    return;
  }

  const int consumer_warp = warp - PRODUCER_WARPS;
  const int warp_m0 = (consumer_warp / WARPS_N) * (WM * 16);
  const int warp_n0 = (consumer_warp % WARPS_N) * (WN * 8);
  float acc[WM][WN][4];
  pc::zero_acc(acc);
  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int read_stage = k_tile % STAGES;
    pipe.consumer_wait();  // pipecheck:consumer_wait
    const __half* As = smem + read_stage * STAGE_ELEMS;
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, As + AT::ELEMS, acc, warp_m0, warp_n0, lane);
    pipe.consumer_release();  // pipecheck:consumer_release
  }
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
