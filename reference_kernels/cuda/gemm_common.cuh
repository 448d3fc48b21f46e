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

// One warp multiplies its (16*WM, 8*WN) slice of a staged (BM, BK) x (BK, BN) tile pair and
// accumulates into acc. warp_m0 / warp_n0: the warp's first row / column inside the block tile.
template <int WM, int WN, int A_LD, int B_LD>
__device__ __forceinline__ void mma_tile(const __half* As,  // (BM, A_LD) one stage of A
                                         const __half* Bs,  // (BK, B_LD) one stage of B
                                         float (&acc)[WM][WN][4], int warp_m0, int warp_n0, int lane) {
  static_assert(WN % 2 == 0, "B fragments are loaded two n8 tiles at a time");
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    unsigned a[WM][4];
#pragma unroll
    for (int i = 0; i < WM; ++i) {
      ldmatrix_x4(a[i], As + (warp_m0 + i * 16 + (lane & 15)) * A_LD + kk + (lane >> 4) * 8);
    }
    unsigned b[WN][2];
#pragma unroll
    for (int j = 0; j < WN; j += 2) {
      unsigned r[4];
      ldmatrix_x4_trans(r, Bs + (kk + (lane & 15)) * B_LD + warp_n0 + j * 8 + (lane >> 4) * 8);
      b[j][0] = r[0];
      b[j][1] = r[1];
      b[j + 1][0] = r[2];
      b[j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < WM; ++i) {
#pragma unroll
      for (int j = 0; j < WN; ++j) mma_16816(acc[i][j], a[i], b[j][0], b[j][1]);
    }
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
template <int WM, int WN>
__device__ __forceinline__ void store_acc(float* C, int M, int N, int ldc, const float (&acc)[WM][WN][4],
                                          int row0, int col0, int lane) {
  const int g = lane >> 2;
  const int t2 = (lane & 3) * 2;
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
          if (c < N) dst[0] = acc[i][j][half_row * 2];
          if (c + 1 < N) dst[1] = acc[i][j][half_row * 2 + 1];
        }
      }
    }
  }
}

}  // namespace pc
