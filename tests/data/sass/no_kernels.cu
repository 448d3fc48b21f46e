// A translation unit with device code but no __global__ kernel: the inspector must say so.
__device__ int helper(int x) { return x * 3; }
