"""Small Triton kernels of our own, each in a correct version and a mutant that reproduces a bug
reported on a kernel library's public tracker. Each wrapper is shipped as a library would ship it:
it checks, allocates its outputs with ``torch.empty`` and launches.

1. Layer norm whose variance includes the padded lanes of the block (``x - mean`` is ``-mean`` there):
   https://github.com/linkedin/Liger-Kernel/issues/518 (same bug: triton-lang/triton#9838,
   unslothai/unsloth#1867). Weak on zero-mean inputs; the ``offset`` value pattern shows it.
2. A row max whose masked lanes load a value that is not neutral for the reduction (``other=0.0``):
   https://github.com/flagos-ai/FlagGems/issues/3716 (masked loads without a neutral ``other``
   feeding ``tl.max``/``tl.sum``). Right unless a whole row is negative: the ``negative`` pattern.
3. A chunked scan that folds a per-chunk value into the chunk's row ``BT - 1``, which the masked store
   drops on a partial last chunk, instead of the chunk's last live row:
   https://github.com/fla-org/flash-linear-attention/issues/1142 (fixed by PR #1143). Shows at any
   length that is not a multiple of the chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# ----------------------------------------------------------------------------- 1. layer norm


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, sx, sy, eps, BLOCK: tl.constexpr, PADDED_VARIANCE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * sx + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xm = x - mean
    if not PADDED_VARIANCE:
        xm = tl.where(mask, xm, 0.0)  # the fix: padded lanes must not count
    var = tl.sum(xm * xm, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * sy + cols, (xm * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x, w, b, eps=1e-5, padded_variance=False):
    assert x.is_contiguous() and x.shape[-1] == w.shape[0] == b.shape[0]
    m, n = x.shape
    y = torch.empty_like(x)
    _layer_norm_kernel[(m,)](x, w, b, y, n, x.stride(0), y.stride(0), eps,
                             BLOCK=triton.next_power_of_2(n), PADDED_VARIANCE=padded_variance)
    return y


# ----------------------------------------------------------------------------- 2. row max


@triton.jit
def _row_max_kernel(x_ptr, y_ptr, N, sx, BLOCK: tl.constexpr, ZERO_OTHER: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if ZERO_OTHER:
            x = tl.load(x_ptr + row * sx + cols, mask=cols < N, other=0.0)  # the bug: 0 is not neutral for max
        else:
            x = tl.load(x_ptr + row * sx + cols, mask=cols < N, other=float("-inf"))
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(y_ptr + row, tl.max(acc, axis=0).to(y_ptr.dtype.element_ty))


ROW_MAX_BLOCK = 32


def row_max(x, zero_other=False):
    assert x.is_contiguous()
    m, n = x.shape
    y = torch.empty(m, dtype=x.dtype, device=x.device)
    _row_max_kernel[(m,)](x, y, n, x.stride(0), BLOCK=ROW_MAX_BLOCK, ZERO_OTHER=zero_other)
    return y


# ----------------------------------------------------------------------------- 3. chunked scan


@triton.jit
def _chunk_scan_kernel(x_ptr, o_ptr, T, BT: tl.constexpr, FIXED_LAST_ROW: tl.constexpr):
    """o = the chunk-local cumulative sum of x, plus the chunk's total once more at its last live row
    (as a backward folds a chunk-scalar gate gradient into the chunk's last token)."""
    i_b, i_t = tl.program_id(0), tl.program_id(1)
    rows = i_t * BT + tl.arange(0, BT)
    live = rows < T
    x = tl.load(x_ptr + i_b * T + rows, mask=live, other=0.0).to(tl.float32)
    o = tl.cumsum(x, axis=0)
    total = tl.sum(x, axis=0)
    if FIXED_LAST_ROW:
        last = BT - 1  # the bug: a partial last chunk has no live row BT - 1
    else:
        last = tl.minimum((i_t + 1) * BT, T) - 1 - i_t * BT
    o = tl.where(tl.arange(0, BT) == last, o + total, o)
    tl.store(o_ptr + i_b * T + rows, o.to(o_ptr.dtype.element_ty), mask=live)


SCAN_CHUNK = 16


def chunk_scan(x, fixed_last_row=False):
    assert x.is_contiguous()
    b, t = x.shape
    o = torch.empty_like(x)
    _chunk_scan_kernel[(b, triton.cdiv(t, SCAN_CHUNK))](x, o, t, BT=SCAN_CHUNK, FIXED_LAST_ROW=fixed_last_row)
    return o
