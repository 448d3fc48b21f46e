// A kernel that spills registers on purpose: 64 accumulators stay live across a loop (every index
// is a compile-time constant, so they are registers, not a local array), while
// __launch_bounds__(1024, 2) caps the kernel at 32 registers per thread. ptxas must spill:
// the SASS gets STL/LDL and `ptxas -v` reports non-zero "bytes spill stores".
#define NACC 64

extern "C" __global__ void __launch_bounds__(1024, 2) spill_kernel(const float* in, float* out, int n) {
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = in[(threadIdx.x + i) % n];
    for (int it = 0; it < n; ++it) {
        float x = in[it];
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = acc[i] * x + acc[(i + 1) % NACC];
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NACC; ++i) s += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
