"""Per-tensor layouts: contiguous, padded (different per tensor), transposed, sliced, offset."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import correctness, coverage  # noqa: E402
from pytest_pipecheck.checks.arrays import alloc_guarded  # noqa: E402
from pytest_pipecheck.model import layouts  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

SHAPE = Shape(M=9, N=24)


def _add_ref(arrays, dims):
    return {"c": arrays["a"].double() + arrays["b"].double()}


def _add_spec(launch, name="add", **tensor_kw):
    return KernelSpec(name, launch, _add_ref,
                      [Tensor("a", ("M", "N"), "float32", **tensor_kw), Tensor("b", ("M", "N"), "float32", **tensor_kw),
                       Tensor("c", ("M", "N"), "float32", role="output")],
                      {"M": 8, "N": 8}, "N")


def add_with_strides(arrays, dims):
    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    c.copy_(a + b)


def add_with_a_strides_for_b(arrays, dims):
    """The stride mix-up: b is read with a's strides (harmless only when both have the same ones)."""
    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    b_as_a = torch.as_strided(b, b.shape, a.stride(), b.storage_offset())
    c.copy_(a + b_as_a)


def test_same_shaped_tensors_get_different_row_strides():
    a = alloc_guarded("a", (9, 24), "float32", role="input", values=torch.ones(9, 24), tiles=(8, 8), slot=0)
    b = alloc_guarded("b", (9, 24), "float32", role="input", values=torch.ones(9, 24), tiles=(8, 8), slot=1)
    assert a.array.stride() != b.array.stride()


@pytest.mark.pipecheck(expect_failures=True)
def test_a_kernel_using_as_stride_for_b_is_caught(pipecheck):
    assert coverage.check_coverage(pipecheck, _add_spec(add_with_strides), SHAPE).verdict is Verdict.PASS
    with pytest.raises(PipecheckFailure, match=r"output 'c': .* elements exceed the tolerance"):
        coverage.check_coverage(pipecheck, _add_spec(add_with_a_strides_for_b, "stride_mixup"), SHAPE)


@pytest.mark.parametrize(("kind", "expect"), [
    ("contiguous", lambda v: v.is_contiguous()),
    ("padded", lambda v: not v.is_contiguous() and v.stride(1) == 1 and v.stride(0) > v.shape[1]),
    ("transposed", lambda v: v.stride(0) == 1 and v.stride(1) >= v.shape[0]),
    ("sliced", lambda v: v.stride(1) == 2),
    ("offset", lambda v: v.is_contiguous() and (v.data_ptr() % 16) != 0),
])
def test_each_layout_places_the_view_as_named(kind, expect):
    g = alloc_guarded("x", (9, 24), "float32", role="input", values=torch.arange(9 * 24.0).reshape(9, 24),
                      tiles=(8, 8), layout=kind)
    assert expect(g.array), (kind, g.array.stride())
    assert torch.equal(g.array, torch.arange(9 * 24.0).reshape(9, 24))
    # everything around the view is guard (NaN for a float input)
    assert int(torch.isnan(g.buffer).sum()) == g.buffer.numel() - 9 * 24


def test_generate_gives_the_base_then_interleaved_variants_with_readable_ids():
    spec = _add_spec(add_with_strides)
    ids = [str(lay) for lay in layouts.generate(spec, "large")]
    assert ids[:4] == ["padded", "a-transposed", "b-sliced", "c-offset"]
    assert len(ids) == 10 and len(set(ids)) == 10  # 3 tensors x 3 variants + the base
    assert len(layouts.generate(spec, "small")) == 4
    only = _add_spec(add_with_strides, layout="contiguous")
    ids = [str(lay) for lay in layouts.generate(only, "large")]
    assert ids[0] == "base" and sorted(ids[1:]) == ["c-offset", "c-sliced", "c-transposed"]


@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("variant", ["a-transposed", "a-sliced"])
def test_a_launcher_that_assumes_unit_column_stride_is_caught_by_a_variant(pipecheck, variant):
    def row_major_only(arrays, dims):
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        a_rows = torch.as_strided(a, a.shape, (a.stride(0), 1), a.storage_offset())  # ignores a.stride(1)
        c.copy_(a_rows + b)

    spec = _add_spec(row_major_only, "unit_stride")
    assert coverage.check_coverage(pipecheck, spec, SHAPE).verdict is Verdict.PASS  # padded: fine
    with pytest.raises(PipecheckFailure, match=rf"unit_stride at M9-N24 \(layout {variant}\): coverage failed"):
        coverage.check_coverage(pipecheck, spec, SHAPE, layout=variant)


@pytest.mark.pipecheck(expect_failures=True)
def test_a_store_ignoring_an_outputs_strides_lands_in_its_gaps(pipecheck):
    def flat_store(arrays, dims):
        c = arrays["c"]
        torch.as_strided(c, c.shape, (c.shape[1], 1), c.storage_offset()).copy_(arrays["a"] + arrays["b"])

    with pytest.raises(PipecheckFailure, match=r"in the gaps between its elements \(sliced layout"):
        coverage.check_coverage(pipecheck, _add_spec(flat_store, "flat"), SHAPE, layout="c-sliced")


def test_every_check_takes_the_layout(pipecheck):
    spec = _add_spec(add_with_strides)
    for lay in layouts.generate(spec, "large"):
        results = correctness.check_all(pipecheck, spec, SHAPE, layout=lay)
        assert all(r.verdict is Verdict.PASS for r in results), (lay, results)
        assert {r.details.get("layout") for r in results} == {str(lay)}


@pytest.mark.parametrize(("tensor_kw", "layout", "fragment"), [
    ({"layout": "diagonal"}, None, "tensor 'a' layout 'diagonal' is not one of contiguous, padded"),
    ({"layout": ()}, None, "tensor 'a' layout is empty"),
    ({}, "z-transposed", "layout names 'z', which is not a tensor (a, b, c)"),
    ({}, {"a": "spiral"}, "layout 'spiral' for 'a' is not one of"),
    ({}, "transposed", "layout 'transposed' is not the base ('padded') nor TENSOR-LAYOUT"),
])
def test_bad_layouts_name_the_spec(pipecheck, tensor_kw, layout, fragment):
    with pytest.raises(PipecheckError, match="spec 'add'") as info:
        coverage.check_coverage(pipecheck, _add_spec(add_with_strides, **tensor_kw), SHAPE, layout=layout)
    assert fragment in str(info.value)


def test_transposed_needs_two_dims():
    with pytest.raises(PipecheckError, match="tensor 'v' layout 'transposed' needs at least 2 dims"):
        KernelSpec("k", lambda a, d: None, _add_ref, [Tensor("v", ("N",), layout="transposed"),
                                                      Tensor("c", ("N",), role="output")], {"N": 4}, "N")


def test_wrapper_outputs_take_no_layout():
    with pytest.raises(PipecheckError, match="output 'y' has layout='padded', but the wrapper form's call allocates"):
        KernelSpec("k", call=lambda x: x, reference=_add_ref,
                   tensors=[Tensor("x", ("N",)), Tensor("y", ("N",), role="output", layout="padded")],
                   tiles={"N": 4}, loop_dim="N")
