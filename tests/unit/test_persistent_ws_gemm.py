"""The persistent warp-specialized GEMM's host side, checked without a GPU.

At M65-K33-N65 (fp16) a TMA store of C writes 455 elements into the row padding of C, columns 65..71
of each of the 65 rows, although every value inside C is right (on an H200:
docs/validation/2026-11-22-h200-0223.md). A TMA store writes whole 16-byte chunks of a row, so a row
that ends inside a chunk (65 x 2 = 130 bytes) is overrun up to the next 16-byte boundary (72
columns). These tests pin what the launcher gives the kernel: every
descriptor is the strided view's own shape and strides, and C goes through its descriptor only when
its rows end on a 16-byte boundary (masked pointer stores otherwise).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton.tools.tensor_descriptor")

from pytest_pipecheck.checks.arrays import alloc_guarded  # noqa: E402
from reference_kernels.triton import persistent_ws_gemm as ws  # noqa: E402


def _arrays(m: int, k: int, n: int) -> dict[str, Any]:
    cfg = ws.GPU_CONFIG
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    return {
        "a": alloc_guarded("a", (m, k), "float16", role="input", values=torch.ones(m, k), tiles=(bm, bk)).array,
        "b": alloc_guarded("b", (k, n), "float16", role="input", values=torch.ones(k, n), tiles=(bk, bn)).array,
        "c": alloc_guarded("c", (m, n), "float16", role="output", tiles=(bm, bn)).array,
    }


def _launch_recorded(monkeypatch: pytest.MonkeyPatch, arrays: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    import triton.tools.tensor_descriptor as td

    built: list[Any] = []

    class RecordingDescriptor(td.TensorDescriptor):
        def __post_init__(self) -> None:
            super().__post_init__()  # Triton's own checks: 16-byte aligned base and strides, unit last stride
            built.append(self)

    launched: dict[str, Any] = {}

    class FakeKernel:
        def __getitem__(self, grid: Any) -> Any:
            def run(*args: Any, **kwargs: Any) -> None:
                launched.update(grid=grid, args=args, kwargs=kwargs)
            return run

    monkeypatch.setattr(td, "TensorDescriptor", RecordingDescriptor)
    monkeypatch.setattr(ws, "ws_gemm_kernel", FakeKernel())
    ws.launch(arrays, ws.GPU_CONFIG, num_sms=132)
    return built, launched


def test_descriptors_are_the_views_and_a_65_wide_c_is_stored_through_masked_pointers(monkeypatch):
    arrays = _arrays(65, 33, 65)
    built, launched = _launch_recorded(monkeypatch, arrays)
    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    assert a.stride(0) != a.shape[1] and c.stride(0) != c.shape[1], "the views must be padded for this test"
    by_base = {id(d.base): d for d in built}
    assert set(by_base) == {id(a), id(b)}, "C's rows end mid-chunk (130 bytes): no TMA store descriptor for C"
    for t, block in ((a, [128, 64]), (b, [64, 128])):
        d = by_base[id(t)]
        assert tuple(d.shape) == tuple(t.shape) and tuple(d.strides) == tuple(t.stride())
        assert list(d.block_shape) == block
    args, kwargs = launched["args"], launched["kwargs"]
    assert args[2] is None and args[3] is c, "the epilogue gets C's view as a pointer"
    assert args[4:9] == (65, 65, 33, c.stride(0), c.stride(1))
    assert kwargs["TMA_STORE"] is False
    assert launched["grid"] == (1,)


def test_c_whose_rows_end_on_16_bytes_keeps_the_tma_store_with_the_views_shape(monkeypatch):
    arrays = _arrays(65, 33, 64)
    built, launched = _launch_recorded(monkeypatch, arrays)
    c = arrays["c"]
    d = next(d for d in built if d.base is c)
    assert tuple(d.shape) == (65, 64) and tuple(d.strides) == tuple(c.stride()) and list(d.block_shape) == [128, 128]
    assert launched["args"][2] is d and launched["kwargs"]["TMA_STORE"] is True


@pytest.mark.parametrize(("n", "dtype", "exact"), [
    (65, torch.float16, False), (64, torch.float16, True), (72, torch.float16, True), (68, torch.float16, False),
    (4, torch.float32, True), (6, torch.float32, False), (16, torch.int8, True), (17, torch.int8, False),
])
def test_tma_store_is_exact_only_when_rows_end_on_16_bytes(n, dtype, exact):
    assert ws.tma_store_is_exact(torch.empty(3, n, dtype=dtype)) is exact
