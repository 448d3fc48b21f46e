// k1_sync_tiled.cu -- rung 1 of the ladder: the synchronous baseline.
//
// What it demonstrates: a tiled tensor-core GEMM with NO overlap. Each K tile is loaded from global
// memory into registers, stored to shared memory, then every warp waits at a barrier, multiplies,
// and waits again before the buffer may be overwritten. Per tile the block pays load latency AND
// compute time: every later rung exists to hide the first behind the second.
//
// Pipeline scheme: 1 buffer, 0 tiles in flight.
//   for each K tile: LDG -> STS ; __syncthreads ; mma ; __syncthreads
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32, all
// row-major with unit column stride; M, N, K >= 1 (ragged sizes are fine, see gemm_common.cuh).
// Launch: grid (ceil(N/128), ceil(M/128)), 256 threads, no dynamic shared memory.
// Numbers reached: to be measured on H100/H200 (scripts/gpu/cuda_ladder_bench.py).
#include "gemm_common.cuh"

namespace {
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 256;             // 8 warps, arranged 2 (M) x 4 (N)
constexpr int WARPS_N = 4;
constexpr int WM = 4, WN = 4;            // warp tile 64 x 32 = 4 m16 x 4 n8 fragments
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int A_CHUNKS_PER_ROW = pc::BK / pc::kChunk;   // 4
constexpr int B_CHUNKS_PER_ROW = BN / pc::kChunk;       // 16
constexpr int CHUNKS_PER_THREAD = (BM * pc::BK / pc::kChunk) / THREADS;  // 2 (same for B)
static_assert(BM * pc::BK == pc::BK * BN, "A and B tiles hold the same number of chunks");
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_k1_sync_tiled(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                   int M, int N, int K, int lda, int ldb, int ldc) {
  __shared__ __align__(16) __half As[AT::ELEMS];  // (BM, BK + skew)
  __shared__ __align__(16) __half Bs[BT::ELEMS];  // (BK, BN + skew)

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

  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int k0 = k_tile * pc::BK;
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
      const int chunk = tid + i * THREADS;
      const int ar = chunk / A_CHUNKS_PER_ROW, ac = (chunk % A_CHUNKS_PER_ROW) * pc::kChunk;
      const int br = chunk / B_CHUNKS_PER_ROW, bc = (chunk % B_CHUNKS_PER_ROW) * pc::kChunk;
      *reinterpret_cast<uint4*>(&As[ar * AT::LD + ac]) =
          pc::load_chunk(A, M, K, lda, block_m0 + ar, k0 + ac);
      *reinterpret_cast<uint4*>(&Bs[br * BT::LD + bc]) =
          pc::load_chunk(B, K, N, ldb, k0 + br, block_n0 + bc);
    }
    __syncthreads();  // pipecheck:sync_stored -- every chunk of this tile is in smem
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, Bs, acc, warp_m0, warp_n0, lane);
    __syncthreads();  // every warp is done reading before the next tile overwrites the buffer
  }
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
