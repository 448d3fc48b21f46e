// k2_register_prefetch.cu -- rung 2: LDG-to-register prefetch with double-buffered shared memory.
//
// What it demonstrates: the oldest way to overlap loads with math, no async-copy hardware needed.
// While the warps multiply tile k (from shared buffer k & 1), the loads of tile k+1 are already in
// flight into registers; after the math they are stored into the OTHER buffer, so one barrier per
// tile suffices. The last tile has no successor to prefetch: it is computed in an explicit epilogue,
// from buffer (num_k_tiles - 1) & 1.
//
// Pipeline scheme: 2 smem buffers + 1 register stage; 1 tile in flight.
//   prologue : LDG tile 0 -> STS buf 0 ; __syncthreads
//   main loop: k = 0 .. n-2 : LDG tile k+1 -> regs ; mma buf[k&1] ; STS regs -> buf[(k+1)&1] ; __syncthreads
//   epilogue : mma buf[(n-1)&1]
//
// Preconditions (checked by the launcher): sm_80+; A (M,K) fp16, B (K,N) fp16, C (M,N) fp32,
// row-major, unit column stride; M, N, K >= 1.
// Launch: grid (ceil(N/128), ceil(M/128)), 128 threads (4 warps of 64 x 64), no dynamic shared memory (37888 B static).
// Numbers reached (docs/validation/2026-11-22-h200-0223/cuda_ladder_bench.md): 275 TFLOP/s
// at 4096^3 on an H200 (37% of torch.matmul; k1, the synchronous baseline: 218).
#include "gemm_common.cuh"

namespace {
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 128;             // 4 warps, 2 (M) x 2 (N)
constexpr int WARPS_N = 2;
constexpr int WM = 4, WN = 8;            // warp tile 64 x 64
constexpr int BUFFERS = 2;
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
using Map = pc::ChunkMap<BM, BN, THREADS, AT::LD, BT::LD>;  // 4 A + 4 B chunks per thread

struct Staged {  // one thread's share of a tile, held in registers between LDG and STS
  uint4 a[Map::A_PER];
  uint4 b[Map::B_PER];
};

// a_src / b_src: this thread's first A / B chunk of K tile 0 (dereferenced only when interior is true).
__device__ __forceinline__ void load_regs(Staged& s, const __half* A, const __half* B, int M, int N, int K,
                                          int lda, int ldb, int block_m0, int block_n0, int k0, const Map& map,
                                          bool interior, const __half* a_src, const __half* b_src) {
  if (interior && k0 + pc::BK <= K) {  // block-uniform fast path: whole, aligned chunks
#pragma unroll
    for (int i = 0; i < Map::A_PER; ++i) {
      s.a[i] = *reinterpret_cast<const uint4*>(a_src + k0 + static_cast<long long>(i * Map::A_ROW_STEP) * lda);
    }
#pragma unroll
    for (int i = 0; i < Map::B_PER; ++i) {
      s.b[i] = *reinterpret_cast<const uint4*>(b_src + static_cast<long long>(k0 + i * Map::B_ROW_STEP) * ldb);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < Map::A_PER; ++i) {
    s.a[i] = pc::load_chunk(A, M, K, lda, block_m0 + map.a_row + i * Map::A_ROW_STEP, k0 + map.a_col);
  }
#pragma unroll
  for (int i = 0; i < Map::B_PER; ++i) {
    s.b[i] = pc::load_chunk(B, K, N, ldb, k0 + map.b_row + i * Map::B_ROW_STEP, block_n0 + map.b_col);
  }
}

__device__ __forceinline__ void store_smem(const Staged& s, __half* As, __half* Bs, const Map& map) {
#pragma unroll
  for (int i = 0; i < Map::A_PER; ++i) *reinterpret_cast<uint4*>(&As[map.a_smem(i)]) = s.a[i];
#pragma unroll
  for (int i = 0; i < Map::B_PER; ++i) *reinterpret_cast<uint4*>(&Bs[map.b_smem(i)]) = s.b[i];
}
}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 2)
gemm_k2_register_prefetch(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K, int lda, int ldb, int ldc) {
  __shared__ __align__(16) __half As[BUFFERS][AT::ELEMS];  // (BUFFERS, BM, BK + skew)
  __shared__ __align__(16) __half Bs[BUFFERS][BT::ELEMS];  // (BUFFERS, BK, BN + skew)

  const int tid = threadIdx.x;
  const int lane = tid % pc::kWarp;
  const int warp = tid / pc::kWarp;
  const int block_m0 = blockIdx.y * BM;
  const int block_n0 = blockIdx.x * BN;
  const int warp_m0 = (warp / WARPS_N) * (WM * 16);
  const int warp_n0 = (warp % WARPS_N) * (WN * 8);
  const int num_k_tiles = (K + pc::BK - 1) / pc::BK;  // >= 1: the launcher rejects K < 1
  const Map map(tid);
  const bool interior = pc::interior_mn<BM, BN>(A, B, M, N, lda, ldb, block_m0, block_n0);
  const __half* a_src = A + static_cast<long long>(block_m0 + map.a_row) * lda + map.a_col;
  const __half* b_src = B + static_cast<long long>(map.b_row) * ldb + block_n0 + map.b_col;

  float acc[WM][WN][4];
  pc::zero_acc(acc);
  Staged next;

  // prologue: tile 0 into buffer 0
  load_regs(next, A, B, M, N, K, lda, ldb, block_m0, block_n0, 0, map, interior, a_src, b_src);
  store_smem(next, As[0], Bs[0], map);
  __syncthreads();

  // main loop: every tile that has a successor
  for (int k_tile = 0; k_tile < num_k_tiles - 1; ++k_tile) {
    const int read_buf = k_tile & 1;
    const int write_buf = (k_tile + 1) & 1;
    load_regs(next, A, B, M, N, K, lda, ldb, block_m0, block_n0, (k_tile + 1) * pc::BK, map, interior, a_src,
              b_src);  // in flight...
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As[read_buf], Bs[read_buf], acc, warp_m0, warp_n0, lane);  // ...during this
    store_smem(next, As[write_buf], Bs[write_buf], map);
    __syncthreads();  // tile k+1 is stored, and nobody still reads buffer write_buf's old contents
  }

  // epilogue: the last tile, which the loop above staged but did not multiply
  const int last_buf = (num_k_tiles - 1) & 1;  // pipecheck:epilogue_buffer
  pc::mma_tile<WM, WN, AT::LD, BT::LD>(As[last_buf], Bs[last_buf], acc, warp_m0, warp_n0, lane);  // pipecheck:epilogue

  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
