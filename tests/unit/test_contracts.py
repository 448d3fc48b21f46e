"""Richer contracts: inout tensors, outputs the caller zeroes, inputs drawn from other dimensions,
tolerances that depend on the shape, and the calibrated tolerance in the tile probe (pure torch, fast)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402


def _own_context(name: str):
    """A fixture object of its own, not the test's: a check that raises records an ERROR result in it (so it
    would fail the test it belongs to); here the error itself is what is tested."""
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.fixture import Pipecheck

    return Pipecheck(f"tests/unit/test_contracts.py::{name}", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 1)

# ----------------------------------------------------------------------------- inout


def _axpy_spec(launch, name="axpy_inplace", reference=None):
    def ref(arrays, dims):
        return {"x": arrays["x"].double() + 2 * arrays["y"].double()}

    return KernelSpec(name, launch, reference or ref,
                      [Tensor("x", ("M", "N"), role="inout"), Tensor("y", ("M", "N"))], {"M": 4, "N": 8}, "N")


def axpy(arrays, dims):
    arrays["x"].copy_((arrays["x"].float() + 2 * arrays["y"].float()).half())


def test_inout_is_compared_after_the_call_given_the_values_before(pipecheck):
    results = pipecheck.check_kernel(_axpy_spec(axpy), "M5-N19")
    assert [r.verdict for r in results] == [Verdict.PASS] * 3, results
    assert results[0].details["outputs"]["x"]["unwritten_not_checked"] == "inout: updated in place"


def test_a_reference_may_update_its_copy_of_an_inout_in_place(pipecheck):
    def ref_in_place(arrays, dims):
        arrays["x"].copy_(arrays["x"].double() + 2 * arrays["y"].double())
        return {}

    assert pipecheck.check_coverage(_axpy_spec(axpy, reference=ref_in_place), "M5-N19").verdict is Verdict.PASS


@pytest.mark.pipecheck(expect_failures=True)
def test_an_inout_left_alone_or_written_past_its_edge_is_caught(pipecheck):
    def skips_last_row(arrays, dims):
        x = arrays["x"]
        x[:-1].copy_((x[:-1].float() + 2 * arrays["y"][:-1].float()).half())

    # the last row's 19 elements keep x instead of x + 2y: all of them exceed the tolerance unless a y
    # drawn for this run's seed happens to be tiny, so the count is not pinned; the worst is in row 4
    with pytest.raises(PipecheckFailure, match=r"inout 'x': 1\d of 95 .* exceed the tolerance; worst at \[4, "):
        pipecheck.check_coverage(_axpy_spec(skips_last_row, "lazy_axpy"), "M5-N19")

    def spills(arrays, dims):
        axpy(arrays, dims)
        x = arrays["x"]
        torch.as_strided(x, (1,), (1,), x.storage_offset() + x.shape[1]).fill_(3)  # the row padding

    with pytest.raises(PipecheckFailure, match=r"inout 'x': 1 element\(s\) written outside 'x': 1 in the row pad"):
        pipecheck.check_coverage(_axpy_spec(spills, "spilling_axpy"), "M5-N19")


def test_each_launch_gets_the_inout_before_the_call(pipecheck):
    """Determinism's second run must not start from the first run's result (it would double-add)."""
    before = []

    def spy(arrays, dims):
        before.append(arrays["x"].double().sum().item())
        axpy(arrays, dims)

    assert pipecheck.check_determinism(_axpy_spec(spy), "M5-N19").verdict is Verdict.PASS
    assert len(before) == 2 and before[0] == before[1]


# ----------------------------------------------------------------------------- zeroed outputs


def _split_k_spec(launch, init="zeros", name="split_k"):
    def ref(arrays, dims):
        return {"c": arrays["a"].double() @ arrays["b"].double()}

    return KernelSpec(name, launch, ref,
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")),
                       Tensor("c", ("M", "N"), dtype="float32", role="output", init=init)],
                      {"M": 8, "N": 8, "K": 16}, "K", deterministic=False)


def split_k(arrays, dims, splits=2, skip=None):
    """Accumulates each K split into c (what atomic adds do): correct only if the caller zeroed c."""
    a, b, c = arrays["a"].float(), arrays["b"].float(), arrays["c"]
    bounds = torch.linspace(0, dims["K"], splits + 1).long().tolist()
    for s, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if s != skip:
            c.add_(a[:, lo:hi] @ b[lo:hi])


def test_an_output_the_caller_zeroes_is_checked_by_value(pipecheck):
    result = pipecheck.check_coverage(_split_k_spec(split_k), "M9-K40-N7")
    assert result.verdict is Verdict.PASS
    assert result.details["outputs"]["c"]["unwritten_not_checked"] == "init='zeros': zeroed by the caller"
    assert pipecheck.check_tile_probe(_split_k_spec(split_k), "M9-K40-N7").verdict is Verdict.PASS


@pytest.mark.pipecheck(expect_failures=True)
def test_zeroed_output_without_the_contract_is_flagged_and_a_dropped_split_still_is(pipecheck):
    # without init="zeros" the accumulation starts from poison: every element reads as never written (the
    # CPU keeps a NaN poison's payload through the add) or as NaN (a GPU's add returns the canonical NaN)
    with pytest.raises(PipecheckFailure, match=r"never written|NaN where the reference is finite"):
        pipecheck.check_coverage(_split_k_spec(split_k, init="randn", name="unzeroed"), "M9-K40-N7")
    # nearly every element misses half its sum; one whose dropped half sums to about zero can still match
    # (seed 3720737053 left one of 63), so the count is not pinned
    with pytest.raises(PipecheckFailure, match=r"output 'c': (5\d|6[0-3]) of 63 .* exceed the tolerance"):
        pipecheck.check_coverage(_split_k_spec(lambda a, d: split_k(a, d, skip=1), name="drops_split"), "M9-K40-N7")


def test_output_init_other_than_zeros_is_refused():
    with pytest.raises(PipecheckError, match=r"spec 'split_k': output 'c' has init 'uniform'; an output starts "
                                             r"poisoned, or zeroed with init='zeros'"):
        _split_k_spec(split_k, init="uniform")


# ----------------------------------------------------------------------------- inputs from other dims

IGNORE = -100


def _targets(shape, gen, dims):
    t = torch.randint(0, dims["V"], shape, generator=gen)
    t[::3] = IGNORE
    return t


def _pick_spec(launch):
    def ref(arrays, dims):
        logits, t = arrays["logits"].double(), arrays["t"]
        keep = t != IGNORE
        out = torch.zeros(t.shape[0], dtype=torch.float64, device=t.device)
        out[keep] = logits[keep.nonzero().squeeze(1), t[keep]]
        return {"picked": out}

    return KernelSpec("pick_target", launch, ref,
                      [Tensor("logits", ("M", "V")), Tensor("t", ("M",), dtype="int64", init=_targets),
                       Tensor("picked", ("M",), dtype="float32", role="output")], {"V": 16}, "V")


def test_init_callable_gets_the_dims(pipecheck):
    seen = []

    def pick(arrays, dims):
        t = arrays["t"]
        seen.append((int(t.max()), int((t == IGNORE).sum())))
        keep = t != IGNORE
        out = torch.zeros(t.shape[0], device=t.device)
        out[keep] = arrays["logits"].float()[keep.nonzero().squeeze(1), t[keep]]
        arrays["picked"].copy_(out)

    assert pipecheck.check_coverage(_pick_spec(pick), "M7-V40").verdict is Verdict.PASS
    assert seen[0][0] < 40 and seen[0][1] == 3


# ----------------------------------------------------------------------------- tolerance by shape


def _sum_spec(launch, rtol, name="splitk_sum"):
    def ref(arrays, dims):
        return {"s": arrays["x"].double().sum(dim=1)}

    return KernelSpec(name, launch, ref, [Tensor("x", ("M", "K"), init="uniform"),
                                          Tensor("s", ("M",), role="output")], {"K": 16}, "K", rtol=rtol)


def rounds_per_split(arrays, dims):
    """Sums each 16-wide split in fp16 and adds the splits in fp16: one rounding per split."""
    x = arrays["x"].float()
    acc = torch.zeros(x.shape[0], dtype=torch.float16, device=x.device)
    for lo in range(0, dims["K"], 16):
        acc = (acc.float() + x[:, lo:lo + 16].sum(dim=1)).half()
    arrays["s"].copy_(acc)


def test_tolerance_callable_of_the_shape(pipecheck):
    per_split = _sum_spec(rounds_per_split, rtol=lambda dims: 1e-3 * -(-dims["K"] // 16))
    result = pipecheck.check_coverage(per_split, "M64-K800")
    assert result.verdict is Verdict.PASS and "rtol 5.0e-02" in result.details["outputs"]["s"]["tolerance"]
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match="exceed the tolerance"):
        pipecheck.check_coverage(_sum_spec(rounds_per_split, rtol=1e-3, name="fixed_rtol"), "M64-K800")


def test_a_tolerance_callable_returning_nan_is_an_error_naming_spec_and_shape():
    pipecheck = _own_context("nan")
    bad = _sum_spec(rounds_per_split, rtol=lambda dims: float("nan"), name="nan_rtol")
    with pytest.raises(PipecheckError, match=r"spec 'nan_rtol': rtol\(dims\) returned nan at \{'M': 2, 'K': 9\}: "
                                             r"must be a number, not NaN"):
        pipecheck.check_coverage(bad, "M2-K9")
    unknown = _sum_spec(rounds_per_split, rtol=lambda dims: {"q": 1e-3}, name="unknown_rtol")
    with pytest.raises(PipecheckError, match=r"rtol\(dims\) names 'q', which is not an output"):
        pipecheck.check_tile_probe(unknown, "M2-K9")
    # each is an ERROR result of its check that names the exception, never nothing recorded
    assert [(r.check, r.verdict) for r in pipecheck.results] == [("coverage", Verdict.ERROR),
                                                                  ("tile_probe", Verdict.ERROR)]
    assert "PipecheckError: spec 'nan_rtol'" in pipecheck.results[0].summary


# ----------------------------------------------------------------------------- calibrated tile probe


def _scaled_spec(factor):
    def ref(arrays, dims):
        return {"s": arrays["x"].double().sum(dim=1)}

    def same_precision(arrays, dims):
        return {"s": (arrays["x"].double().sum(dim=1) * factor).half()}

    def launch(arrays, dims):
        arrays["s"].copy_((arrays["x"].double().sum(dim=1) * factor).half())

    return KernelSpec("scaled_sum", launch, ref, [Tensor("x", ("M", "K")), Tensor("s", ("M",), role="output")],
                      {"K": 16}, "K", same_precision=same_precision)


def test_tile_probe_uses_the_calibrated_tolerance(pipecheck):
    """A kernel exactly as accurate as its same-precision implementation (4e-3 relative error, twice the
    float16 default) passes the calibrated probe and fails the fixed one."""
    spec = _scaled_spec(1.004)
    assert pipecheck.check_tile_probe(spec, "M3-K40").verdict is Verdict.PASS
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match="tile probe along K"):
        pipecheck.check_tile_probe(spec, "M3-K40", tolerance="fixed")
    own = _own_context("calibrated")
    with pytest.raises(PipecheckError, match="tolerance='calibrated' needs the spec's same_precision"):
        own.check_tile_probe(_sum_spec(rounds_per_split, rtol=None), "M3-K40", tolerance="calibrated")
    assert [(r.check, r.verdict) for r in own.results] == [("tile_probe", Verdict.ERROR)]


def test_an_expectation_a_sanitizer_alone_can_meet_needs_no_judging_check() -> None:
    from pytest_pipecheck.contract import expects_a_judged_failure

    assert not expects_a_judged_failure(False)
    assert expects_a_judged_failure(True)  # any check may be the one that catches it
    assert expects_a_judged_failure(("coverage",))
    assert expects_a_judged_failure(("sanitizer:racecheck", "tile_probe"))
    assert not expects_a_judged_failure(("sanitizer:racecheck",))
    assert not expects_a_judged_failure(("sanitizer",))
