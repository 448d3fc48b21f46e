"""Triton mutants: the masked GEMM (:mod:`.gemm_base`) with one named, exact text edit each.

:data:`MUTANTS` declares them in the vocabulary of :mod:`reference_kernels.mutants.engine` (importing
this package imports no GPU package); :func:`load` builds one: the edited source of ``gemm_base.py``
is written to a module file in a per-process directory and imported, so ``triton.jit`` (and
``inspect.getsource``, and a compile retried in a child process) read real source lines, and the
kernel is named in tracebacks by that file. tests/unit/test_triton_mutants.py asserts each mutant is
caught by its check, with its message, and that the base passes those checks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from reference_kernels.mutants.engine import Edit, Mutant, edited_source, import_source

__all__ = ["BASE", "BASE_SOURCE", "MUTANTS", "TritonMutant", "base", "load", "mutant_source"]

BASE = "gemm_base"  # the base kernel's module, in this package
BASE_SOURCE = Path(__file__).with_name(f"{BASE}.py")

_LOOP = "    for kt in range(0, k_tiles):\n"
_DOT = "        acc = tl.dot(a, b, acc)\n"
_STORE = "    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=in_m & in_n)\n"
_K_LOADS = ("        k_left = K - kt * BLOCK_K\n"
            "        a = tl.load(a_tile, mask=in_m & (rk[None, :] < k_left), other=0.0)\n"
            "        b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n, other=0.0)\n")


def _triton(name: str, edits: tuple[Edit, ...], check: str, expect: str, bug: str, tags: set[str],
            shape_in_tiles: dict[str, int] | None = None, gpu: tuple[str, str] | None = None) -> Mutant:
    return Mutant(name, "triton", BASE, edits, check, expect, bug, frozenset(tags), shape_in_tiles,
                  gpu_check=gpu[0] if gpu else None, gpu_expect=gpu[1] if gpu else None)


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        _triton(
            "gemm_last_k_tile_dropped",
            (Edit(_LOOP, "    for kt in range(0, k_tiles - 1):  # BUG: should be range(0, k_tiles)\n"),),
            "tile_probe", "never reached the output",
            "last K tile dropped: the loop stops one tile early, as an epilogue that forgets to drain the last "
            "stage of the ring (racecheck cannot see it)",
            {"epilogue"}),
        _triton(
            "gemm_first_k_tile_dropped",
            (Edit(_LOOP, "    a_tile += BLOCK_K * stride_ak\n"
                         "    b_tile += BLOCK_K * stride_bk\n"
                         "    for kt in range(1, k_tiles):  # BUG: tile 0 is skipped\n"),),
            "tile_probe", "K tile 0 of",
            "first K tile dropped: the loop starts at tile 1 (a prologue whose first load is never consumed)",
            {"prologue"}),
        _triton(
            "gemm_k_tile_counted_twice",
            # inside the loop under kt == k_tiles - 1: compiled Triton does not let a loop's block values
            # be used after the loop (only the interpreter accepts that)
            (Edit(_DOT, _DOT + "        if kt == k_tiles - 1:\n"
                               "            acc = tl.dot(a, b, acc)  # BUG: the drained last stage is consumed "
                               "a second time\n"),),
            "tile_probe", "counted twice",
            "a K tile counted twice: the last K step multiplies its stage buffer again (a stage index that "
            "wraps one step too far)",
            {"epilogue"}),
        _triton(
            "gemm_unmasked_tail_store",
            (Edit(", c, mask=in_m & in_n)\n", ", c)  # BUG: no mask\n"),),
            "coverage", "written outside",
            "unmasked tail store: the output tile is stored without the M/N mask, so a partial edge tile "
            "writes past the last row and column of C",
            {"epilogue", "tail"}),
        _triton(
            "gemm_unmasked_tail_load",
            (Edit(_K_LOADS, "        a = tl.load(a_tile, mask=in_m, other=0.0)  # BUG: no K mask\n"
                            "        b = tl.load(b_tile, mask=in_n, other=0.0)  # BUG: no K mask\n"),),
            "coverage", "NaN where the reference is finite",
            "unmasked tail load: A and B are loaded without the K mask (assumes K % BLOCK_K == 0); the partial "
            "last K tile reads pipecheck's NaN guard bands",
            {"tail"}),
        _triton(
            "gemm_a_rows_unmasked",
            (Edit("mask=in_m & (rk[None, :] < k_left), other=0.0)",
                  "mask=rk[None, :] < k_left, other=0.0)  # BUG: no M mask"),),
            "coverage", "reads past its view",
            "A is loaded without its M mask: the last M tile reads rows of A past M, whose products the masked "
            "store discards (no output changes: the CPU tier's bounds check and memcheck see the reads)",
            {"tail"}, gpu=("sanitizer:memcheck", "past 'a'")),
        _triton(
            "gemm_partial_tile_not_written",
            (Edit(_STORE, "    full = ((tile_m + 1) * BLOCK_M <= M) & ((tile_n + 1) * BLOCK_N <= N)\n"
                          "    if full:  # BUG: partial edge tiles have no store at all\n"
                          "        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c)\n"),),
            "coverage", "never written",
            "partial last output tile never written: only full BLOCK_M x BLOCK_N tiles are stored",
            {"epilogue", "tail"}),
        _triton(
            "gemm_wrong_other_identity",
            (Edit("(rk[None, :] < k_left), other=0.0)", "(rk[None, :] < k_left), other=1.0)  # BUG: not 0"),
             Edit("(rk[:, None] < k_left) & in_n, other=0.0)", "(rk[:, None] < k_left) & in_n, other=1.0)  # BUG")),
            "coverage", "exceed the tolerance",
            "wrong other= identity in a masked reduction: masked K-tail loads fill with 1.0, not 0.0, so every "
            "output picks up BLOCK_K - K % BLOCK_K phantom products",
            {"tail"}),
        _triton(
            "gemm_fp16_accumulation",
            (Edit("dtype=tl.float32)", "dtype=tl.float16)  # BUG: fp16 accumulator"),
             Edit(_DOT, "        acc += tl.dot(a, b, out_dtype=tl.float16)\n")),
            "coverage", "exceed the tolerance",
            "fp16 accumulation over a long K: the accumulator is float16 instead of float32, and the rounding "
            "error grows with the number of K tiles far past the fp16 output tolerance",
            {"precision"}, shape_in_tiles={"M": 2, "K": 256, "N": 2}),
    )
}


def mutant_source(name: str) -> str:
    """The generated source of mutant ``name`` (``gemm_base.py`` with its edits applied)."""
    return edited_source(MUTANTS, name, "Triton", BASE_SOURCE)


@dataclass(frozen=True)
class TritonMutant:
    """A built Triton kernel (a mutant, or the base with ``mutant=None``) and its GEMM spec."""

    name: str
    mutant: Mutant | None
    kernel: Any
    module: ModuleType

    def spec(self, device: str = "cpu", **kw: Any) -> Any:
        """This kernel's spec: the reference GEMM's tiles and stages on ``device``, launched masked."""
        from reference_kernels.triton.gemm import make_spec

        bug = self.mutant.bug if self.mutant is not None else "the mutants' base: the masked GEMM, correct"
        return make_spec(f"mutant_{self.name}" if self.mutant else "triton_gemm_masked_base", self.kernel,
                         device, description=bug, **kw)

    def shape(self, device: str = "cpu") -> Any:
        """A shape that shows the bug (from ``shape_in_tiles``), or None when the generated shapes suffice."""
        if self.mutant is None or self.mutant.shape_in_tiles is None:
            return None
        from pytest_pipecheck.model.shape import Shape
        from reference_kernels.triton.gemm import config_for

        cfg = config_for(device)
        return Shape({dim: n * cfg[f"BLOCK_{dim}"] for dim, n in self.mutant.shape_in_tiles.items()})


_LOCK = threading.Lock()
_BUILT: dict[str, TritonMutant] = {}


def _build(name: str, mutant: Mutant | None, source: str) -> TritonMutant:
    module = import_source("triton", name, source)
    return TritonMutant(name, mutant, module.kernel, module)


def load(name: str) -> TritonMutant:
    """Build mutant ``name`` once per process (imports triton); :class:`MutantError` for an unknown name."""
    with _LOCK:
        if name not in _BUILT:
            _BUILT[name] = _build(name, MUTANTS.get(name), mutant_source(name))
        return _BUILT[name]


def base() -> TritonMutant:
    """The mutants' base kernel, built the same way (the control: it must pass every mutant's check)."""
    with _LOCK:
        if BASE not in _BUILT:
            _BUILT[BASE] = _build(BASE, None, BASE_SOURCE.read_text())
        return _BUILT[BASE]
