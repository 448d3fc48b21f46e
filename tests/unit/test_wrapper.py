"""The wrapper form (``KernelSpec(call=...)``): the user's entry point as shipped, allocations intercepted.

The Triton kernels run in the interpreter on the CPU tier (the plugin sets TRITON_INTERPRET there).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck.checks import correctness, coverage, determinism, tile_probe  # noqa: E402
from pytest_pipecheck.checks.wrapper import PoisonAllocations  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

SHAPE = Shape(M=9, N=40)  # M: 2 tiles of 8 (the last partial); N: 3 tiles of 16 (the last partial)
BLOCK_M, BLOCK_N = 8, 16


@triton.jit
def scale_kernel(x_ptr, w_ptr, y_ptr, M, N, sxm, sxn, sym, syn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SKIP_LAST: tl.constexpr, UNMASKED: tl.constexpr):
    """y[m, n] = x[m, n] * w[n]; each program walks its rows' N tiles."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tiles = tl.cdiv(N, BLOCK_N) - (1 if SKIP_LAST else 0)
    for t in range(0, tiles):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
        w = tl.load(w_ptr + rn, mask=rn < N, other=0.0)
        y = (x.to(tl.float32) * w[None, :].to(tl.float32)).to(y_ptr.dtype.element_ty)
        if UNMASKED:
            # the bug: the store ignores the mask, so the last tiles write past the end of y
            tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, y)
        else:
            tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, y, mask=mask)


def scale(x, w, skip_last=False, unmasked=False):
    """The wrapper as a library ships it: checks, allocates its output, launches, returns."""
    assert x.is_contiguous(), "scale() needs a contiguous x"
    M, N = x.shape
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(M, BLOCK_M),)](x, w, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                             BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, SKIP_LAST=skip_last,
                                             UNMASKED=unmasked)
    return y


def reference(arrays, dims):
    return {"y": arrays["x"].double() * arrays["w"].double()[None, :]}


def _spec(call, name="scale", **kw):
    return KernelSpec(name, call=call, reference=reference,
                      tensors=[Tensor("x", ("M", "N")), Tensor("w", ("N",)), Tensor("y", ("M", "N"), role="output")],
                      tiles={"M": BLOCK_M, "N": BLOCK_N}, loop_dim="N", **kw)


def _failure(check, pipecheck, spec):
    """The message of the PipecheckFailure ``check`` raises for ``spec`` at SHAPE."""
    with pytest.raises(PipecheckFailure) as info:
        check(pipecheck, spec, SHAPE)
    return str(info.value)


def test_correct_wrapper_passes_every_check(pipecheck):
    results = correctness.check_all(pipecheck, _spec(scale), SHAPE)
    assert [r.check for r in results] == ["coverage", "tile_probe", "determinism"]
    assert all(r.verdict is Verdict.PASS for r in results), results
    allocated = results[0].details["outputs"]["y"]["allocated"]
    assert allocated.startswith("torch.empty_like at ") and "test_wrapper.py" in allocated and "poisoned" in allocated
    assert results[0].details["layout"] == "contiguous"


@pytest.mark.pipecheck(expect_failures=True)
def test_kernel_skipping_the_last_tile_leaves_poison_named_by_output_and_tile(pipecheck):
    spec = _spec(lambda x, w: scale(x, w, skip_last=True), "scale_skip_last")
    msg = _failure(coverage.check_coverage, pipecheck, spec)
    # 9 rows x the last 8 columns were never written
    assert "output 'y': 72 of 360 (20.00%) elements never written (still poison); first at [0, 32] " \
           "(M tile 0 of 2, N tile 2 of 3 (last, partial 8/16))" in msg, msg
    with pytest.raises(PipecheckFailure, match=r"N tile 2 of 3, the last \(epilogue, partial 8/16\)"):
        tile_probe.check_tile_probe(pipecheck, spec, SHAPE)


@pytest.mark.pipecheck(expect_failures=True)
def test_store_past_the_end_of_the_wrappers_allocation_trips_its_guard_band(pipecheck):
    spec = _spec(lambda x, w: scale(x, w, unmasked=True), "scale_unmasked")
    msg = _failure(coverage.check_coverage, pipecheck, spec)
    assert "written outside 'y'" in msg and "past its end" in msg, msg


@triton.jit
def fill_kernel(out_ptr, value):
    tl.store(out_ptr + tl.program_id(0), value)


def scale_with_scratch(x, w):
    """A wrapper whose scratch buffer is one element short of its grid (an off-by-one in the wrapper)."""
    y = scale(x, w)
    programs = triton.cdiv(x.shape[0], BLOCK_M)
    scratch = torch.empty(programs - 1 if programs > 1 else 1, dtype=torch.float32, device=x.device)
    fill_kernel[(programs,)](scratch, 1.0)
    return y


@pytest.mark.pipecheck(expect_failures=True)
def test_store_past_the_end_of_a_scratch_allocation_names_the_allocation(pipecheck):
    msg = _failure(determinism.check_determinism, pipecheck, _spec(scale_with_scratch, "scratch"))
    assert "the kernel wrote outside an allocation the call made" in msg
    assert "1 element(s) written outside 'allocation #2 (torch.empty of float32 (1,) at " in msg
    assert "test_wrapper.py" in msg and "past its end (the first immediately after its last element)" in msg, msg
    assert pipecheck.results[-1].check == "determinism" and pipecheck.results[-1].verdict is Verdict.FAIL


def test_wrapper_asserting_contiguity_passes_with_the_contiguous_default(pipecheck):
    spec = _spec(scale)
    # the base layout is contiguous: the inputs the wrapper sees are contiguous views inside guards
    seen = []

    def spy(x, w):
        seen.append((x.is_contiguous(), w.is_contiguous(), x.storage_offset() > 0))
        return scale(x, w)

    r = coverage.check_coverage(pipecheck, _spec(spy), SHAPE)
    assert r.verdict is Verdict.PASS and seen == [(True, True, True)]
    assert coverage.check_coverage(pipecheck, spec, SHAPE).verdict is Verdict.PASS


@pytest.mark.pipecheck(expect_failures=True)
def test_a_padded_input_reaches_the_wrapper_and_its_assertion_fails(pipecheck):
    with pytest.raises(PipecheckFailure, match=r"the call raised during the coverage run: AssertionError: scale\(\) "
                                               r"needs a contiguous x"):
        coverage.check_coverage(pipecheck, _spec(scale), SHAPE, layout={"x": "padded"})


# ----------------------------------------------------------------------------- pure torch wrappers (fast)

TOY = Shape(M=5, N=6)


def _toy(call, returns=None, outputs=("y",), **kw):
    def ref(arrays, dims):
        return {name: arrays["x"].double() * (i + 2) for i, name in enumerate(outputs)}

    return KernelSpec("toy", call=call, reference=ref, returns=returns,
                      tensors=[Tensor("x", ("M", "N"), "float32"),
                               *(Tensor(o, ("M", "N"), "float32", role="output") for o in outputs)],
                      tiles={"M": 4, "N": 4}, loop_dim="N", **kw)


def test_tuple_and_dict_returns_are_matched_by_name(pipecheck):
    def two(x):
        a, b = torch.empty_like(x), torch.empty(x.shape, dtype=x.dtype)
        a.copy_(x * 2)
        b.copy_(x * 3)
        return b, a

    assert coverage.check_coverage(pipecheck, _toy(two, returns=("z", "y"), outputs=("y", "z")), TOY).verdict \
        is Verdict.PASS
    r = coverage.check_coverage(pipecheck, _toy(lambda x: {"y": x * 2}), TOY)
    # a computed result is torch's own output: compared, and said not to be poisoned
    assert r.verdict is Verdict.PASS and r.details["outputs"]["y"]["allocated"].startswith("not intercepted")
    assert r.summary.endswith("; not poisoned: y")


@pytest.mark.pipecheck(expect_failures=True)
def test_unwritten_rows_of_a_new_empty_output_are_found(pipecheck):
    def half(x):
        y = x.new_empty(x.shape)
        y[:3] = x[:3] * 2
        return y

    with pytest.raises(PipecheckFailure, match=r"output 'y': 12 of 30 \(40.00%\) elements never written"):
        coverage.check_coverage(pipecheck, _toy(half), TOY)


def test_zeros_are_not_poisoned_but_guarded(pipecheck):
    with PoisonAllocations(guard_tile=4) as mode:
        z = torch.zeros(3, 4)
        e = torch.empty(3, 4)
        f = torch.full((2,), 7.0)
    assert torch.equal(z, torch.zeros(3, 4)) and torch.equal(f, torch.full((2,), 7.0))
    assert torch.isnan(e).all() and z.is_contiguous() and e.is_contiguous()
    assert [(a.op, a.poisoned) for a in mode.allocations] == [("torch.zeros", False), ("torch.empty", True),
                                                              ("torch.full", False)]
    assert all(z.untyped_storage().nbytes() > 12 * 4 for z in (z, e))  # the view sits inside guard bands


def test_every_dtype_and_variant_gets_its_poison_and_guard(pipecheck):
    from pytest_pipecheck.checks import arrays

    for tdtype, name in ((torch.float16, "float16"), (torch.bfloat16, "bfloat16"), (torch.float32, "float32"),
                         (torch.int8, "int8"), (torch.uint8, "uint8"), (torch.int32, "int32")):
        for variant in (0, 1):
            with PoisonAllocations(variant, guard_tile=2) as mode:
                e = torch.empty(3, 5, dtype=tdtype)
            g = mode.allocations[0].guarded
            assert g.dtype == name and g.guard_value == arrays._output_guard_value(name)
            assert (arrays.bits(e, name) == arrays.poison_bits(name, variant)).all(), (name, variant)
            outside = ~g.interior_mask()
            assert outside.any() and not g.changed().any()
            assert (arrays.bits(g.buffer, name)[outside] == arrays.bits(
                torch.tensor([g.guard_value], dtype=tdtype), name)[0]).all()


@pytest.mark.parametrize("make", [
    lambda dt: torch.empty(7, dtype=dt),
    lambda dt: torch.empty_strided((3, 4), (9, 2), dtype=dt),  # gaps inside the span keep the guard
    lambda dt: torch.empty_strided((4, 3), (1, 5), dtype=dt),  # column-major
    lambda dt: torch.empty_strided((2, 3), (0, 1), dtype=dt),  # a broadcast row
    lambda dt: torch.empty(2, 3, 4, dtype=dt).new_empty((5, 1)),
], ids=["flat", "gapped", "column-major", "stride-0", "new_empty"])
@pytest.mark.parametrize("tdtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int16,
                                    torch.uint8])
def test_the_snapshot_computed_on_the_host_is_what_the_buffer_holds(make, tdtype):
    """A poisoned placement's snapshot is computed, not read back (a read from a GPU synchronizes): it must
    equal the buffer's bits exactly, or every later change map is wrong."""
    from pytest_pipecheck.checks import arrays

    for variant in (0, 1):
        with PoisonAllocations(variant, guard_tile=3) as mode:
            make(tdtype)
        g = mode.allocations[-1].guarded
        read = arrays.bits(g.buffer, g.dtype)
        assert read.dtype == g._initial_bits.dtype and read.shape == g._initial_bits.shape
        assert (read == g._initial_bits).all(), (tdtype, variant, read, g._initial_bits)
        assert (read != arrays.bits(torch.tensor([g.guard_value], dtype=tdtype), g.dtype)[0]).any()


def test_a_bad_poison_variant_is_refused():
    with pytest.raises(ValueError, match="poison variant 2 must be 0 or 1"):
        PoisonAllocations(2)


def test_the_tensor_handed_back_is_not_detached_again(pipecheck, monkeypatch):
    """The record keeps its own view of the buffer, so torch does not detach the returned tensor (one
    more op dispatched through the mode per allocation); the returned tensor still shares the buffer."""
    from pytest_pipecheck.checks import wrapper

    x = torch.randn(4, 6)
    PoisonAllocations()  # builds the op table the mode looks ops up in
    seen = []

    def lookup(func):
        seen.append(str(func))
        return wrapper._OPS[func] if func in wrapper._OPS else None

    monkeypatch.setattr(wrapper, "_OPS_GET", lookup)
    with PoisonAllocations(guard_tile=2) as mode:
        y = torch.empty_like(x)
    assert seen == ["aten.empty_like.default"]
    g = mode.allocations[0].guarded
    assert g.array is not y and y.untyped_storage().data_ptr() == g.buffer.untyped_storage().data_ptr()
    assert y.storage_offset() == g.offset and y.stride() == g.strides and torch.isnan(y).all()


def test_nothing_of_a_finished_call_waits_for_the_garbage_collector(pipecheck):
    """A reference cycle between the mode and its owner kept every allocation of a call alive until the
    collector ran (and made it run more often): reference counting alone must free them."""
    import gc
    import weakref

    def call(x):
        tmp = torch.empty(5)
        tmp.fill_(1.0)
        return x * tmp.sum()

    x = torch.randn(3, 4)
    gc.collect()
    gc.disable()
    try:
        mode = PoisonAllocations(guard_tile=2)
        with mode:
            y = call(x)
        refs = [weakref.ref(mode), weakref.ref(mode.allocations[0].guarded.buffer)]
        del mode, y
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_poison_allocations_refuse_a_second_entry_and_stop_at_exit(pipecheck):
    mode = PoisonAllocations(1, guard_tile=2)
    with mode:
        a = torch.empty(3, dtype=torch.int32)
        with pytest.raises(RuntimeError, match="already active"):
            mode.__enter__()
        b = torch.empty(2)
    from pytest_pipecheck.checks import arrays

    assert [x.guarded.shape for x in mode.allocations] == [(3,), (2,)]
    assert (arrays.bits(a, "int32") == arrays.poison_bits("int32", 1)).all() and torch.isnan(b).all()
    with PoisonAllocations(0, guard_tile=2) as again:  # the next one (the mode reused) records its own
        c = torch.empty(4)
    assert [x.guarded.shape for x in again.allocations] == [(4,)] and len(mode.allocations) == 2
    assert torch.isnan(c).all()
    d = torch.empty(2)  # nothing is intercepted once they have exited
    assert d.untyped_storage().nbytes() == 2 * 4 and len(again.allocations) == 1


@pytest.mark.pipecheck(expect_failures=True)
def test_write_past_a_zeros_allocation_trips_its_guard(pipecheck):
    def overrun(x):
        acc = torch.zeros(4, dtype=torch.float32)
        torch.as_strided(acc, (5,), (1,)).fill_(1.0)  # one past the end
        return x * 2

    with pytest.raises(PipecheckFailure, match=r"allocation #1 \(torch.zeros of float32 \(4,\) at .*test_wrapper.py"):
        coverage.check_coverage(pipecheck, _toy(overrun), TOY)


@pytest.mark.pipecheck(expect_failures=True)
def test_wrong_returned_shape_or_dtype_fails_naming_the_output(pipecheck):
    with pytest.raises(PipecheckFailure, match=r"the call raised during the coverage run: ReturnMismatch: the call "
                                               r"returned 'y' with shape \(4, 6\), but the spec declares \(5, 6\)"):
        coverage.check_coverage(pipecheck, _toy(lambda x: (x * 2)[:4]), TOY)
    with pytest.raises(PipecheckFailure, match=r"returned 'y' as float64, but the spec declares float32"):
        coverage.check_coverage(pipecheck, _toy(lambda x: x.double() * 2), TOY)
    with pytest.raises(PipecheckFailure, match=r"returned 2 value\(s\), but returns= names 1 \(y\)"):
        coverage.check_coverage(pipecheck, _toy(lambda x: (x * 2, x)), TOY)


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"launch": lambda a, d: None}, "gives both launch= and call="),
    ({"returns": ("y", "q")}, "returns names 'q', which is not an output"),
    ({"returns": ("y", "y")}, "returns names 'y' twice"),
    ({"backend": "cupy"}, "call= needs backend='torch'"),
])
def test_bad_wrapper_specs_name_the_spec(kw, fragment):
    with pytest.raises(PipecheckError, match="spec 'toy'") as info:
        _toy(lambda x: x, **kw)
    assert fragment in str(info.value)


def test_a_spec_needs_launch_or_call():
    with pytest.raises(PipecheckError, match=r"spec 'k': needs launch= .* or call="):
        KernelSpec("k", reference=reference, tensors=[Tensor("x", ("N",)), Tensor("y", ("N",), role="output")],
                   tiles={"N": 4}, loop_dim="N")


def test_allocations_of_the_triton_runtime_are_passed_through(pipecheck):
    x = torch.randn(9, 40, dtype=torch.float16, device=pipecheck.device)
    w = torch.randn(40, dtype=torch.float16, device=pipecheck.device)
    with PoisonAllocations(guard_tile=16) as mode:
        y = scale(x, w)
    assert [a.op for a in mode.allocations] == ["torch.empty_like"]
    if not pipecheck.has_gpu:
        # Triton's interpreter (the CPU tier) copies every argument with torch; a compiled launch does not
        assert mode.passed.get("made by the Triton runtime", 0) > 0, mode.passed
    assert torch.allclose(y.float(), x.float() * w.float()[None, :], atol=1e-2)


# ----------------------------------------------------------------------------- with value patterns and layouts


@triton.jit
def rowmax_kernel(x_ptr, m_ptr, N, sxm, sxn, BLOCK_N: tl.constexpr, ZERO_PAD: tl.constexpr):
    """m[row] = max over n of x[row, n], one program per row walking the N tiles."""
    row = tl.program_id(0)
    acc = tl.full((BLOCK_N,), float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        rn = start + tl.arange(0, BLOCK_N)
        if ZERO_PAD:
            # the bug: masked lanes read 0, which wins the max when a whole row is negative
            x = tl.load(x_ptr + row * sxm + rn * sxn, mask=rn < N, other=0.0)
        else:
            x = tl.load(x_ptr + row * sxm + rn * sxn, mask=rn < N, other=float("-inf"))
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(m_ptr + row, tl.max(acc, axis=0))


def rowmax(x, zero_pad=False):
    M, N = x.shape
    m = torch.empty((M,), dtype=torch.float32, device=x.device)
    rowmax_kernel[(M,)](x, m, N, x.stride(0), x.stride(1), BLOCK_N=16, ZERO_PAD=zero_pad)
    return m


ROWS = Shape(M=3, N=20)  # N: 2 tiles of 16, the last partial (4 of 16): masked lanes exist


def _rowmax_spec(call, name="rowmax"):
    return KernelSpec(name, call=call, reference=lambda a, d: {"m": a["x"].double().amax(dim=1)},
                      tensors=[Tensor("x", ("M", "N"), layout=("contiguous", "sliced")),
                               Tensor("m", ("M",), "float32", role="output")],
                      tiles={"M": 1, "N": 16}, loop_dim="N")


def test_wrapper_form_runs_under_a_value_pattern_and_a_layout_variant(pipecheck):
    seen = []

    def spy(x):
        seen.append((x.stride(), bool((x < 0).all())))
        return rowmax(x)

    spec = _rowmax_spec(spy)
    for check in (coverage.check_coverage, determinism.check_determinism):
        r = check(pipecheck, spec, ROWS, values="negative", layout="x-sliced")
        assert r.verdict is Verdict.PASS, r
        assert r.details["values"] == "negative" and r.details["layout"] == "x-sliced", r.details
    # the call got the pattern's values (all negative) in the variant layout (every other element of a row)
    assert seen and all(stride[1] == 2 and negative for stride, negative in seen), seen
    assert "poisoned" in pipecheck.results[0].details["outputs"]["m"]["allocated"]


@pytest.mark.pipecheck(expect_failures=True)
def test_wrapper_form_masked_max_bug_is_caught_by_the_negative_pattern_in_a_variant_layout(pipecheck):
    spec = _rowmax_spec(lambda x: rowmax(x, zero_pad=True), "rowmax_pad0")
    assert coverage.check_coverage(pipecheck, spec, ROWS, layout="x-sliced").verdict is Verdict.PASS  # normal hides it
    with pytest.raises(PipecheckFailure, match=r"rowmax_pad0 at M3-N20 values=negative \(layout x-sliced\): "
                                               r"coverage failed"):
        coverage.check_coverage(pipecheck, spec, ROWS, values="negative", layout="x-sliced")


def test_sanitizer_launch_scope_calls_the_wrapper_once_under_the_pattern_and_layout(pipecheck):
    from pytest_pipecheck import children
    from pytest_pipecheck.fixture import Pipecheck

    pipecheck = Pipecheck(pipecheck.nodeid, pipecheck.config, pipecheck.tier, pipecheck.run_seed,
                          role=children.sanitizer("racecheck", "launch"))
    seen = []

    def spy(x):
        seen.append((x.stride(), bool((x < 0).all())))
        return rowmax(x)

    results = correctness.check_all(pipecheck, _rowmax_spec(spy), ROWS, values="negative", layout="x-sliced")
    assert [r.verdict for r in results] == [Verdict.SKIP] * 3, results
    assert all(r.details["layout"] == "x-sliced" for r in results)
    # one launch for the three checks, as the coverage run makes it: negative values, x sliced
    assert len(seen) == 1 and seen[0][0][1] == 2 and seen[0][1], seen


@pytest.mark.pipecheck(expect_failures=True)
def test_inout_tensor_of_the_wrapper_form_is_updated_in_place_and_compared(pipecheck):
    def ref(arrays, dims):
        return {"x": arrays["x"].double() * 2}

    def spec(call, **kw):
        return KernelSpec("scale_", call=call, reference=ref,
                          tensors=[Tensor("x", ("M", "N"), "float32", role="inout")],
                          tiles={"M": 4, "N": 4}, loop_dim="N", **kw)

    def in_place(x):
        x.mul_(2)  # returns nothing

    r = coverage.check_coverage(pipecheck, spec(in_place), TOY)
    assert r.verdict is Verdict.PASS and r.details["outputs"]["x"]["unwritten_not_checked"] == "inout: updated in place"
    with pytest.raises(PipecheckFailure, match=r"inout 'x': (2\d|30) of 30 .* exceed the tolerance"):
        coverage.check_coverage(pipecheck, spec(lambda x: None), TOY)  # forgot the update
    assert coverage.check_coverage(pipecheck, spec(lambda x: x.mul_(2), returns=("x",)), TOY).verdict is Verdict.PASS
    with pytest.raises(PipecheckFailure, match=r"returned a new Tensor for inout 'x'"):
        coverage.check_coverage(pipecheck, spec(lambda x: x * 2, returns=("x",)), TOY)


def test_wrapper_form_refuses_a_zeroed_output():
    with pytest.raises(PipecheckError, match=r"spec 'toy': output 'y' has init='zeros', but the wrapper form"):
        KernelSpec("toy", call=lambda x: x, reference=reference,
                   tensors=[Tensor("x", ("N",)), Tensor("y", ("N",), role="output", init="zeros")],
                   tiles={"N": 4}, loop_dim="N")
