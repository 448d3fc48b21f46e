"""The wrapper form on a GPU: a Triton op that allocates its own output with ``torch.empty`` is checked
as shipped (``KernelSpec(call=...)``), its allocation poisoned and guarded on the device, under value
patterns and a layout variant; a wrapper whose kernel drops the last tile is caught. Skipped without a
CUDA device."""

from __future__ import annotations

import pytest

from pytest_pipecheck import KernelSpec, Tensor

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

BLOCK_M, BLOCK_N = 16, 32


@triton.jit
def _row_scale(x_ptr, w_ptr, y_ptr, M, N, sxm, sxn, sym, syn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DROP_LAST: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tiles = tl.cdiv(N, BLOCK_N) - (1 if DROP_LAST else 0)
    for t in range(0, tiles):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
        w = tl.load(w_ptr + rn, mask=rn < N, other=0.0)
        y = (x.to(tl.float32) * w[None, :].to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, y, mask=mask)


def _op(drop_last: bool):  # type: ignore[no-untyped-def]
    def row_scale(x, w):  # type: ignore[no-untyped-def]
        """As a library ships it: allocates and returns its output."""
        m, n = x.shape
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        _row_scale[(triton.cdiv(m, BLOCK_M),)](x, w, y, m, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, DROP_LAST=drop_last)
        return y
    return row_scale


def _spec(drop_last: bool) -> KernelSpec:
    return KernelSpec("row_scale_drop_last" if drop_last else "row_scale", call=_op(drop_last),
                      reference=lambda a, d: {"y": a["x"].double() * a["w"].double()[None, :]},
                      tensors=[Tensor("x", ("M", "N"), layout=("contiguous", "sliced")), Tensor("w", ("N",)),
                               Tensor("y", ("M", "N"), role="output")],
                      tiles={"M": BLOCK_M, "N": BLOCK_N}, loop_dim="N")


@pytest.mark.parametrize("values", ["normal", "negative"])
@pytest.mark.parametrize("layout", ["contiguous", "x-sliced"])
def test_wrapper_form_passes_on_the_device(pipecheck, values, layout) -> None:  # type: ignore[no-untyped-def]
    if not pipecheck.has_gpu:
        pytest.skip(f"needs a CUDA GPU: {pipecheck.tier.reason}")
    results = pipecheck.check_kernel(_spec(False), {"M": 33, "N": 200}, values=values, layout=layout)
    assert results and all(r.verdict.value in ("pass", "skip") for r in results), [r.summary for r in results]


@pytest.mark.pipecheck(expect_failures=["coverage"])
def test_wrapper_dropping_its_last_tile_is_caught(pipecheck) -> None:  # type: ignore[no-untyped-def]
    if not pipecheck.has_gpu:
        pytest.skip(f"needs a CUDA GPU: {pipecheck.tier.reason}")
    from pytest_pipecheck.results import PipecheckFailure

    # In compute-sanitizer memcheck's child the wrapper's own torch.empty outputs stay at their exact size,
    # unpoisoned (a guard band would be valid memory to the tool): there the dropped tile is caught by its
    # values, and only the normal run can say "never written"
    exact = pipecheck.role.tool == "memcheck"
    with pytest.raises(PipecheckFailure, match="exceed the tolerance|never written" if exact else "never written"):
        pipecheck.check_coverage(_spec(True), {"M": 33, "N": 200})
