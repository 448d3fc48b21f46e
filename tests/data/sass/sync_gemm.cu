// Synchronous shared-memory tiled GEMM (fp32, FFMA): the "no pipeline" baseline for the SASS
// inspector. Each K tile is loaded with plain global loads, stored to shared memory, and a
// __syncthreads separates the load from the compute: no async copies, no overlap.
// Preconditions: M, N, K multiples of TILE; blockDim = (TILE, TILE).
#define TILE 16

extern "C" __global__ void sync_gemm(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = A[row * K + k0 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * N + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
