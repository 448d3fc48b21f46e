"""The Gluon warp-specialized GEMM (reference_kernels/triton/gluon_gemm.py) on a real sm_90 GPU.

Run on a GPU machine: ``python3 -m pytest tests/gpu/test_gluon_gemm_gpu.py -v -p no:cacheprovider``.

A mistake in the kernel's barrier phases shows up as a hang, not an exception. So every case runs in
a child Python process with a time limit, and a child that does not finish is this test's failure
("hung"), not a stuck test run. Each case compares with torch.matmul (fp32 accumulate on both sides)
at ragged and aligned shapes, for each tile shape and epilogue plan the perf scripts time (whole-tile,
two-chunk and four-chunk double-buffered TMA stores, masked stores). pipecheck's own checks of the
default configuration at its generated shapes are in reference_kernels/triton/test_reference_triton.py.
Evidence on an H200: docs/validation/2026-11-23-h200-1257/run-a.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

CONFIGS = {
    "128x256x64-s3-w8": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 3, "consumer_warps": 8},
    "128x256x64-s4-w8": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8},
    "128x256x64-s4-w8-epi4x2": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8,
                                "epi_split": 4, "epi_bufs": 2},
    "128x256x64-s4-w8-masked": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8,
                                "epilogue_tma": False},
    "256x128x64-s3-w8": {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 3, "consumer_warps": 8},
    "128x128x64-s4-w4": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 4, "consumer_warps": 4},
}
# (M, K, N): below one tile, ragged in every dimension (N * 2 bytes not a multiple of 16 takes the
# masked-store epilogue; the operands are views of padded allocations, so their rows still start on
# 16-byte boundaries as TMA needs), K not a multiple of BLOCK_K, more tiles than SMs, the benchmark size
SHAPES = [(65, 33, 65), (129, 200, 264), (1000, 520, 2056), (4096, 4096, 4096)]
TIMEOUT_S = 100

_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    from reference_kernels.triton.gluon_gemm import launch_gluon_gemm
    cfg, shapes, dtype = json.loads(sys.argv[1]), json.loads(sys.argv[2]), getattr(torch, sys.argv[3])
    out = []
    for m, k, n in shapes:
        g = torch.Generator(device="cuda").manual_seed(m * 7 + k * 3 + n)
        # TMA needs 16-byte row strides: ragged widths live in padded allocations (views)
        def padded(rows, cols, fill=None):
            width = -(-cols // 8) * 8
            if fill is None:
                return torch.randn(rows, width, device="cuda", dtype=dtype, generator=g)[:, :cols]
            return torch.full((rows, width), fill, device="cuda", dtype=dtype)[:, :cols]
        a, b, c = padded(m, k), padded(k, n), padded(m, n, float("nan"))
        launch_gluon_gemm(a, b, c, **cfg)
        torch.cuda.synchronize()
        ref = (a.float() @ b.float())
        err = ((c.float() - ref).abs() / (ref.abs() + 1.0)).max().item()
        out.append({"shape": [m, k, n], "max_rel_err": err, "nan": bool(torch.isnan(c).any().item())})
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def sm90() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"wgmma needs sm_90; this GPU is sm_{''.join(map(str, torch.cuda.get_device_capability()))}")
    from reference_kernels.triton.gluon_gemm import gluon_unavailable_reason

    reason = gluon_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


CASES = [(config, "float16") for config in sorted(CONFIGS)] + [("128x256x64-s4-w8", "bfloat16")]


@pytest.mark.parametrize(("config", "dtype"), CASES)
def test_matches_torch_at_ragged_shapes_without_hanging(sm90: None, config: str, dtype: str) -> None:
    cmd = [sys.executable, "-c", _CHILD, json.dumps(CONFIGS[config]), json.dumps(SHAPES), dtype]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gluon GEMM {config} {dtype} hung: no result within {TIMEOUT_S} s (a barrier phase?)")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    tol = 2e-2 if dtype == "bfloat16" else 5e-3
    for row in json.loads(lines[-1][len("RESULT "):]):
        assert not row["nan"], f"{config} {dtype} {row['shape']}: output elements never written (NaN poison left)"
        assert row["max_rel_err"] < tol, f"{config} {dtype} {row['shape']}: max rel err {row['max_rel_err']:.3g}"
