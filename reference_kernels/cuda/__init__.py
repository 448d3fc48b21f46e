"""The CUDA pipelining ladder: six GEMM kernels, one pipelining idea each (see each .cu header).

``launch.gemm(kernel, a, b, c)`` runs one; ``specs.spec(kernel)`` describes it for pipecheck; the
mutants with one bug each live in :mod:`reference_kernels.mutants.cuda`.
"""

from __future__ import annotations

from .launch import KERNELS, CudaCompileError, CudaKernel, CudaLaunchError, gemm

__all__ = ["KERNELS", "CudaCompileError", "CudaKernel", "CudaLaunchError", "gemm"]
