"""Value patterns: what each generates, how they are named, validated and paired, and the comparison
rules that come with them (tiny: scaled atol; nan/inf/max: NaN and inf positions; out of range: skip)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import coverage  # noqa: E402
from pytest_pipecheck.model import values as patterns  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402


def _sum_spec(launch, name="rowsum", dtype="float16", out_dtype="float32", **kw):
    def ref(arrays, dims):
        return {"s": arrays["x"].double().sum(dim=1)}

    return KernelSpec(name, launch, ref, [Tensor("x", ("M", "K"), dtype=dtype),
                                          Tensor("s", ("M",), dtype=out_dtype, role="output")],
                      {"K": 16}, "K", **kw)


def good_sum(arrays, dims):
    arrays["s"].copy_(arrays["x"].double().sum(dim=1).to(arrays["s"].dtype))


def test_each_default_pattern_generates_what_it_says():
    z = torch.randn(4, 50, generator=torch.Generator().manual_seed(1))
    get = {n: patterns.apply(patterns.resolve(n), z, "float16", 50) for n in patterns.DEFAULT}
    assert torch.equal(get["normal"], z)
    assert 1.5 < float(get["offset"].mean()) < 2.5
    assert bool((get["negative"] < 0).all())
    assert bool((get["equal"] == 0.75).all())
    # large: squares summed over the loop (50) stay within 1/16 of float16's range, yet far above 1
    sq = (get["large"].double() ** 2).sum(dim=1)
    assert float(sq.max()) < 65504 / 16 and float(get["large"].abs().max()) > 5
    tiny = get["tiny"].abs()
    assert float(tiny.max()) < 0.2 and float((tiny[tiny > 0] ** 2).min()) > 0  # squares stay above zero
    den = patterns.apply(patterns.resolve("denormal"), z, "float16", 50).abs()
    assert float(den.max()) < 2.0**-14 and float(den.min()) > 0
    nan = patterns.apply(patterns.resolve("nan"), z, "float16", 50)
    assert int(nan.isnan().sum()) == (200 + 6) // 7 and not bool(z.isnan().any())  # the base is not modified
    inf = patterns.apply(patterns.resolve("inf"), z, "float16", 50)
    assert bool((inf == float("inf")).any()) and bool((inf == float("-inf")).any())


def test_names_ids_and_validation():
    assert patterns.resolve("values=negative") is patterns.resolve("negative")
    assert patterns.resolve(None).name == "normal" and str(patterns.resolve("tiny")) == "values=tiny"
    with pytest.raises(PipecheckError, match=r"spec 'rowsum': values='negatve' is not a value pattern "
                                             r"\(default: normal, offset, negative.*opt-in: nan, inf, max, denormal"):
        coverage.check_coverage(None, _sum_spec(good_sum), "M2-K9", values="negatve")  # type: ignore[arg-type]
    with pytest.raises(PipecheckError, match=r"spec 'bad': values='nan' must be a list of pattern names"):
        _sum_spec(good_sum, name="bad", values="nan")
    with pytest.raises(PipecheckError, match=r"spec 'bad': values='nope' is not a value pattern"):
        _sum_spec(good_sum, name="bad", values=("negative", "nope"))
    spec = _sum_spec(good_sum, values=("negative", "nan"))
    assert patterns.names_for(spec) == ("normal", "negative", "nan")
    # patterns change only float inputs with init="randn": a spec without one gets normal alone
    ints = KernelSpec("ints", good_sum, lambda a, d: {"s": a["x"].double().sum(dim=1)},
                      [Tensor("x", ("M", "K"), dtype="int32", init="randint"),
                       Tensor("s", ("M",), dtype="float32", role="output")], {"K": 16}, "K")
    assert patterns.names_for(ints) == ("normal",)


def test_pairing_per_level():
    spec = _sum_spec(good_sum)
    from pytest_pipecheck.model import shapes

    for level, k in patterns.PER_PATTERN.items():
        gen = shapes.generate(spec, level)
        cases = patterns.pair(spec, gen, level)
        assert len(cases) == len(gen) + (len(patterns.DEFAULT) - 1) * k
        assert len(set(cases)) == len(cases)


def test_fixed_pattern_is_used_by_every_check(pipecheck):
    seen = []

    def spy(arrays, dims):
        # the tile probe zeros the inputs outside one tile: the rest is negative
        seen.append(bool((arrays["x"] <= 0).all() and (arrays["x"] < 0).any()))
        good_sum(arrays, dims)

    results = pipecheck.check_kernel(_sum_spec(spy), "M2-K40", values="negative")
    assert all(r.verdict is Verdict.PASS for r in results) and len(seen) == 1 + 3 + 2 and all(seen)
    assert "values=negative" in results[0].summary and results[0].details["values"] == "negative"


@pytest.mark.pipecheck(expect_failures=True)
def test_tiny_scales_atol_so_a_kernel_writing_zeros_fails(pipecheck):
    def zeros(arrays, dims):
        arrays["s"].zero_()

    # float32 tiny values are about 1e-19: every sum is far below float32's default atol of 1e-5
    spec = _sum_spec(zeros, name="writes_zeros", dtype="float32")
    with pytest.raises(PipecheckFailure, match=r"(?s)writes_zeros at M2-K9 values=tiny: coverage failed.*atol x"):
        pipecheck.check_coverage(spec, "M2-K9", values="tiny")


def test_tiny_keeps_a_correct_kernel_passing(pipecheck):
    assert pipecheck.check_coverage(_sum_spec(good_sum), "M2-K9", values="tiny").verdict is Verdict.PASS


def test_tiny_leaves_a_calibrated_tolerance_unscaled(pipecheck):
    """A calibrated atol is measured on the tiny inputs themselves; scaling it by the reference's magnitude
    again (about 1e-18 for float32) made a correct fp32 running sum fail every coverage and tile probe."""
    def cumsum_fp32(arrays, dims):
        arrays["s"].copy_(arrays["x"].float().cumsum(dim=1))

    spec = KernelSpec("cumsum_fp32", cumsum_fp32, lambda a, d: {"s": a["x"].double().cumsum(dim=1)},
                      [Tensor("x", ("M", "K"), dtype="float32"), Tensor("s", ("M", "K"), dtype="float32", role="output")],
                      {"K": 16}, "K", same_precision=lambda a, d: {"s": a["x"].float().cumsum(dim=1)})
    for check in (pipecheck.check_coverage, pipecheck.check_tile_probe):
        result = check(spec, "M4-K200", values="tiny")
        assert result.verdict is Verdict.PASS, result.summary
    tolerance = pipecheck.results[0].details["outputs"]["s"]["tolerance"]
    assert "calibrated" in tolerance and "atol x" not in tolerance, tolerance


def _gemm_spec(launch, name, dtype):
    return KernelSpec(name, launch, lambda a, d: {"c": a["a"].double() @ a["b"].double()},
                      [Tensor("a", ("M", "K"), dtype=dtype), Tensor("b", ("K", "N"), dtype=dtype),
                       Tensor("c", ("M", "N"), dtype=dtype, role="output")],
                      {"M": 16, "N": 16, "K": 8}, "K")


def _chunked_gemm(skip_last=False):
    """A GEMM that accumulates in fp32 over K chunks of 8, in another order than the float64 reference."""
    def launch(arrays, dims):
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        acc = torch.zeros(c.shape, dtype=torch.float32, device=c.device)
        starts = list(range(0, dims["K"], 8))
        for k0 in starts[:-1] if skip_last else starts:
            acc += a[:, k0:k0 + 8].float() @ b[k0:k0 + 8].float()
        c.copy_(acc.to(c.dtype))
    return launch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_large_scales_atol_up_so_a_correct_sum_that_cancels_passes(pipecheck, dtype):
    """Under ``large`` the terms of a GEMM reach about 1e36 in float32; where they cancel, a correct fp32
    accumulation in another order than the reference is off by about 1e-4 of the small result (it
    failed: 'got -3.10198e+32, expected -3.10151e+32', over rtol 1e-4 with an unscaled atol of 1e-5)."""
    result = pipecheck.check_coverage(_gemm_spec(_chunked_gemm(), f"gemm_{dtype}", dtype), "M96-K200-N96",
                                      values="large")
    assert result.verdict is Verdict.PASS, result.summary
    assert "atol x" in pipecheck.results[-1].details["outputs"]["c"]["tolerance"]


@pytest.mark.pipecheck(expect_failures=True)
def test_large_still_fails_a_gemm_that_drops_its_last_k_chunk(pipecheck):
    spec = _gemm_spec(_chunked_gemm(skip_last=True), "drops_last_chunk", "float32")
    with pytest.raises(PipecheckFailure, match=r"(?s)drops_last_chunk at M96-K44-N96 values=large: coverage failed.*"
                                               r"elements exceed the tolerance.*atol x"):
        pipecheck.check_coverage(spec, "M96-K44-N96", values="large")


def test_nan_and_inf_must_propagate(pipecheck):
    spec = _sum_spec(good_sum)
    for name in ("nan", "inf", "max"):
        assert pipecheck.check_coverage(spec, "M3-K20", values=name).verdict is Verdict.PASS
    skip = pipecheck.check_tile_probe(spec, "M3-K20", values="nan")
    assert skip.verdict is Verdict.SKIP and "NaN and inf do not cancel" in skip.summary


@pytest.mark.pipecheck(expect_failures=True)
def test_a_kernel_that_drops_nan_fails_under_the_nan_pattern(pipecheck):
    def nan_to_zero(arrays, dims):
        arrays["s"].copy_(arrays["x"].double().nan_to_num(0.0).sum(dim=1).float())

    spec = _sum_spec(nan_to_zero, name="drops_nan")
    assert pipecheck.check_coverage(spec, "M3-K20").verdict is Verdict.PASS
    with pytest.raises(PipecheckFailure, match=r"should be NaN or inf \(the reference under values=nan"):
        pipecheck.check_coverage(spec, "M3-K20", values="nan")


def test_a_pattern_that_overflows_the_output_dtype_is_a_skip_not_a_pass(pipecheck):
    def fp16_sum(arrays, dims):
        arrays["s"].copy_(arrays["x"].double().sum(dim=1).half())

    spec = _sum_spec(fp16_sum, out_dtype="float16")
    # offset (mean 2) over K = 40000 sums to about 80000: beyond float16
    result = pipecheck.check_coverage(spec, "M1-K40000", values="offset")
    assert result.verdict is Verdict.SKIP and "beyond the float16 range" in result.summary
