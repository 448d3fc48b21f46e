// Kernels whose ptxas -v reports the recorded logs in this directory (see README.md here).
#include <cuda_pipeline.h>

// static shared memory and one barrier
extern "C" __global__ void stage_copy(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float buf[2][1024];  // (STAGES, THREADS): 8 KB
    buf[0][threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = buf[0][threadIdx.x ^ 1] + buf[1][threadIdx.x];
}

// cp.async double buffer into dynamic shared memory
template <int STAGES>
__global__ void pipelined(const float* __restrict__ x, float* __restrict__ y, int tiles) {
    extern __shared__ float smem[];
    float acc = 0.f;
    for (int t = 0; t < tiles; ++t) {
        __pipeline_memcpy_async(&smem[(t % STAGES) * blockDim.x + threadIdx.x], &x[t * blockDim.x + threadIdx.x], 4);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        acc += smem[(t % STAGES) * blockDim.x + (threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    y[threadIdx.x] = acc;
}
template __global__ void pipelined<3>(const float*, float*, int);

namespace spill {
// __launch_bounds__ caps registers at 32, far below the live state: ptxas spills
__global__ void __launch_bounds__(1024, 2) heavy(const float* __restrict__ x, float* __restrict__ y, int n) {
    float v[48];
#pragma unroll
    for (int i = 0; i < 48; ++i) v[i] = x[i * n + threadIdx.x];
    float s = 0.f;
    for (int k = 0; k < n; ++k) {
#pragma unroll
        for (int i = 0; i < 48; ++i) s += v[i] * v[(i + k) % 48];
    }
    y[threadIdx.x] = s;
}
}  // namespace spill
