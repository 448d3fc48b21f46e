"""The bundled Triton reference kernels under every pipecheck check: run ``pytest --pipecheck``.

Each kernel gets the cases a test of its spec gets by default (:func:`pytest_pipecheck.model.cases.cases`):
shapes generated from its tiles (ragged edges, trip counts around the stage count, a large odd trip
count), every value pattern and declared layout variant at a few of them, and the case that measures one
program's extent. On a machine without a GPU the kernels run in the Triton interpreter with small tiles;
with a GPU, with production tiles.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from pytest_pipecheck.device import detect_tier
from pytest_pipecheck.model import shapes as shape_gen
from pytest_pipecheck.model.cases import cases


def _collection_device() -> str:
    # nvidia-smi based: no CUDA context is created while collecting
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    return "cuda" if detect_tier("auto").has_gpu else "cpu"


DEVICE = _collection_device()


def _specs():
    from reference_kernels.triton.flash_attention import flash_attention_spec
    from reference_kernels.triton.gemm import gemm_spec
    from reference_kernels.triton.staged_elementwise import staged_elementwise_spec

    specs = [gemm_spec(DEVICE), staged_elementwise_spec(DEVICE), flash_attention_spec(DEVICE),
             flash_attention_spec(DEVICE, causal=True)]
    if DEVICE != "cpu":  # the interpreter's bf16 tl.dot is wrong (measured, triton 3.9)
        specs.insert(1, gemm_spec(DEVICE, dtype="bfloat16"))
    return specs


CASES = [pytest.param(spec, case.args[0], id=f"{spec.name}-{case.id}")
         for spec in _specs() for case in cases(spec, {"shape"}, level="small", stages=None, max_bytes=1 << 30)[1]]


@pytest.mark.parametrize("spec, shape", CASES)
def test_reference_kernel(pipecheck, spec, shape):
    pipecheck.check_kernel(spec, shape)


def test_persistent_ws_gemm(pipecheck):
    from reference_kernels.triton import persistent_ws_gemm as ws

    reason = ws.unavailable_reason(pipecheck.device)
    if reason:
        pipecheck.skip_check("coverage", reason, kernel="triton_persistent_ws_gemm")
        pytest.skip(reason)
    import torch

    spec = ws.persistent_ws_gemm_spec(pipecheck.device)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in shape_gen.generate(spec, level=pipecheck.config.shape_level, sm_count=sms):
        pipecheck.check_kernel(spec, shape)
    # what the compiled kernel is made of: TMA copies feeding warpgroup MMA, no spills
    compiled = _launch_ws_512(ws, sms)
    pipecheck.check_sass(compiled, expect={"async_copies": "TMA", "mma": "HGMMA", "spills": False})


@pytest.mark.pipecheck(sanitizer=["racecheck", "synccheck"])
def test_gluon_ws_gemm(pipecheck):
    """The Gluon warp-specialized GEMM (hand-written TMA loader + wgmma consumers + mbarrier ring) under
    every check at its generated shapes, then what it compiled to: TMA loads feeding HGMMA, no spills.

    racecheck runs with every compute-sanitizer: before 2026.4.0 it reports hazards on the 4 bytes of
    Triton's warp-specialize dispatch state, and the reviewed rule ``triton-ws-dispatch-state``
    (pytest_pipecheck/sanitizer/known.py) filters exactly those records and counts them in the result;
    any hazard on the kernel's own ring or staging buffers still fails the test."""
    from reference_kernels.triton import gluon_gemm as gg

    reason = gg.unavailable_reason(pipecheck.device)
    if reason:
        pipecheck.skip_check("coverage", reason, kernel="gluon_ws_gemm")
        pytest.skip(reason)
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for dtype in ("float16", "bfloat16"):
        spec = gg.gluon_gemm_spec(dtype)
        for shape in shape_gen.generate(spec, level=pipecheck.config.shape_level, sm_count=sms):
            pipecheck.check_kernel(spec, shape)
    a, b = (torch.randn((512, 512), device="cuda", dtype=torch.float16) for _ in range(2))
    compiled = gg.launch_gluon_gemm(a, b, torch.empty_like(a), return_kernel=True)
    torch.cuda.synchronize()
    pipecheck.check_sass(compiled, expect={"async_copies": "TMA", "mma": "HGMMA", "spills": False})


def _launch_ws_512(ws, sms):  # type: ignore[no-untyped-def]
    import torch

    m = n = k = 512
    arrays = {"a": torch.randn((m, k), device="cuda", dtype=torch.float16),
              "b": torch.randn((k, n), device="cuda", dtype=torch.float16),
              "c": torch.empty((m, n), device="cuda", dtype=torch.float16)}
    compiled = ws.launch(arrays, ws.GPU_CONFIG, sms)
    torch.cuda.synchronize()
    return compiled


def test_persistent_ws_gemm_is_warp_specialized(pipecheck):
    """The kernel asks for warp_specialize=True; the compiled IR says whether this Triton, on this GPU,
    really split the loop into producer/consumer partitions. Where it did not, the check is a skip with
    the compiler's own answer as the reason (Triton 3.6 on sm_90 partitions neither the inner-loop nor
    the flattened outer-loop form: docs/validation/2026-11-22-h200-0453/ws_partition_probe.md), never a
    pass."""
    from pytest_pipecheck.inspect.triton_ir import analyze_triton
    from reference_kernels.triton import persistent_ws_gemm as ws

    reason = ws.unavailable_reason(pipecheck.device)
    if reason:
        pipecheck.skip_check("inspect", reason, kernel="triton_persistent_ws_gemm")
        pytest.skip(reason)
    import torch

    compiled = _launch_ws_512(ws, torch.cuda.get_device_properties(0).multi_processor_count)
    ir = analyze_triton(compiled)
    if not ir.warp_specialized:
        why = f"warp specialization not applied by this Triton: {ir.warp_specialize_reason}"
        pipecheck.skip_check("inspect", why, kernel="triton_persistent_ws_gemm")
        pytest.skip(why)
    pipecheck.check_sass(compiled, expect={"warp_specialized": True, "async_copies": "TMA", "mma": "HGMMA"})


def test_gemm_occupancy(pipecheck):
    """The generic GPU config (128x128x64, 3 stages, 4 warps) keeps >= 1 block/SM everywhere on the
    pointer path other archs take; the sm_90 config (128x256x64, 3 stages, 8 warps) does on sm_90 on
    the paths the launcher takes there (persistent; tma and even_k for other kernels and unaligned
    inputs)."""
    import torch

    from reference_kernels.triton.gemm import GPU_CONFIG, PATH_SWITCHES, gemm_kernel, gpu_config

    m = n = k = 256
    a = torch.empty((m, k), dtype=torch.float16)
    b = torch.empty((k, n), dtype=torch.float16)
    c = torch.empty((m, n), dtype=torch.float16)
    args = [a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]
    sm90 = gpu_config((9, 0))
    cases = [(GPU_CONFIG, "even_k", None), (sm90, "tma", "sm_90"), (sm90, "even_k", "sm_90")]
    for cfg, path, arch in cases:
        try:
            result = pipecheck.check_occupancy(
                gemm_kernel, args=args, num_warps=cfg["warps"], num_stages=cfg["stages"], min_blocks=1, arch=arch,
                BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
                **PATH_SWITCHES[path])
        except ModuleNotFoundError as exc:  # the occupancy check's optional pieces are missing here
            pytest.skip(f"occupancy check unavailable: {exc}")
        assert "blocks/SM" in result.summary
    # the path sm_90 takes for aligned inputs: the persistent kernel (3 stages + the TMA store's tile)
    from reference_kernels.triton.gemm import gemm_persistent_kernel

    pargs = [a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), c.stride(1)]
    try:
        result = pipecheck.check_occupancy(
            gemm_persistent_kernel, args=pargs, num_warps=sm90["warps"], num_stages=sm90["stages"], min_blocks=1,
            arch="sm_90", BLOCK_M=sm90["BLOCK_M"], BLOCK_N=sm90["BLOCK_N"], BLOCK_K=sm90["BLOCK_K"],
            GROUP_M=sm90["GROUP_M"], NUM_PROGRAMS=132, FLATTEN=True, TMA_STORE=True, SPLIT_EPILOGUE=False)
    except ModuleNotFoundError as exc:
        pytest.skip(f"occupancy check unavailable: {exc}")
    assert "blocks/SM" in result.summary
