from __future__ import annotations

import math

import pytest

from pytest_pipecheck import shapes
from pytest_pipecheck.results import PipecheckError
from pytest_pipecheck.spec import Divisible, KernelSpec, Range, Tensor


def _gemm(stages=3, tiles=(128, 128, 64), pre=()):
    return KernelSpec("g", lambda a, d: None, lambda a, d: {},
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                      dict(zip("MNK", tiles)), "K", stages=stages, preconditions=pre)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_trip_counts_cover_the_pipeline_cases(stages):
    spec = _gemm(stages)
    got = shapes.generate(spec, "small")
    trips = {math.ceil(s["K"] / 64) for s in got}
    wanted = {1, max(stages - 1, 1), stages, stages + 1}
    assert wanted <= trips, (trips, wanted)
    odd = [t for t in trips if t > stages + 1 and t % 2 == 1]
    assert odd, f"no large odd trip count (ring wrap) in {trips}"
    assert any(s["K"] % 64 for s in got) and any(s["K"] % 64 == 0 for s in got)


def test_boundary_categories_for_tiled_dims():
    got = shapes.generate(_gemm(), "small")
    ms = {s["M"] for s in got}
    assert any(m < 128 for m in ms) and 128 in ms and 129 in ms and 255 in ms and 256 in ms


def test_deterministic_bounded_and_readable_ids():
    spec = _gemm()
    for level, cap in (("small", 8), ("medium", 14), ("large", 24)):
        a, b = shapes.generate(spec, level), shapes.generate(spec, level)
        assert a == b and 5 <= len(a) <= cap and len(set(a)) == len(a)
    assert str(shapes.generate(spec)[0]) == "M65-K33-N65"
    assert len(shapes.generate(spec, "medium")) > len(shapes.generate(spec, "small"))


def test_preconditions_are_respected():
    spec = _gemm(pre=(Divisible("K", 8), Divisible("N", 16), Range("M", 1, 200)))
    for level in ("small", "medium", "large"):
        for s in shapes.generate(spec, level, sm_count=4):
            assert not spec.violations(s), s


def test_partial_last_wave_with_sm_count():
    spec = _gemm()
    got = shapes.generate(spec, "small", sm_count=132)
    blocks = [math.ceil(s["M"] / 128) * math.ceil(s["N"] / 128) for s in got]
    assert any(b > 132 and b % 132 for b in blocks)


def test_bad_level_and_impossible_preconditions():
    with pytest.raises(PipecheckError, match=r"spec 'g': shape level 'huge'"):
        shapes.generate(_gemm(), "huge")
    impossible = _gemm(pre=(lambda d: "never",))
    with pytest.raises(PipecheckError, match="no generated shape meets the preconditions"):
        shapes.generate(impossible)
