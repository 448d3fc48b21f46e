"""Hopper (sm_90a) reference kernels: TMA + mbarrier warp specialization with WGMMA consumers.

``launch.gemm(a, b)`` runs ``tma_wgmma_gemm.cu``; ``spec.spec()`` describes it for pipecheck; the
one-bug mutants live in :mod:`reference_kernels.mutants.hopper`; ``run_case`` runs any of them in a
child process (the only safe way to run a kernel that may hang).
"""

from __future__ import annotations

from .launch import HopperCompileError, HopperLaunchError, Variant, gemm

__all__ = ["HopperCompileError", "HopperLaunchError", "Variant", "gemm"]
