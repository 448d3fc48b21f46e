"""pipecheck tests run under ConSan by tests/gpu/test_consan_gpu.py (copied into a pytester directory
next to ``consan_kernels.py``, a copy of kernels.py): the bundled Gluon warp-specialized GEMM, a small
Gluon kernel with and without an ordering bug, and a test that launches no Triton kernel."""

import consan_kernels as ck
import pytest
import torch


@pytest.mark.pipecheck(sanitizer="consan")
@pytest.mark.parametrize("mkn", [(128, 64, 256), (256, 1024, 512), (129, 200, 264)],
                         ids=["one-tile", "ring-wraps", "ragged"])
def test_gluon_ws_gemm(pipecheck, mkn):
    from reference_kernels.triton.gluon_gemm import launch_gluon_gemm

    m, k, n = mkn
    g = torch.Generator(device="cuda").manual_seed(m + k + n)
    width = -(-n // 8) * 8  # TMA needs 16-byte row strides: ragged N lives in a padded allocation
    kw = -(-k // 8) * 8
    a = torch.randn(m, kw, device="cuda", dtype=torch.float16, generator=g)[:, :k]
    b = torch.randn(k, width, device="cuda", dtype=torch.float16, generator=g)[:, :n]
    c = torch.full((m, width), float("nan"), device="cuda", dtype=torch.float16)[:, :n]
    launch_gluon_gemm(a, b, c, num_programs=1)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    assert ((c.float() - ref).abs() / (ref.abs() + 1.0)).max().item() < 1e-2


@pytest.mark.pipecheck(sanitizer="consan")
def test_overwrite_in_flight_race(pipecheck):
    src = torch.arange(ck.TILE * ck.TILE, device="cuda", dtype=torch.float32)
    dst = torch.zeros_like(src)
    ck.launch(src, dst, race=True)
    torch.cuda.synchronize()


@pytest.mark.pipecheck(sanitizer="consan")
def test_overwrite_in_flight_clean(pipecheck):
    src = torch.arange(ck.TILE * ck.TILE, device="cuda", dtype=torch.float32)
    dst = torch.zeros_like(src)
    ck.launch(src, dst, race=False)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.pipecheck(sanitizer="consan")
def test_no_triton_kernel(pipecheck):
    a = torch.randn(64, 64, device="cuda")
    torch.cuda.synchronize()
    assert (a @ a).isfinite().all()
