// Two-stage cp.async GEMM with mma.sync (fp16 in, fp32 accumulate): the pipelined rung for the
// SASS inspector. Tile kt+1 is copied global->shared with cp.async (LDGSTS) and committed
// BEFORE the tensor-core math (HMMA) on tile kt, and the only block barrier is after the wait,
// so in the loop body the next tile's LDGSTS precede this tile's HMMA with no BAR.SYNC between.
// Preconditions: one warp per block computes a 16x8 tile of C; K a multiple of 16;
// A row-major MxK, B column-major KxN (so both operands are K-contiguous).
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#ifndef SWAP_COMMIT_WAIT
#define SWAP_COMMIT_WAIT 0
#endif

#define BM 16
#define BN 8
#define BK 16
#define STAGES 2

__device__ __forceinline__ void load_tile(__half (*As)[BK], __half (*Bs)[BK], const __half* A,
                                          const __half* B, int m0, int n0, int k0, int K) {
    int lane = threadIdx.x;
    // A tile: 16 rows x 16 halves = 32 chunks of 8 bytes... use 16-byte chunks: 16x16x2/16 = 32.
    int r = lane >> 1, c = (lane & 1) * 8;
    __pipeline_memcpy_async(&As[r][c], &A[(m0 + r) * K + k0 + c], 16);
    if (lane < 16) {
        int rb = lane >> 1, cb = (lane & 1) * 8;
        __pipeline_memcpy_async(&Bs[rb][cb], &B[(n0 + rb) * K + k0 + cb], 16);
    }
}

__device__ __forceinline__ void mma_tile(const __half (*As)[BK], const __half (*Bs)[BK], float* acc) {
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    unsigned a0 = *reinterpret_cast<const unsigned*>(&As[g][t * 2]);
    unsigned a1 = *reinterpret_cast<const unsigned*>(&As[g + 8][t * 2]);
    unsigned a2 = *reinterpret_cast<const unsigned*>(&As[g][t * 2 + 8]);
    unsigned a3 = *reinterpret_cast<const unsigned*>(&As[g + 8][t * 2 + 8]);
    unsigned b0 = *reinterpret_cast<const unsigned*>(&Bs[g][t * 2]);
    unsigned b1 = *reinterpret_cast<const unsigned*>(&Bs[g][t * 2 + 8]);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void cpasync_gemm(const __half* A, const __half* B, float* C, int M, int N, int K) {
    __shared__ __align__(16) __half As[STAGES][BM][BK];
    __shared__ __align__(16) __half Bs[STAGES][BN][BK];
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int num_tiles = K / BK;

    load_tile(As[0], Bs[0], A, B, m0, n0, 0, K);  // prologue: stage 0 in flight
    __pipeline_commit();
    for (int kt = 0; kt < num_tiles; ++kt) {
        int stage = kt & 1;
#if SWAP_COMMIT_WAIT
        // Mutant: wait for everything (including what we are about to prefetch) before the
        // math: the prefetch is issued, then drained, then a barrier, then the MMA: no overlap.
        if (kt + 1 < num_tiles) load_tile(As[stage ^ 1], Bs[stage ^ 1], A, B, m0, n0, (kt + 1) * BK, K);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
#else
        __pipeline_wait_prior(0);
        __syncthreads();
        if (kt + 1 < num_tiles) load_tile(As[stage ^ 1], Bs[stage ^ 1], A, B, m0, n0, (kt + 1) * BK, K);
        __pipeline_commit();
#endif
        mma_tile(As[stage], Bs[stage], acc);
        __syncthreads();  // stage is overwritten by the copy issued next iteration
    }
    int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    C[(m0 + g) * N + n0 + t * 2] = acc[0];
    C[(m0 + g) * N + n0 + t * 2 + 1] = acc[1];
    C[(m0 + g + 8) * N + n0 + t * 2] = acc[2];
    C[(m0 + g + 8) * N + n0 + t * 2 + 1] = acc[3];
}
