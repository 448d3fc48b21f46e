"""Reference kernels bundled with pytest-pipecheck: one idea per file, each with a spec.

``reference_kernels.triton`` holds the Triton kernels (GEMM, staged elementwise, FlashAttention-style
forward, persistent warp-specialized GEMM); ``reference_kernels.mutants`` the same kernels with one
deliberate bug each, which pipecheck's own tests prove are caught.
"""
