"""What the square-GEMM timing scripts share (triton_gemm_perf.py, gluon_gemm_tune.py): their common
options and their inputs. Imports torch only inside the function that needs it."""

from __future__ import annotations

import argparse
from typing import Any


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """OUT_DIR, ``--size`` (n of the n x n x n GEMM), ``--dtype`` and ``--rep`` (do_bench's rep)."""
    parser.add_argument("out_dir")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")


def square_inputs(n: int, dtype: Any) -> tuple[Any, Any]:
    """A and B, n x n of ``dtype`` on the GPU, standard normal from a generator seeded with 0."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((n, n), device="cuda", dtype=dtype, generator=gen)
    b = torch.randn((n, n), device="cuda", dtype=dtype, generator=gen)
    return a, b
