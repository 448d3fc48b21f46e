"""The reference Triton GEMM's paths (persistent, tma, even_k, masked): results, path choice, sm_90 compiles.

Results run where the test tier runs kernels: in Triton's interpreter on the CPU tier (the plugin
sets TRITON_INTERPRET=1; fp16 only, the interpreter's bf16 tl.dot is wrong) and on the GPU
unchanged. Inputs live inside NaN guard bands (pipecheck's guarded allocations), so a load past an
edge turns the result into NaN, and C's padding holds a canary that a store past an edge changes.
The path choice is tested on stand-in arrays (no GPU needed); the sm_90 compiles are ahead of time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from pytest_pipecheck.checks.arrays import alloc_guarded  # noqa: E402
from reference_kernels.triton import gemm as g  # noqa: E402

CFG = g.CPU_CONFIG  # 16x16x16: small enough for the interpreter, valid on a GPU too


def _guarded(m: int, k: int, n: int, device: str, seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    tiles = (CFG["BLOCK_M"], CFG["BLOCK_K"], CFG["BLOCK_N"])
    return {
        "a": alloc_guarded("a", (m, k), "float16", role="input", device=device,
                           values=torch.randn(m, k, generator=gen), tiles=tiles[:2]),
        "b": alloc_guarded("b", (k, n), "float16", role="input", device=device,
                           values=torch.randn(k, n, generator=gen), tiles=tiles[1:]),
        "c": alloc_guarded("c", (m, n), "float16", role="output", device=device, tiles=(tiles[0], tiles[2])),
    }


def _check_result(arrays: dict[str, Any]) -> None:
    a, b, c = (arrays[n].array for n in "abc")
    if c.is_cuda:
        torch.cuda.synchronize()
    want = a.double().cpu() @ b.double().cpu()
    got = c.double().cpu()
    assert not torch.isnan(got).any(), "NaN in C: a load read past an edge (guard band) or a tile was not stored"
    err = (got - want).abs().max().item()
    assert err <= 1e-2 * max(1.0, want.abs().max().item()), f"max abs error {err}"
    out = arrays["c"]
    stray = out.changed() & ~out.interior_mask()
    assert not stray.any(), f"the store wrote {int(stray.sum())} elements outside C"


SHAPES = [(33, 17, 40), (64, 64, 64), (1, 1, 1), (17, 33, 32)]  # M x N x K; the last one for even_k


@pytest.mark.parametrize("path", g.PATHS)
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_path_is_right_at_ragged_shapes(pipecheck, path, mnk):
    m, n, k = mnk
    if path == "even_k" and k % CFG["BLOCK_K"]:
        pytest.skip("even_k needs K % BLOCK_K == 0 (the launcher never picks it otherwise)")
    arrays = _guarded(m, k, n, pipecheck.device)
    taken = g.launch_gemm(g.gemm_kernel, arrays["a"].array, arrays["b"].array, arrays["c"].array, **CFG, path=path)
    assert taken == path
    _check_result(arrays)


@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_auto_picks_persistent_for_padded_aligned_inputs_and_is_right(pipecheck, mnk):
    m, n, k = mnk
    arrays = _guarded(m, k, n, pipecheck.device)
    a, b, c = (arrays[x].array for x in "abc")
    want = g.select_path(a, b, **CFG)[0]
    if pipecheck.device == "cpu":
        # Triton 3.9's interpreter runs descriptors (zero padding included): the sm_90 path is picked
        assert want == "persistent"
    assert g.launch_gemm(g.gemm_kernel, a, b, c, **CFG) == want
    _check_result(arrays)


@pytest.mark.parametrize("mnk, fallback", [((33, 17, 40), "masked"), ((20, 24, 32), "even_k")],
                         ids=["ragged_k", "even_k"])
def test_a_row_stride_off_16_bytes_falls_back_to_pointers(pipecheck, mnk, fallback):
    m, n, k = mnk
    arrays = _guarded(m, k, n, pipecheck.device)
    # A as a view with row stride k + 1 (not a multiple of 8 fp16 elements) in a NaN-filled buffer
    buf = torch.full((1024 + m * (k + 1) + 1024,), float("nan"), dtype=torch.float16, device=pipecheck.device)
    a = torch.as_strided(buf, (m, k), (k + 1, 1), 1024)
    a.copy_(arrays["a"].array)
    assert (a.stride(0) * a.element_size()) % 16
    path, why = g.select_path(a, arrays["b"].array, **CFG, interpreter=True, capability=(9, 0))
    assert path == fallback and "row stride" in why
    assert g.launch_gemm(g.gemm_kernel, a, arrays["b"].array, arrays["c"].array, **CFG) == fallback
    _check_result({"a": arrays["a"], "b": arrays["b"], "c": arrays["c"]})


# ----------------------------------------------------------------------------- path choice, no GPU


@dataclass
class FakeArray:
    """What the launcher reads from a CUDA tensor: shape, strides, element size, address, device."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    itemsize: int = 2
    address: int = 1 << 20
    is_cuda: bool = True
    device: str = "cuda:0"

    def stride(self, dim: int | None = None) -> Any:
        return self.strides if dim is None else self.strides[dim]

    def element_size(self) -> int:
        return self.itemsize

    def data_ptr(self) -> int:
        return self.address


def _ab(m: int = 4096, k: int = 4096, n: int = 4096, b_strides: tuple[int, int] | None = None,
        **a_kw: Any) -> tuple[FakeArray, FakeArray]:
    a = FakeArray((m, k), a_kw.pop("a_strides", (k, 1)), **a_kw)
    b = FakeArray((k, n), b_strides or (n, 1))
    return a, b


def _select(a: FakeArray, b: FakeArray, cap: tuple[int, int] | None = (9, 0), cfg: dict[str, int] | None = None,
            **kw: Any) -> tuple[str, str]:
    return g.select_path(a, b, **(cfg or g.gpu_config(cap)), capability=cap, interpreter=False, **kw)


def test_sm90_aligned_row_major_inputs_take_the_persistent_path():
    assert _select(*_ab())[0] == "persistent"
    # ragged M, N, K in padded rows: TMA zero-fills past the edges
    assert _select(*_ab(4097, 4095, 4093, a_strides=(4096 + 64, 1), b_strides=(4096, 1)))[0] == "persistent"
    assert _select(*_ab(4097, 4096, 4093))[0] == "even_k"  # B's 4093-wide dense rows: 8186 bytes


@pytest.mark.parametrize("a_kw, why", [
    ({"a_strides": (4100, 1)}, "row stride 4100 (8200 bytes)"),
    ({"a_strides": (1, 4096)}, "column stride 4096"),
    ({"address": (1 << 20) + 2}, "16-byte aligned"),
    ({"itemsize": 4, "a_strides": (4096, 1)}, "4-byte elements"),
])
def test_what_tma_cannot_take_falls_back_with_the_reason(a_kw, why):
    path, reason = _select(*_ab(**a_kw))
    assert path == "even_k" and why in reason  # K = 4096 is a multiple of BLOCK_K
    path, reason = _select(*_ab(k=4000, **{**a_kw, "a_strides": a_kw.get("a_strides", (4000, 1))}))
    assert path == "masked" and "not a multiple of BLOCK_K" in reason


def test_pre_hopper_or_cpu_tensors_take_pointer_paths():
    path, why = _select(*_ab(), cap=(8, 0))
    assert path == "even_k" and "sm_80" in why
    assert _select(*_ab(k=100), cap=(8, 6))[0] == "masked"
    path, why = _select(*_ab(is_cuda=False), cap=None)
    assert path == "even_k" and "not on a CUDA device" in why


def test_the_interpreter_counts_as_a_tma_target():
    a = torch.zeros((32, 64), dtype=torch.float16)
    b = torch.zeros((64, 48), dtype=torch.float16)
    assert g.select_path(a, b, **g.CPU_CONFIG, interpreter=True)[0] == "persistent"
    assert g.select_path(a, b, **g.CPU_CONFIG, interpreter=False)[0] == "even_k"


def test_mutant_kernels_always_run_masked_without_switches():
    from reference_kernels.mutants import triton as triton_mutants

    mutant = triton_mutants.load("gemm_unmasked_tail_load").kernel
    path, why = _select(*_ab(), kernel=mutant)
    assert path == "masked" and "no path switches" in why
    assert _select(*_ab(), kernel=g.gemm_kernel)[0] == "persistent"
    # another kernel with the switches takes the non-persistent descriptor path (persistent is the reference's)
    path, why = _select(*_ab(), kernel=_OtherSwitchKernel())
    assert path == "tma" and "not the reference kernel" in why


class _OtherSwitchKernel:
    """A kernel with gemm_kernel's path switches that is not gemm_kernel."""

    @staticmethod
    def fn(a_ptr, b_ptr, c_ptr, EVEN_K=False, WRAP_MN=False, USE_TMA=False):
        return None


class RecordingKernel:
    """Stands in for a @triton.jit kernel: same Python function (signature), records the launch."""

    def __init__(self, kernel: Any) -> None:
        self.fn = getattr(kernel, "fn", kernel)
        self.launches: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> None:
            self.launches.append((grid, args, kwargs))
        return run


def test_launcher_passes_the_chosen_switches_and_installs_the_allocator_for_tma(monkeypatch):
    allocs: list[bool] = []
    monkeypatch.setattr(g, "_ensure_allocator", lambda: allocs.append(True))
    monkeypatch.setattr(g, "device_capability", lambda device="cuda": (9, 0))
    monkeypatch.setattr(g, "_interpreting", lambda kernel=None: False)
    monkeypatch.setattr(g, "persistent_programs", lambda a, interpreter=None: 132)
    persistent = RecordingKernel(g.gemm_persistent_kernel)
    monkeypatch.setattr(g, "gemm_persistent_kernel", persistent)
    kernel = RecordingKernel(g.gemm_kernel)
    a, b = _ab(4096, 4096, 4096)
    c = FakeArray((4096, 4096), (4096, 1))
    cfg = g.gpu_config((9, 0))
    # auto: the persistent kernel, one program per SM, flattened loop, TMA store (C's rows are 8192 B)
    assert g.launch_gemm(kernel, a, b, c, **cfg) == "persistent"
    assert kernel.launches == [] and allocs == [True]
    grid, args, kwargs = persistent.launches[-1]
    assert grid == (132,) and args[3:6] == (4096, 4096, 4096)
    assert kwargs["NUM_PROGRAMS"] == 132 and kwargs["FLATTEN"] and kwargs["TMA_STORE"]
    assert kwargs["num_stages"] == 3 and kwargs["num_warps"] == 8 and kwargs["BLOCK_N"] == 256
    # a C whose rows end inside a 16-byte chunk is stored with masks, never through the descriptor
    a5, b5 = _ab(4096, 4096, 4095, b_strides=(4096, 1))
    g.launch_gemm(kernel, a5, b5, FakeArray((4096, 4095), (4096, 1)), **cfg, path="persistent")
    assert not persistent.launches[-1][2]["TMA_STORE"]
    assert g.launch_gemm(kernel, a, b, c, **cfg, path="tma") == "tma"
    grid, args, kwargs = kernel.launches[-1]
    assert grid == (32 * 16,) and args[3:6] == (4096, 4096, 4096)
    assert {k: kwargs[k] for k in g.PATH_SWITCHES["tma"]} == g.PATH_SWITCHES["tma"]
    assert kwargs["num_stages"] == 3 and kwargs["num_warps"] == 8 and allocs == [True] * 3
    assert g.launch_gemm(kernel, a, b, c, **cfg, path="even_k") == "even_k"
    assert {k: kernel.launches[-1][2][k] for k in g.PATH_SWITCHES["even_k"]} == g.PATH_SWITCHES["even_k"]
    assert allocs == [True] * 3


def test_launcher_gives_mutants_no_switches_and_refuses_impossible_paths(monkeypatch):
    from reference_kernels.mutants import triton as triton_mutants

    monkeypatch.setattr(g, "_interpreting", lambda kernel=None: False)
    monkeypatch.setattr(g, "device_capability", lambda device="cuda": (9, 0))
    mutant = RecordingKernel(triton_mutants.load("gemm_last_k_tile_dropped").kernel)
    a, b = _ab(64, 64, 64)
    c = FakeArray((64, 64), (64, 1))
    assert g.launch_gemm(mutant, a, b, c, **g.CPU_CONFIG) == "masked"
    assert not set(g.PATH_SWITCHES["masked"]) & set(mutant.launches[-1][2])
    with pytest.raises(ValueError, match="needs a kernel with the path switches"):
        g.launch_gemm(mutant, a, b, c, **g.CPU_CONFIG, path="even_k")
    kernel = RecordingKernel(g.gemm_kernel)
    with pytest.raises(ValueError, match="unknown gemm path"):
        g.launch_gemm(kernel, a, b, c, **g.CPU_CONFIG, path="fast")
    with pytest.raises(ValueError, match="K % BLOCK_K == 0"):
        a2, b2 = _ab(64, 40, 64)
        g.launch_gemm(kernel, a2, b2, c, **g.CPU_CONFIG, path="even_k")
    with pytest.raises(ValueError, match=r"path 'tma' is not possible here: .*row stride"):
        a3, b3 = _ab(64, 64, 64, a_strides=(65, 1))
        g.launch_gemm(kernel, a3, b3, c, **g.CPU_CONFIG, path="tma")
    with pytest.raises(ValueError, match=r"path 'persistent' is not possible here: .*row stride"):
        g.launch_gemm(kernel, a3, b3, c, **g.CPU_CONFIG, path="persistent")
    with pytest.raises(ValueError, match="needs a kernel with the path switches"):
        g.launch_gemm(mutant, a, b, c, **g.CPU_CONFIG, path="persistent")
    with pytest.raises(ValueError, match="cannot run another kernel"):
        g.launch_gemm(_OtherSwitchKernel(), a, b, c, **g.CPU_CONFIG, path="persistent")
    assert kernel.launches == []


def test_gpu_config_is_per_architecture():
    assert g.gpu_config((9, 0)) == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 3, "warps": 8,
                                    "GROUP_M": 8}
    for cap in ((8, 0), (8, 9), (10, 0), None):
        assert g.gpu_config(cap) == g.GPU_CONFIG == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "stages": 3,
                                                      "warps": 4, "GROUP_M": 8}
    g.gpu_config((9, 0))["stages"] = 99  # a copy: the table stays as it is
    assert g.GPU_CONFIGS[(9, 0)]["stages"] == 3


def test_spec_uses_the_arch_config_and_the_same_launcher(monkeypatch):
    monkeypatch.setattr(g, "device_capability", lambda device="cuda": (9, 0))
    spec = g.gemm_spec("cuda")
    assert spec.tiles == {"M": 128, "N": 256, "K": 64} and spec.stages == 3
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(g, "launch_gemm", lambda kernel, a, b, c, **kw: calls.append({"kernel": kernel, **kw}))
    spec.launch({"a": None, "b": None, "c": None}, {}, stages=2)
    assert calls == [{"kernel": g.gemm_kernel, **g.gpu_config((9, 0)), "stages": 2, "path": "auto"}]
    monkeypatch.setattr(g, "device_capability", lambda device="cuda": (8, 0))
    assert g.gemm_spec("cuda").tiles == {"M": 128, "N": 128, "K": 64}
    assert g.gemm_spec("cpu").tiles == {"M": 16, "N": 16, "K": 16}


# ----------------------------------------------------------------------------- sm_90 compiles, no GPU


@pytest.mark.parametrize("path", g.PATHS)
def test_each_path_compiles_for_sm90_with_the_sm90_config(path):
    """Ahead of time (no GPU), specialized as the JIT would for padded 16-byte-aligned arrays: the
    descriptor path must lower to TMA loads and the pointer paths to async copies, all feeding wgmma."""
    from pytest_pipecheck.inspect.triton_ir import analyze_triton, aot_compile

    cfg = g.gpu_config((9, 0))
    m, k, n = 65, 128, 65  # ragged M and N; K a multiple of BLOCK_K so even_k applies
    arrays = {
        "a": alloc_guarded("a", (m, k), "float16", role="input", values=torch.zeros(m, k), tiles=(128, 64)).array,
        "b": alloc_guarded("b", (k, n), "float16", role="input", values=torch.zeros(k, n), tiles=(64, 256)).array,
        "c": alloc_guarded("c", (m, n), "float16", role="output", tiles=(128, 256)).array,
    }
    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    assert g.tma_unavailable_reason(a, b, **cfg, interpreter=True) is None
    if path == "persistent":  # its own kernel: A, B strides, C strides, tiles, 132 programs, flattened
        args = [a, b, c, m, n, k, a.stride(0), b.stride(0), *c.stride(), cfg["BLOCK_M"], cfg["BLOCK_N"],
                cfg["BLOCK_K"], cfg["GROUP_M"], 132, True, False, False, False]
        assert list(g.gemm_persistent_kernel.arg_names[-5:]) == ["NUM_PROGRAMS", "FLATTEN", "TMA_STORE",
                                                                  "SPLIT_EPILOGUE", "WARP_SPECIALIZE"]
        kernel = g.gemm_persistent_kernel
    else:
        args = [a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["GROUP_M"], *g.PATH_SWITCHES[path].values()]
        assert list(g.PATH_SWITCHES[path]) == ["EVEN_K", "WRAP_MN", "USE_TMA"]  # the kernel's parameter order
        kernel = g.gemm_kernel
    compiled = aot_compile(kernel, args, arch="sm_90", num_warps=cfg["warps"], num_stages=cfg["stages"])
    f = analyze_triton(compiled)
    assert f.pipelined, f.pipeline_reason
    assert f.mma_ops.get("ttng.warp_group_dot", 0) >= 1
    assert f.shared is not None and f.shared <= 232448  # sm_90's opt-in shared memory per block
    if path in ("tma", "persistent"):
        assert f.tma_loads > 0 and f.async_copies == 0
    else:
        assert f.async_copies > 0 and f.tma_loads == 0
