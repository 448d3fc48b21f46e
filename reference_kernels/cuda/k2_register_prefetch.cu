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
// Launch: grid (ceil(N/128), ceil(M/128)), 256 threads, no dynamic shared memory (37888 B static).
// Numbers reached: to be measured on H100/H200 (scripts/gpu/cuda_ladder_bench.py).
#include "gemm_common.cuh"

namespace {
constexpr int BM = 128, BN = 128;
constexpr int THREADS = 256;             // 8 warps, 2 (M) x 4 (N)
constexpr int WARPS_N = 4;
constexpr int WM = 4, WN = 4;            // warp tile 64 x 32
constexpr int BUFFERS = 2;
using AT = pc::ATile<BM>;
using BT = pc::BTile<BN>;
constexpr int A_CHUNKS_PER_ROW = pc::BK / pc::kChunk;
constexpr int B_CHUNKS_PER_ROW = BN / pc::kChunk;
constexpr int CHUNKS_PER_THREAD = (BM * pc::BK / pc::kChunk) / THREADS;  // 2

struct Staged {  // one thread's share of a tile, held in registers between LDG and STS
  uint4 a[CHUNKS_PER_THREAD];
  uint4 b[CHUNKS_PER_THREAD];
};

__device__ __forceinline__ void load_regs(Staged& s, const __half* A, const __half* B, int M, int N, int K,
                                          int lda, int ldb, int block_m0, int block_n0, int k0, int tid) {
#pragma unroll
  for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
    const int chunk = tid + i * THREADS;
    s.a[i] = pc::load_chunk(A, M, K, lda, block_m0 + chunk / A_CHUNKS_PER_ROW,
                            k0 + (chunk % A_CHUNKS_PER_ROW) * pc::kChunk);
    s.b[i] = pc::load_chunk(B, K, N, ldb, k0 + chunk / B_CHUNKS_PER_ROW,
                            block_n0 + (chunk % B_CHUNKS_PER_ROW) * pc::kChunk);
  }
}

__device__ __forceinline__ void store_smem(const Staged& s, __half* As, __half* Bs, int tid) {
#pragma unroll
  for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
    const int chunk = tid + i * THREADS;
    *reinterpret_cast<uint4*>(&As[(chunk / A_CHUNKS_PER_ROW) * AT::LD + (chunk % A_CHUNKS_PER_ROW) * pc::kChunk]) = s.a[i];
    *reinterpret_cast<uint4*>(&Bs[(chunk / B_CHUNKS_PER_ROW) * BT::LD + (chunk % B_CHUNKS_PER_ROW) * pc::kChunk]) = s.b[i];
  }
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

  float acc[WM][WN][4];
  pc::zero_acc(acc);
  Staged next;

  // prologue: tile 0 into buffer 0
  load_regs(next, A, B, M, N, K, lda, ldb, block_m0, block_n0, 0, tid);
  store_smem(next, As[0], Bs[0], tid);
  __syncthreads();

  // main loop: every tile that has a successor
  for (int k_tile = 0; k_tile < num_k_tiles - 1; ++k_tile) {
    const int read_buf = k_tile & 1;
    const int write_buf = (k_tile + 1) & 1;
    load_regs(next, A, B, M, N, K, lda, ldb, block_m0, block_n0, (k_tile + 1) * pc::BK, tid);  // in flight...
    pc::mma_tile<WM, WN, AT::LD, BT::LD>(As[read_buf], Bs[read_buf], acc, warp_m0, warp_n0, lane);  // ...during this
    store_smem(next, As[write_buf], Bs[write_buf], tid);
    __syncthreads();  // tile k+1 is stored, and nobody still reads buffer write_buf's old contents
  }

  // epilogue: the last tile, which the loop above staged but did not multiply
  const int last_buf = (num_k_tiles - 1) & 1;  // pipecheck:epilogue_buffer
  pc::mma_tile<WM, WN, AT::LD, BT::LD>(As[last_buf], Bs[last_buf], acc, warp_m0, warp_n0, lane);  // pipecheck:epilogue

  pc::store_acc(C, M, N, ldc, acc, block_m0 + warp_m0, block_n0 + warp_n0, lane);
}
