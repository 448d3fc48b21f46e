"""Out-of-bounds reads and writes on the CPU tier (pytest_pipecheck/checks/bounds.py).

Every load and store Triton's interpreter performs during the coverage run is checked against the views
of the guarded arrays. A load whose value the kernel discards (a GEMM whose A load drops its row mask
reads rows past M; the masked store never writes the rows of C past M) reads pipecheck's guard band and
leaves no trace in any output: before the bounds check, coverage passed it. Each defect here is named by
tensor, element, tile and the kernel's source line; each correct twin passes at the same shape; lanes
whose mask is false are never judged.

The GEMMs are the Triton mutants' base (reference_kernels/mutants/triton/gemm_base.py) with one exact
edit, built by the mutants' engine. They are not registered mutants: on the GPU tier the same reads are
memcheck's to catch (its children allocate each tensor exactly), not coverage's.
"""

from __future__ import annotations

import functools
import os
import threading
from types import ModuleType

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402
from reference_kernels.mutants.engine import Edit, apply_edits, import_source  # noqa: E402
from reference_kernels.mutants.triton import BASE_SOURCE  # noqa: E402
from reference_kernels.triton.gemm import CPU_CONFIG, gemm_kernel_spec, make_spec  # noqa: E402

# M: 2 tiles of 16, the last partial (1 row); N: 2 tiles, the last partial (3 columns); K: 3 tiles, the last partial
SHAPE = Shape(M=17, N=19, K=40)
_A_LOAD = "a = tl.load(a_tile, mask=in_m & (rk[None, :] < k_left), other=0.0)"
_B_LOAD = "b = tl.load(b_tile, mask=(rk[:, None] < k_left) & in_n, other=0.0)"
EDITS = {
    "base": (),
    "a_rows": (Edit(_A_LOAD, "a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)  # BUG: no M mask"),),
    "b_cols": (Edit(_B_LOAD, "b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)  # BUG: no N mask"),),
}


@pytest.fixture(autouse=True)
def _cpu_tier(pipecheck):
    if pipecheck.device != "cpu":
        pytest.skip("the bounds check watches Triton's interpreter (the CPU tier); on a GPU memcheck does")


@functools.cache
def _gemm(name: str) -> tuple[ModuleType, str]:
    """(module, source) of the mutants' base GEMM with the edits of ``name`` (the base for "base")."""
    source = BASE_SOURCE.read_text()
    if EDITS[name]:
        source = apply_edits(source, EDITS[name], name=name)
    return import_source("triton", f"bounds_{name}", source), source


def _site(name: str, text: str) -> str:
    """``file:line`` of ``text`` in the generated module of ``name``."""
    module, source = _gemm(name)
    line = source[:source.index(text)].count("\n") + 1
    return f"{os.path.basename(module.__file__ or '')}:{line}"


def _spec(name: str) -> KernelSpec:
    return make_spec(f"bounds_{name}", _gemm(name)[0].kernel)


def _caught(pipecheck, spec, shape=SHAPE, **kw) -> str:
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure) as info:
        pipecheck.check_coverage(spec, shape, **kw)
    return str(info.value)


def _line(message: str, head: str, having: str = "") -> str:
    """The first line of ``message`` that starts with ``head`` and contains ``having``."""
    found = [ln.strip() for ln in message.splitlines() if ln.strip().startswith(head) and having in ln]
    assert found, f"no line starting {head!r} with {having!r} in:\n{message}"
    return found[0]


def _clean(pipecheck, spec, shape=SHAPE, **kw):
    result = pipecheck.check_coverage(spec, shape, **kw)
    assert result.verdict is Verdict.PASS
    found = result.details["bounds"]
    assert found["checked"] is True and found["accesses"] > 0 and found["findings"] == [], found
    return result


def test_a_load_without_row_mask_reads_past_m(pipecheck):
    message = _caught(pipecheck, _spec("a_rows"))
    # rows 17..31 of the last M tile, 40 columns each (K stays masked), once per N tile: 15 x 40 x 2
    want = (f"input 'a': 1200 reads past its view (M 17..31 of 17, in the guard band after it), first at a[17, 0] "
            f"(M tile 1 of 2 (last, partial 1/16), K tile 0 of 3), at {_site('a_rows', 'mask=rk[None, :] < k_left')}")
    assert want in message, message
    assert "bounds_a_rows at M17-N19-K40: coverage failed" in message
    # the value read was discarded: nothing else is wrong with the outputs
    assert "never written" not in message and "exceed the tolerance" not in message


def test_b_load_without_column_mask_reads_its_row_padding(pipecheck):
    message = _caught(pipecheck, _spec("b_cols"))
    # columns 19..31 of the last N tile, 40 rows each, once per M tile: 13 x 40 x 2
    want = (f"input 'b': 1040 reads past the end of its rows (N 19..31 of 19, in its row padding), first at b[0, 19] "
            f"(K tile 0 of 3, N tile 1 of 2 (last, partial 3/16)), at {_site('b_cols', 'mask=rk[:, None] < k_left')}")
    assert want in message, message


def test_the_correct_gemm_passes_at_the_same_shape(pipecheck):
    _clean(pipecheck, _spec("base"))


def _strided_launch(kernel, *, row_stride_a=None, col_stride_a=None):
    """A launcher of the base GEMM that takes A's strides from a wrong assumption instead of the tensor."""
    def launch(arrays, dims):
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        M, K = a.shape
        N = b.shape[1]
        sam = a.shape[1] if row_stride_a == "contiguous" else a.stride(0)
        sak = 1 if col_stride_a == "unit" else a.stride(1)
        grid = (triton.cdiv(M, CPU_CONFIG["BLOCK_M"]) * triton.cdiv(N, CPU_CONFIG["BLOCK_N"]),)
        kernel[grid](a, b, c, M, N, K, sam, sak, b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     BLOCK_M=CPU_CONFIG["BLOCK_M"], BLOCK_N=CPU_CONFIG["BLOCK_N"], BLOCK_K=CPU_CONFIG["BLOCK_K"],
                     GROUP_M=CPU_CONFIG["GROUP_M"])
    return launch


def _strided_spec(name: str, **assume) -> KernelSpec:
    return gemm_kernel_spec(name, _strided_launch(_gemm("base")[0].kernel, **assume), CPU_CONFIG, dtype="float16",
                            description="the base GEMM behind a launcher with a stride assumption")


def test_launcher_assuming_contiguous_rows_reads_the_row_padding(pipecheck):
    spec = _strided_spec("contiguous_rows", row_stride_a="contiguous")
    message = _caught(pipecheck, spec)
    # rows K = 40 apart instead of 64: row 1's first 24 elements are row 0's padding (columns 40..63), ...
    line = _line(message, "input 'a': ")
    assert "reads past the end of its rows (K 40..63 of 40, in its row padding), first at a[0, 40] " in line, line
    assert line.endswith(f"at {_site('base', _A_LOAD)}"), line
    # the twin: the same launcher on an A whose rows really are contiguous
    _clean(pipecheck, spec, layout={"a": "contiguous"})


def test_launcher_assuming_unit_column_stride_reads_the_gaps_of_a_sliced_layout(pipecheck):
    spec = _strided_spec("unit_columns", col_stride_a="unit")
    message = _caught(pipecheck, spec, layout={"a": "sliced"})
    line = _line(message, "input 'a': ")
    assert "in the gaps of its sliced layout" in line and "first at a[0, 0] + 1 (between two elements)" in line, line
    _clean(pipecheck, spec, layout={"a": "padded"})


def test_unmasked_store_is_named_with_its_line(pipecheck):
    from reference_kernels.mutants import triton as triton_mutants

    built = triton_mutants.load("gemm_unmasked_tail_store")
    message = _caught(pipecheck, built.spec(pipecheck.device))
    source = built.module.__file__ or ""
    text = open(source).read()
    line = text[:text.index("c)  # BUG: no mask")].count("\n") + 1
    store = _line(message, "output 'c': ", "writes")
    # rows past M land in the guard band after C, columns past N of the rows before in its row padding
    assert "writes outside its view (M 17..31 of 17, N 19..31 of 19; " in store, store
    assert "in the guard band after it" in store and "in its row padding" in store
    assert store.endswith(f"at {os.path.basename(source)}:{line}"), store
    assert "element(s) written outside 'c'" in message  # the canary says the same from the memory's side


# ----------------------------------------------------------------------------- masks


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, WILD: tl.constexpr, MASK_LOAD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    if WILD:  # the lanes past n point a billion elements away: their mask is false, so they access nothing
        offs = tl.where(live, offs, offs + 1000000000)
    if MASK_LOAD:
        v = tl.load(x_ptr + offs, mask=live, other=0.0)
    else:
        v = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, v, mask=live)


def _copy_spec(wild: bool, mask_load: bool = True) -> KernelSpec:
    def launch(arrays, dims):
        n = dims["N"]
        _copy_kernel[(triton.cdiv(n, 16),)](arrays["x"], arrays["y"], n, BLOCK=16, WILD=wild, MASK_LOAD=mask_load)

    return KernelSpec(f"copy_wild{int(wild)}_mask{int(mask_load)}", launch,
                      lambda arrays, dims: {"y": arrays["x"].double()},
                      [Tensor("x", ("N",)), Tensor("y", ("N",), role="output")], {"N": 16}, "N")


def test_masked_off_lanes_with_wild_pointers_are_not_flagged(pipecheck):
    shape = Shape(N=37)
    result = _clean(pipecheck, _copy_spec(wild=True), shape)
    # only live lanes count: 37 loaded and 37 stored, none of the 11 masked-off lanes of the last block
    assert result.details["bounds"]["lanes"] == 2 * 37
    # the twin whose load drops its mask reads x's guard band on those lanes, and is flagged
    message = _caught(pipecheck, _copy_spec(wild=False, mask_load=False), shape)
    assert "input 'x': 11 reads past its view (N 37..47 of 37, in the guard band after it), first at x[37]" in message


# ----------------------------------------------------------------------------- the wrapper form


@triton.jit
def _double_kernel(x_ptr, y_ptr, M, N, sxm, sym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   ROW_MASK: tl.constexpr):
    """y += 2 x over one block of rows."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    in_n = rn[None, :] < N
    mask = (rm[:, None] < M) & in_n
    load_mask = mask if ROW_MASK else in_n
    x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :], mask=load_mask, other=0.0)
    y = tl.load(y_ptr + rm[:, None] * sym + rn[None, :], mask=load_mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :], y + 2 * x, mask=mask)


def _double(x, row_mask=True):
    y = torch.zeros_like(x)
    M, N = x.shape
    _double_kernel[(triton.cdiv(M, 8),)](x, y, M, N, x.stride(0), y.stride(0), BLOCK_M=8, BLOCK_N=16,
                                         ROW_MASK=row_mask)
    return y


def _double_spec(row_mask: bool) -> KernelSpec:
    return KernelSpec(f"double_rowmask{int(row_mask)}", call=lambda x: _double(x, row_mask),
                      reference=lambda arrays, dims: {"y": 2 * arrays["x"].double()},
                      tensors=[Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")],
                      tiles={"M": 8, "N": 16}, loop_dim="N")


def test_wrapper_form_names_the_input_and_the_output_it_allocated(pipecheck):
    shape = Shape(M=9, N=13)
    message = _caught(pipecheck, _double_spec(row_mask=False), shape)
    # rows 9..15 of the last M block, 13 columns: the input, and the output the call allocated (named once
    # the call returned it)
    assert "input 'x': 91 reads past its view (M 9..15 of 9, in the guard band after it), first at x[9, 0]" in message
    assert "output 'y': 91 reads past its view (M 9..15 of 9, in the guard band after it), first at y[9, 0]" in message
    _clean(pipecheck, _double_spec(row_mask=True), shape)


# ----------------------------------------------------------------------------- installing and restoring


def _builder_methods():
    from triton.runtime.interpreter import InterpreterBuilder

    from pytest_pipecheck.checks import bounds

    return {name: InterpreterBuilder.__dict__.get(name) for name in bounds._METHODS}


def test_the_wrappers_are_installed_only_during_a_launch(pipecheck):
    from pytest_pipecheck.checks import bounds

    before = _builder_methods()
    seen = []

    def launch(arrays, dims):
        seen.append(bounds.installed())
        _spec("base").launch(arrays, dims)

    spec = gemm_kernel_spec("bounds_installed", launch, CPU_CONFIG, dtype="float16", description="")
    pipecheck.check_coverage(spec, SHAPE)
    assert seen == [True] and not bounds.installed() and _builder_methods() == before

    def boom(arrays, dims):
        raise RuntimeError("launcher failed")

    broken = gemm_kernel_spec("bounds_raises", boom, CPU_CONFIG, dtype="float16", description="")
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match="launcher failed"):
        pipecheck.check_coverage(broken, SHAPE)
    assert not bounds.installed() and _builder_methods() == before


def test_a_watch_judges_only_its_own_thread(pipecheck):
    from pytest_pipecheck.checks import arrays, bounds

    spec = _copy_spec(wild=False, mask_load=False)
    n = 37

    def run(x, y):
        _copy_kernel[(triton.cdiv(n, 16),)](x, y, n, BLOCK=16, WILD=False, MASK_LOAD=False)

    with bounds.watch(pipecheck, spec) as w:
        x = arrays.alloc_guarded("x", (n,), "float16", role="input", values=torch.ones(n))
        y = arrays.alloc_guarded("y", (n,), "float16", role="output")
        other = threading.Thread(target=run, args=(x.array, y.array))
        other.start()
        other.join()
        assert w.findings == []  # the same kernel on another thread: not this watch's launch
        run(x.array, y.array)
        assert [(f.region.g.name, f.kind, f.count) for f in w.findings] == [("x", "read", 11)]
    assert not bounds.installed()


def test_triton_3_6_call_forms_are_checked():
    """Triton 3.6's builder passes (ptrs, mask, other, cache_modifier, eviction_policy, is_volatile) to
    create_masked_load, and its block pointers hand over their mask as a bare NumPy array; 3.9 passes
    (ptrs, mask, other, cache_policy, is_volatile) and TensorHandle masks. Both reach the check."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle

    from pytest_pipecheck.checks import arrays, bounds

    g = arrays.alloc_guarded("x", (4,), "float32", role="input", values=torch.arange(4.0))
    w = bounds.Watch(None)
    w.register(g)
    start = g.array.data_ptr()
    ptrs = TensorHandle(np.array([start + 4 * i for i in range(6)], dtype=np.uint64), tl.pointer_type(tl.float32))
    calls = []

    def original(self, *args, **kwargs):
        calls.append(len(args))
        return "loaded"

    load = bounds._wrapped("create_masked_load", original)
    bounds._LOCAL.watch = w
    try:
        mask36 = np.array([True] * 5 + [False])  # a block pointer's mask in 3.6: no TensorHandle
        mask39 = TensorHandle(np.array([True] * 4 + [False, True]), tl.int1)
        # 3.6: mask, other, cache_modifier, eviction_policy, is_volatile; 3.9: mask, other, cache_policy, is_volatile
        for rest in ((mask36, None, None, None, False), (mask39, None, None, False)):
            assert load(None, ptrs, *rest) == "loaded"
    finally:
        bounds._LOCAL.watch = None
    assert calls == [6, 5]
    [finding] = w.findings
    assert finding.kind == "read" and finding.count == 2 and finding.low == {0: 4} and finding.high == {0: 5}
