"""The CUDA pipelining ladder: six GEMM kernels, one pipelining idea each (see each .cu header),
plus k3 built with a 128 x 256 block tile (``k3_cp_async_wide``).

``launch.gemm(kernel, a, b, c)`` runs one; ``specs.spec(kernel)`` describes it for pipecheck; the
mutants with one bug each live in :mod:`reference_kernels.mutants.cuda`.
"""

from __future__ import annotations

from .launch import KERNELS, CudaCompileError, CudaKernel, CudaLaunchError, gemm

__all__ = ["KERNELS", "CudaCompileError", "CudaKernel", "CudaLaunchError", "gemm"]
