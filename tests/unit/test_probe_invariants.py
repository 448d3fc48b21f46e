"""An input with an invariant along the loop (a non-increasing cumulative sum, as mamba-ssm's ``dA_cumsum``): the
tile probe zeroes it outside the probed tile, which breaks the invariant the kernel may rely on. Such an input is
declared ``Tensor(..., probe="whole")``; where it is not, a probe failure whose reference is not a sum of per-tile
contributions says so and names no part of the pipeline (pytest_pipecheck/checks/tile_probe.py ``check_tile_probe``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import coverage, tile_probe  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

TILE = 8


def _cumsum(shape, gen):  # non-increasing along K: the cumulative sum of negative steps
    return -torch.rand(shape, generator=gen, dtype=torch.float64).cumsum(-1).float()


def _ref(a, d):
    x, cs = a["x"].double(), a["cs"].double()
    return {"s": (x * torch.exp(cs[:, -1:] - cs)).sum(-1)}


def _kernel(drop_last: bool = False):
    def launch(a, d):
        x, cs = a["x"].float(), a["cs"].float()
        # the kernel relies on the invariant: cs[-1] <= cs[k], so the exponent is never positive; it clamps it
        decay = torch.exp((cs[:, -1:] - cs).clamp(max=0.0))
        k = d["K"] - (d["K"] - 1) % TILE - 1 if drop_last else d["K"]  # drop_last: the last K tile is lost
        a["s"].copy_((x[:, :k] * decay[:, :k]).sum(-1))
    return launch


def _spec(probe: str = "mask", drop_last: bool = False) -> KernelSpec:
    return KernelSpec("chunk_state", _kernel(drop_last), _ref,
                      [Tensor("x", ("M", "K"), "float32", layout="contiguous"),
                       Tensor("cs", ("M", "K"), "float32", init=_cumsum, layout="contiguous", probe=probe),
                       Tensor("s", ("M",), "float32", role="output", layout="contiguous")],
                      tiles={"M": 4, "K": TILE}, loop_dim="K")


SHAPE = Shape(M=3, K=37)


def test_an_undeclared_invariant_fails_without_naming_the_pipeline(pipecheck):
    assert coverage.check_coverage(pipecheck, _spec(), SHAPE).verdict is Verdict.PASS
    with pipecheck.expecting_failures():
        with pytest.raises(PipecheckFailure) as info:
            tile_probe.check_tile_probe(pipecheck, _spec(), SHAPE)
    text = str(info.value)
    assert "the reference is not a sum of per-tile contributions" in text and "probe='whole'" in text, text
    for blame in ("prologue", "epilogue", "stage ring", "never reached", "cause:"):
        assert blame not in text, (blame, text)
    assert info.value.result.details["not_additive"]


def test_a_declared_invariant_is_left_whole_and_the_probe_passes(pipecheck):
    result = tile_probe.check_tile_probe(pipecheck, _spec(probe="whole"), SHAPE)
    assert result.verdict is Verdict.PASS
    assert "not masked along K: 'cs' (declared probe='whole')" in result.summary
    assert result.details["unmasked"] == {"cs": "declared probe='whole'"}


def test_with_the_invariant_declared_a_dropped_tile_is_still_named(pipecheck):
    with pipecheck.expecting_failures():
        with pytest.raises(PipecheckFailure, match=r"K tile 4 of 5, the last \(epilogue, partial 5/8\), never "
                                                   r"reached the output"):
            tile_probe.check_tile_probe(pipecheck, _spec(probe="whole", drop_last=True), SHAPE)


def test_a_bad_probe_value_is_refused_naming_the_tensor():
    with pytest.raises(PipecheckError, match=r"tensor 'cs' has probe='zero'; must be 'mask'"):
        _spec(probe="zero")


def _sum_spec(probe: str, drop_last: bool = False) -> KernelSpec:
    def launch(a, d):
        k = d["K"] - (d["K"] - 1) % TILE - 1 if drop_last else d["K"]
        a["s"].copy_(a["x"][:, :k].sum(-1))
    return KernelSpec("row_sum", launch, lambda a, d: {"s": a["x"].double().sum(-1)},
                      [Tensor("x", ("M", "K"), "float32", layout="contiguous", probe=probe),
                       Tensor("s", ("M",), "float32", role="output", layout="contiguous")],
                      tiles={"M": 4, "K": TILE}, loop_dim="K")


@pytest.mark.parametrize("drop_last", [False, True], ids=["correct", "drops-last-tile"])
def test_with_no_input_masked_the_probe_skips_rather_than_pass(pipecheck, drop_last):
    # every tile would see the whole input, and "every tile counted once" would be said of a probe that
    # isolated none: the kernel that drops its last tile must not pass here either
    result = tile_probe.check_tile_probe(pipecheck, _sum_spec("whole", drop_last), SHAPE)
    assert result.verdict is Verdict.SKIP, result
    assert "no input is masked along K ('x' (declared probe='whole'))" in result.summary, result.summary
    assert "cannot isolate a tile" in result.summary
    with pipecheck.expecting_failures():
        with pytest.raises(PipecheckFailure, match="K tile 4 of 5"):
            tile_probe.check_tile_probe(pipecheck, _sum_spec("mask", drop_last=True), SHAPE)
