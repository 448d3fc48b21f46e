"""Triton mutants (see reference_kernels.mutants). ``MUTANTS`` lists their module names."""

from __future__ import annotations

import importlib
from types import ModuleType

MUTANTS = (
    "gemm_last_k_tile_dropped",
    "gemm_first_k_tile_dropped",
    "gemm_k_tile_counted_twice",
    "gemm_unmasked_tail_store",
    "gemm_unmasked_tail_load",
    "gemm_partial_tile_not_written",
    "gemm_wrong_other_identity",
    "gemm_fp16_accumulation",
)


def load(name: str) -> ModuleType:
    """Import one mutant module by name (imports triton)."""
    if name not in MUTANTS:
        raise KeyError(f"no Triton mutant {name!r}; known: {', '.join(MUTANTS)}")
    return importlib.import_module(f"{__name__}.{name}")
