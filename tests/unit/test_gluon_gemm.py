"""The Gluon warp-specialized Hopper GEMM, compiled ahead of time for sm_90 here (no GPU needed).

Gluon kernels cannot run in Triton's interpreter, so what CI can check is what the compiler built:
the TTGIR has one ``ttg.warp_specialize`` region with a single 1-warp worker (the TMA loader), the
PTX issues ``wgmma.mma_async`` with one group left in flight, TMA loads that complete on mbarriers,
and mbarrier waits, and the shared memory of every config fits sm_90's 232448 bytes. The launcher's
argument checks run on CPU tensors: each precondition it can judge without a GPU gives a ValueError
naming the problem, and arguments that pass them all reach the device check.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from reference_kernels.triton import gluon_gemm as gg

GLUON_REASON = gg.gluon_unavailable_reason()
needs_gluon = pytest.mark.skipif(GLUON_REASON is not None, reason=str(GLUON_REASON))

DEFAULT: dict[str, Any] = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8}
# (config, dtype, (TMA store, column chunks, staging buffers) of the epilogue)
CONFIGS: list[tuple[dict[str, Any], str, tuple[bool, int, int]]] = [
    (DEFAULT, "float16", (True, 2, 1)),   # 4 x 48 KB ring: a 64 KB staging tile would not fit, two 32 KB halves do
    ({**DEFAULT, "stages": 3}, "float16", (True, 1, 1)),
    ({**DEFAULT, "epi_split": 4, "epi_bufs": 2}, "float16", (True, 4, 2)),
    ({**DEFAULT, "epilogue_tma": False}, "float16", (False, 1, 1)),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 4, "consumer_warps": 4}, "float16", (True, 1, 1)),
    (DEFAULT, "bfloat16", (True, 2, 1)),
]

_COMPILED: dict[str, Any] = {}


def _compiled(cfg: dict[str, Any], dtype: str) -> Any:
    key = repr((sorted(cfg.items()), dtype))
    if key not in _COMPILED:
        _COMPILED[key] = gg.compile_for_sm90(dtype=dtype, **cfg)
    return _COMPILED[key]


def _ids(case: tuple[dict[str, Any], str, tuple[bool, int, int]]) -> str:
    cfg, dtype, (tma_store, split, bufs) = case
    return (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}-s{cfg['stages']}-w{cfg['consumer_warps']}-"
            f"{f'tma{split}x{bufs}' if tma_store else 'masked'}-{dtype}")


@needs_gluon
@pytest.mark.parametrize("case", CONFIGS, ids=_ids)
def test_ttgir_has_one_warp_specialize_region_with_a_1_warp_loader(case):
    cfg, dtype, _ = case
    k = _compiled(cfg, dtype)
    ttgir = k.asm["ttgir"]
    assert len(re.findall(r"\bttg\.warp_specialize\(", ttgir)) == 1, "expected exactly one warp_specialize op"
    workers = re.findall(r"^\s*partition(\d+)\(.*num_warps\((\d+)\)", ttgir, re.MULTILINE)
    assert workers == [("0", "1")], f"expected one worker partition of 1 warp, found {workers}"
    # the default partition runs the kernel's num_warps (metadata.num_warps counts the worker's warps too
    # in Triton 3.9, padded to a warpgroup, so read the module attribute)
    assert re.search(rf'"ttg\.num-warps"\s*=\s*{cfg["consumer_warps"]}\s*:\s*i32', ttgir)
    # the loader's TMA copies live in the worker partition, the wgmma in the default region
    region, _, partition = ttgir.partition("partition0(")
    assert "ttng.async_tma_copy_global_to_local" in partition
    assert "ttng.warp_group_dot" in region.split("ttg.warp_specialize(", 1)[1]
    assert "ttng.warp_group_dot" not in partition


@needs_gluon
@pytest.mark.parametrize("case", CONFIGS, ids=_ids)
def test_ptx_has_async_wgmma_tma_loads_and_mbarrier_waits(case):
    cfg, dtype, (tma_store, split, _) = case
    ptx = _compiled(cfg, dtype).asm["ptx"]
    ty = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    n_per_warp_col = cfg["BLOCK_N"] // gg.kernel_config(
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        consumer_warps=cfg["consumer_warps"])["WARPS_N"]
    wgmma = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n_per_warp_col}k16\.f32\.{ty}\.{ty}", ptx)
    assert len(wgmma) == cfg["BLOCK_K"] // 16 * (cfg["BLOCK_M"] // 64) // (cfg["consumer_warps"] // 4), (
        "one m64nNk16 wgmma per 16-wide K step per 64-row slice of each warpgroup")
    assert "wgmma.wait_group.sync.aligned 1;" in ptx, "one wgmma must stay in flight in the K loop"
    assert "wgmma.wait_group.sync.aligned 0;" in ptx, "the tile's last wgmma is drained before the epilogue"
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::(?:cta|cluster)\.global\.mbarrier::complete_tx::bytes", ptx), (
        "A and B must arrive by TMA, completing on an mbarrier")
    assert re.search(r"mbarrier\.arrive\.expect_tx\.shared(::cta)?\.b64", ptx), "ready[s] is armed with the bytes"
    assert len(re.findall(r"mbarrier\.try_wait\.parity", ptx)) >= 2, "the loader waits on empty, the consumer on ready"
    assert re.search(r"mbarrier\.arrive\.shared(::cta)?\.b64", ptx), "the consumer releases slots on empty"
    assert "setmaxnreg" in ptx, "the partitions rebalance registers"
    stores = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx))
    assert stores == (split if tma_store else 0), (
        f"epilogue: expected {f'{split} TMA store(s), one per column chunk' if tma_store else 'masked stores'}, "
        f"found {stores} TMA stores")
    assert ("st.global" in ptx) is not tma_store


@needs_gluon
@pytest.mark.parametrize("case", CONFIGS, ids=_ids)
def test_shared_memory_fits_sm90_and_holds_the_ring(case):
    cfg, dtype, (tma_store, split, bufs) = case
    shared = _compiled(cfg, dtype).metadata.shared
    assert shared <= gg.SMEM_LIMIT_SM90 == 232448
    need = gg.shared_memory_bytes(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                                  stages=cfg["stages"], epilogue_tma=tma_store, epi_split=split, epi_bufs=bufs)
    assert need <= shared < need + 1024, f"metadata.shared {shared} vs the ring (+ staging buffers) {need}"


def test_epilogue_plan_picks_the_largest_staging_that_fits_and_masks_ragged_rows():
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}
    assert gg.epilogue_plan(4096, 2, **wide, stages=3) == (True, 1, 1)
    assert gg.epilogue_plan(4096, 2, **wide, stages=4) == (True, 2, 1)
    # a row of 65 fp16 elements (130 bytes) ends inside a 16-byte chunk: a TMA store would overrun it
    assert gg.epilogue_plan(65, 2, **wide, stages=3) == (False, 1, 1)
    assert gg.epilogue_plan(72, 2, **wide, stages=3) == (True, 1, 1)
    assert gg.epilogue_plan(4096, 2, **wide, stages=4, tma=False) == (False, 1, 1)
    assert gg.epilogue_plan(4096, 2, **wide, stages=4, split=4, bufs=2) == (True, 4, 2)
    assert gg.epilogue_plan(4096, 2, **wide, stages=4, split=4) == (True, 4, 2)
    for plan in ((True, 1, 1), (True, 2, 1), (True, 4, 2)):
        assert gg.shared_memory_bytes(**wide, stages=4 if plan[1] > 1 else 3, epilogue_tma=True, epi_split=plan[1],
                                      epi_bufs=plan[2]) <= gg.SMEM_LIMIT_SM90


def test_epilogue_plan_names_overrides_that_cannot_work():
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4}
    with pytest.raises(ValueError, match=r"epilogue split must be 1, 2, 4 or 8.*got 3"):
        gg.epilogue_plan(4096, 2, **wide, split=3)
    with pytest.raises(ValueError, match=r"staging buffers must be 1 or 2; got 3"):
        gg.epilogue_plan(4096, 2, **wide, bufs=3)
    with pytest.raises(ValueError, match=r"no TMA epilogue with split=1 bufs=None fits.*4 stages of 128x64"):
        gg.epilogue_plan(4096, 2, **wide, split=1)


@needs_gluon
def test_aot_signature_is_what_the_jit_derives_from_host_descriptors():
    torch = pytest.importorskip("torch")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.jit import create_function_from_signature
    except ImportError as exc:
        pytest.skip(f"this Triton has no JIT binder to compare with ({exc})")
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    signature, constexprs, attrs = gg.aot_signature(**DEFAULT)
    m = n = k = 512
    a, b, c = (torch.empty(s, dtype=torch.float16) for s in ((m, k), (k, n), (m, n)))
    descs = [TensorDescriptor.from_tensor(t, blk, gg._shared_layout(blk, "float16"))
             for t, blk in ((a, [128, 64]), (b, [64, 256]), (c, [128, 128]))]
    jf = gg.gluon_ws_gemm_kernel
    binder = create_function_from_signature(jf.signature, jf.params, make_backend(GPUTarget("cuda", 90, 32)))
    _, specialization, _ = binder(*descs, c, m, n, k, c.stride(0), **constexprs, num_warps=8)
    types = [spec[0] for spec in specialization]
    assert types == list(signature.values())
    divisible = sorted(i for i, spec in enumerate(specialization) if spec[1] == "D")
    assert divisible == sorted(i for (i,) in attrs), "tt.divisibility goes where the JIT puts it"


# ----------------------------------------------------------------------------- launcher preconditions


def _torch() -> Any:
    return pytest.importorskip("torch")


def _abc(m: int = 64, k: int = 64, n: int = 64, dtype: str = "float16") -> tuple[Any, Any, Any]:
    torch = _torch()
    dt = getattr(torch, dtype)
    return torch.zeros(m, k, dtype=dt), torch.zeros(k, n, dtype=dt), torch.zeros(m, n, dtype=dt)


def _refused(match: str, *args: Any) -> None:
    """launch_gluon_gemm(*args) raises a ValueError matching ``match`` (the checks run before any device use)."""
    with pytest.raises(ValueError, match=match):
        gg.launch_gluon_gemm(*args)


def test_valid_cpu_arguments_pass_every_argument_check_and_stop_at_the_device():
    a, b, c = _abc()
    _refused(r"CUDA tensors on one sm_90 GPU; got devices \['cpu'\]", a, b, c)


def test_dtype_mismatch_is_named():
    torch = _torch()
    a, b, c = _abc()
    _refused(r"dtype mismatch.*a=float16, b=bfloat16, c=float16", a, b.to(torch.bfloat16), c)


def test_float32_is_refused():
    a, b, c = _abc(dtype="float32")
    _refused(r"dtype of a must be float16 or bfloat16; got float32", a, b, c)


def test_non_unit_inner_stride_is_named():
    torch = _torch()
    a, b, c = _abc()
    strided = torch.zeros(64, 128, dtype=torch.float16)[:, ::2]
    assert strided.shape == b.shape and strided.stride() == (128, 2)
    _refused(r"b must be row-major with unit inner stride.*\(128, 2\)", a, strided, c)


def test_row_stride_not_a_multiple_of_16_bytes_is_named():
    torch = _torch()
    a, b, _ = _abc()
    padded = torch.zeros(64, 67, dtype=torch.float16)[:, :64]   # rows 134 bytes apart
    _refused(r"row stride of c must be a multiple of 16 bytes \(TMA\); got 67 elements = 134 bytes", a, b, padded)


def test_misaligned_base_pointer_is_named():
    torch = _torch()
    _, b, c = _abc()
    shifted = torch.zeros(64 * 64 + 8, dtype=torch.float16)[1:1 + 64 * 64].view(64, 64)
    assert shifted.data_ptr() % 16 == 2
    _refused(r"base pointer of a must be 16-byte aligned", shifted, b, c)


def test_shape_and_rank_errors_are_named():
    torch = _torch()
    a, b, c = _abc()
    _refused(r"shape mismatch", a, torch.zeros(32, 64, dtype=torch.float16), c)
    _refused(r"shape mismatch.*c must be \(64, 64\)", a, b, torch.zeros(64, 32, dtype=torch.float16))
    _refused(r"a must be 2-D; got 3-D", a[None], b, c)


def test_kernel_config_rejects_tiles_wgmma_cannot_cover():
    assert gg.kernel_config(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, consumer_warps=8) == {"WARPS_M": 8, "WARPS_N": 1}
    assert gg.kernel_config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, consumer_warps=4) == {"WARPS_M": 4, "WARPS_N": 1}
    assert gg.kernel_config(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, consumer_warps=8) == {"WARPS_M": 4, "WARPS_N": 2}
    with pytest.raises(ValueError, match="consumer_warps must be 4"):
        gg.kernel_config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, consumer_warps=2)
    with pytest.raises(ValueError, match="at most 256"):
        gg.kernel_config(BLOCK_M=64, BLOCK_N=1024, BLOCK_K=64, consumer_warps=8)
    with pytest.raises(ValueError, match="BLOCK_K must be a positive multiple of 16"):
        gg.kernel_config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=24, consumer_warps=4)
