// gemm_common.cuh -- the parts every rung of the CUDA pipelining ladder shares.
//
// The ladder (k1..k6) differs only in HOW tiles move from global to shared memory; the
// tensor-core math on a staged tile, the ragged-edge gathers and the store of the result are the
// same in every rung and live here, so that timing differences between rungs measure the pipeline
// scheme and nothing else.
//
// Contract shared by every kernel that includes this header:
//   A: M x K fp16, row-major, leading dimension lda (elements)
//   B: K x N fp16, row-major, leading dimension ldb (elements)
//   C: M x N fp32, row-major, leading dimension ldc (elements); C = A @ B (overwritten, no beta)
//   Accumulation is fp32 (mma.sync m16n8k16, f16 x f16 -> f32). Requires sm_80 or newer.
//   Ragged M, N, K of any size >= 1 are handled: a 16-byte chunk that is fully inside the matrix and
//   16-byte aligned moves as one vector; any other chunk is gathered element by element, with zeros
//   outside the matrix, so the tensor-core math never sees garbage.
//   Fast path: a K tile whose block tile lies wholly inside M x N x K, with 16-byte aligned bases and
//   leading dimensions that are multiples of 8 halves (interior_tile below, a block-uniform test), is
//   copied with unconditional 16-byte vectors from per-thread pointers computed once (ChunkMap); only
//   edge tiles take the per-chunk checks above.
//
// Warp tile: 64 x 64 (4 m16 x 8 n8 fragments, 128 fp32 accumulators per thread) in every rung: a
// 128 x 128 block tile with 4 warps (2 x 2) in k1..k5, 128 x 256 with 8 warps (2 x 4) in k3's wide
// build, 256 x 128 with 8 compute warps (4 x 2) in k6. Per k16 step a warp issues 4 + 4 ldmatrix.x4
// for 32 mma: two thirds of the shared-memory bytes per FMA of a 64 x 32 warp tile (6 ldmatrix per
// 16 mma). On sm_90 mma.sync is fed from shared memory at 128 B/clk per SM, and with 64 x 32 warp
// tiles that, not the tensor cores, is the ceiling.
#pragma once

#include <cuda_fp16.h>

namespace pc {

constexpr int kWarp = 32;
constexpr int kChunk = 8;        // halves per 16-byte chunk: the unit of every copy
constexpr int kSkew = 8;         // halves of padding per smem row: keeps ldmatrix rows on distinct
                                 // banks and every row start 16-byte aligned (cp.async needs it)
constexpr int BK = 32;           // K depth of one tile, for every rung

// Row stride (halves) of the padded smem tiles.
template <int BM> struct ATile {  // A tile: (BM, BK) plus skew
  static constexpr int LD = BK + kSkew;
  static constexpr int ELEMS = BM * LD;
};
template <int BN> struct BTile {  // B tile: (BK, BN) plus skew
  static constexpr int LD = BN + kSkew;
  static constexpr int ELEMS = BK * LD;
};

// ---------------------------------------------------------------------------------------------
// Ragged-edge helpers. A chunk is 8 consecutive halves of one row, starting at column c.

// True when the chunk at (r, c) lies fully inside a rows x cols matrix and its source is 16-byte
// aligned, i.e. it may move as one 16-byte vector (LDG.128 or cp.async.cg 16).
__device__ __forceinline__ bool chunk_in_bounds(const __half* base, int rows, int cols, int ld, int r,
                                                int c) {
  const __half* src = base + static_cast<long long>(r) * ld + c;
  return r < rows && c + kChunk <= cols && (reinterpret_cast<unsigned long long>(src) & 15ull) == 0;
}

// The chunk at (r, c), element by element, zero outside the matrix. Slow path for tails and for
// matrices whose rows are not 16-byte aligned. Out of line on purpose: it runs only on edge chunks,
// and inlined into k2's hot loop it pushed the kernel past 128 registers (2 blocks/SM) into a spill.
__device__ __noinline__ uint4 gather_chunk(const __half* base, int rows, int cols, int ld, int r,
                                              int c) {
  union {
    uint4 v;
    __half h[kChunk];
  } out;
  out.v = make_uint4(0u, 0u, 0u, 0u);
  if (r < rows) {
    const __half* row = base + static_cast<long long>(r) * ld;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (c + i < cols) out.h[i] = row[c + i];
    }
  }
  return out.v;
}

// Synchronous load of one chunk into registers (the non-async rungs k1, k2).
__device__ __forceinline__ uint4 load_chunk(const __half* base, int rows, int cols, int ld, int r, int c) {
  if (chunk_in_bounds(base, rows, cols, ld, r, c)) {
    return *reinterpret_cast<const uint4*>(base + static_cast<long long>(r) * ld + c);
  }
  return gather_chunk(base, rows, cols, ld, r, c);
}

// True when the (BM, BN) block tile at (m0, n0) is wholly inside M x N and every 16-byte chunk of A and
// B is aligned (aligned bases, leading dimensions multiple of 8 halves). Block-uniform; a K tile may
// then take the fast path when it is also wholly inside K (k0 + BK <= K).
template <int BM, int BN>
__device__ __forceinline__ bool interior_mn(const __half* A, const __half* B, int M, int N, int lda, int ldb,
                                            int m0, int n0) {
  return m0 + BM <= M && n0 + BN <= N && ((lda | ldb) & (kChunk - 1)) == 0 &&
         ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 15ull) == 0;
}

// Which 16-byte chunks of a (BM, BK) A tile and a (BK, BN) B tile thread t of NT copies: chunk
// t + i * NT for i < A_PER (B_PER). Consecutive threads take consecutive chunks of a row, so each
// warp's copies are coalesced. Offsets are in elements: smem offsets for the padded tiles, global
// offsets relative to the tile origin (add the K offset k0 for A, k0 * ldb for B).
template <int BM, int BN, int NT, int A_LD, int B_LD>
struct ChunkMap {
  static constexpr int A_CPR = BK / kChunk;          // chunks per A tile row
  static constexpr int B_CPR = BN / kChunk;          // chunks per B tile row
  static constexpr int A_PER = BM * BK / kChunk / NT;
  static constexpr int B_PER = BK * BN / kChunk / NT;
  static constexpr int A_ROW_STEP = NT / A_CPR;      // rows between a thread's consecutive A chunks
  static constexpr int B_ROW_STEP = NT / B_CPR;
  static_assert(A_PER * NT * kChunk == BM * BK && B_PER * NT * kChunk == BK * BN, "tile not divisible");
  static_assert(NT % A_CPR == 0 && NT % B_CPR == 0, "threads must cover whole rows");
  int a_row, a_col, b_row, b_col;
  __device__ __forceinline__ explicit ChunkMap(int t)
      : a_row(t / A_CPR), a_col((t % A_CPR) * kChunk), b_row(t / B_CPR), b_col((t % B_CPR) * kChunk) {}
  __device__ __forceinline__ int a_smem(int i) const { return (a_row + i * A_ROW_STEP) * A_LD + a_col; }
  __device__ __forceinline__ int b_smem(int i) const { return (b_row + i * B_ROW_STEP) * B_LD + b_col; }
};

// ---------------------------------------------------------------------------------------------
// Tensor-core primitives (PTX, so the same source compiles under nvcc and NVRTC without <mma.h>).

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lane l supplies the row address of matrix l/8.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A and B fragments of one k16 step of a warp's (16*WM, 8*WN) slice.
template <int WM, int WN, int A_LD, int B_LD>
__device__ __forceinline__ void load_frags(unsigned (&a)[WM][4], unsigned (&b)[WN][2], const __half* As,
                                           const __half* Bs, int kk, int warp_m0, int warp_n0, int lane) {
#pragma unroll
  for (int i = 0; i < WM; ++i) {
    ldmatrix_x4(a[i], As + (warp_m0 + i * 16 + (lane & 15)) * A_LD + kk + (lane >> 4) * 8);
  }
#pragma unroll
  for (int j = 0; j < WN; j += 2) {
    unsigned r[4];
    ldmatrix_x4_trans(r, Bs + (kk + (lane & 15)) * B_LD + warp_n0 + j * 8 + (lane >> 4) * 8);
    b[j][0] = r[0];
    b[j][1] = r[1];
    b[j + 1][0] = r[2];
    b[j + 1][1] = r[3];
  }
}

// The 16 * WM x 8 * WN x 16 product of one k16 step from fragments already in registers.
template <int WM, int WN>
__device__ __forceinline__ void mma_step(float (&acc)[WM][WN][4], const unsigned (&a)[WM][4],
                                         const unsigned (&b)[WN][2]) {
#pragma unroll
  for (int i = 0; i < WM; ++i) {
#pragma unroll
    for (int j = 0; j < WN; ++j) {
      // serpentine over j: consecutive mma share an A or a B fragment (operand reuse cache)
      const int jj = (i & 1) ? WN - 1 - j : j;
      mma_16816(acc[i][jj], a[i], b[jj][0], b[jj][1]);
    }
  }
}

// One warp multiplies its (16*WM, 8*WN) slice of a staged (BM, BK) x (BK, BN) tile pair and
// accumulates into acc. warp_m0 / warp_n0: the warp's first row / column inside the block tile.
// The fragments are double-buffered across the k16 steps: step s+1's ldmatrix are issued before
// step s's mma, so shared-memory latency hides behind tensor-core work even with 2 warps per SMSP.
template <int WM, int WN, int A_LD, int B_LD>
__device__ __forceinline__ void mma_tile(const __half* As,  // (BM, A_LD) one stage of A
                                         const __half* Bs,  // (BK, B_LD) one stage of B
                                         float (&acc)[WM][WN][4], int warp_m0, int warp_n0, int lane) {
  static_assert(WN % 2 == 0, "B fragments are loaded two n8 tiles at a time");
  constexpr int KSTEPS = BK / 16;
  unsigned a[2][WM][4];
  unsigned b[2][WN][2];
  load_frags<WM, WN, A_LD, B_LD>(a[0], b[0], As, Bs, 0, warp_m0, warp_n0, lane);
#pragma unroll
  for (int s = 0; s < KSTEPS; ++s) {
#ifdef PIPECHECK_NO_FRAG_PREFETCH  // benchmark variant: each step's fragments loaded right before its mma
    if (s > 0) load_frags<WM, WN, A_LD, B_LD>(a[s & 1], b[s & 1], As, Bs, s * 16, warp_m0, warp_n0, lane);
#else
    if (s + 1 < KSTEPS) {
      load_frags<WM, WN, A_LD, B_LD>(a[(s + 1) & 1], b[(s + 1) & 1], As, Bs, (s + 1) * 16, warp_m0, warp_n0,
                                     lane);
    }
#endif
    mma_step<WM, WN>(acc, a[s & 1], b[s & 1]);
  }
}

template <int WM, int WN>
__device__ __forceinline__ void zero_acc(float (&acc)[WM][WN][4]) {
#pragma unroll
  for (int i = 0; i < WM; ++i)
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

// Store a warp's accumulators to C (fp32, leading dimension ldc), skipping elements outside M x N.
// Fragment layout of m16n8 f32: lane holds rows lane/4 and lane/4+8, columns 2*(lane%4) and +1.
// A pair inside N goes out as one 8-byte store when C's rows are 8-byte aligned (even ldc, aligned
// base): a warp then writes 8 rows x 32 contiguous bytes per fragment, whole 32-byte sectors.
template <int WM, int WN>
__device__ __forceinline__ void store_acc(float* C, int M, int N, int ldc, const float (&acc)[WM][WN][4],
                                          int row0, int col0, int lane) {
  const int g = lane >> 2;
  const int t2 = (lane & 3) * 2;
  const bool pairs = (ldc & 1) == 0 && (reinterpret_cast<unsigned long long>(C) & 7ull) == 0;
#pragma unroll
  for (int i = 0; i < WM; ++i) {
#pragma unroll
    for (int j = 0; j < WN; ++j) {
#pragma unroll
      for (int half_row = 0; half_row < 2; ++half_row) {
        const int r = row0 + i * 16 + g + half_row * 8;
        const int c = col0 + j * 8 + t2;
        if (r < M) {
          float* dst = C + static_cast<long long>(r) * ldc + c;
          if (pairs && c + 1 < N) {
            *reinterpret_cast<float2*>(dst) = make_float2(acc[i][j][half_row * 2], acc[i][j][half_row * 2 + 1]);
          } else {
            if (c < N) dst[0] = acc[i][j][half_row * 2];
            if (c + 1 < N) dst[1] = acc[i][j][half_row * 2 + 1];
          }
        }
      }
    }
  }
}

}  // namespace pc
