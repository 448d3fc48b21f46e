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
// Launch: grid (ceil(N/128), ceil(M/128)), 128 threads (4 warps of 64 x 64), no dynamic shared memory.
// Numbers reached (docs/validation/2026-11-22-h200-0223/cuda_ladder_bench.md): 218 TFLOP/s
// at 4096^3 fp16 -> fp32 on an H200 (29% of torch.matmul's 742 in the same run).
#include "gemm_common.cuh"

namespace {
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 128;             // 4 warps, arranged 2 (M) x 2 (N)
constexpr int WARPS_N = 2;
constexpr int WM = 4, WN = 8;            // warp tile 64 x 64 = 4 m16 x 8 n8 fragments
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
using Map = pc::ChunkMap<BM, BN, THREADS, AT::LD, BT::LD>;  // 4 A + 4 B chunks per thread
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
  const Map map(tid);
  const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, block_m0, block_n0);
  const __half* a_src = A + static_cast<long long>(block_m0 + map.a_row) * lda + map.a_col;
  const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + block_n0 + map.b_col;

  float acc[WM][WN][4];
  pc::zero_acc(acc);

  for (int k_tile = 0; k_tile < num_k_tiles; ++k_tile) {
    const int k0 = k_tile * pc::BK;
    uint4 a[Map::A_PER], b[Map::B_PER];  // all of this thread's loads in flight before the first store
    if (interior && k0 + pc::BK <= K) {  // block-uniform fast path: whole, aligned chunks
#pragma unroll
      for (int i = 0; i < Map::A_PER; ++i) {
        a[i] = *reinterpret_cast<const uint4*>(a_src + k0 + static_cast<long long>(i * Map::A_ROW_STEP) * lda);
      }
#pragma unroll
      for (int i = 0; i < Map::B_PER; ++i) {
        b[i] = *reinterpret_cast<const uint4*>(b_src + static_cast<long long>(k0 + i * Map::B_ROW_STEP) * ldb);
      }
    } else {
#pragma unroll
      for (int i = 0; i < Map::A_PER; ++i) {
        a[i] = pc::load_chunk(A, M, K, lda, block_m0 + map.a_row + i * Map::A_ROW_STEP, k0 + map.a_col);
      }
#pragma unroll
      for (int i = 0; i < Map::B_PER; ++i) {
        b[i] = pc::load_chunk(B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP, block_n0 + map.b_col);
      }
    }
#pragma unroll
    for (int i = 0; i < Map::A_PER; ++i) *reinterpret_cast<uint4*>(&As[map.a_smem(i)]) = a[i];
#pragma unroll
    for (int i = 0; i < Map::B_PER; ++i) *reinterpret_cast<uint4*>(&Bs[map.b_smem(i)]) = b[i];
    __syncthreads();  // pipecheck:sync_stored -- every chunk of this tile is in smem
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As, Bs, acc, warp_m0, warp_n0, lane);
    __syncthreads();  // every warp is done reading before the next tile overwrites the buffer
  }
  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
