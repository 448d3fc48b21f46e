from __future__ import annotations

import math

import pytest

from pytest_pipecheck.model import shapes
from pytest_pipecheck.model.preconditions import Divisible, Range
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor
from pytest_pipecheck.results import PipecheckError


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


def _trips_of(spec, dim, tile, shape):
    from pytest_pipecheck.model.shapes import _program_trips

    return _program_trips(spec, dim, tile, shape[dim])


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_each_tile_size_of_the_loop_dim_gets_both_parities_with_a_wrapping_ring(stages):
    """Two block sizes on one dimension (BLOCK_M and BLOCK_N both on the sequence length): each size
    gets odd and even trip counts above the stage count with a partial last tile."""
    spec = KernelSpec("attn", lambda a, d: None, lambda a, d: {},
                      [Tensor("q", ("S", "D")), Tensor("o", ("S", "D"), role="output")],
                      {"S": (16, 32), "D": 8}, "S", stages=stages)
    assert spec.tiles["S"] == 16 and spec.tile_sizes["S"] == (16, 32) and spec.guard_tiles["S"] == 32
    got = shapes.generate(spec, "small")
    for tile in (16, 32):
        ragged = [math.ceil(s["S"] / tile) for s in got if s["S"] % tile]
        assert any(t % 2 and t > stages for t in ragged), (tile, ragged)
        assert any(t % 2 == 0 and t > stages for t in ragged), (tile, ragged)
    assert len(got) <= 8 + 4


def test_the_larger_tile_of_a_non_loop_dim_gets_a_partial_tile_past_the_first():
    spec = _gemm(tiles=(128, (64, 256), 64))
    got = shapes.generate(spec, "small")
    assert any(s["N"] % 256 and s["N"] > 256 for s in got), [s["N"] for s in got]


def test_blocks_per_program_reach_the_last_block_of_a_program_and_a_lone_one():
    """One program covers 8 K tiles (an inner loop of 8 chunks): the last of the 8 is reached, partial,
    and a second program with a single partial tile is generated too; along M (4 blocks per program)
    the same."""
    spec = KernelSpec("chunks", lambda a, d: None, lambda a, d: {},
                      [Tensor("a", ("M", "K")), Tensor("c", ("M",), role="output")],
                      {"M": 16, "K": 8}, "K", stages=2, blocks_per_program={"K": 8, "M": 4})
    assert spec.guard_tiles == {"M": 64, "K": 64}
    got = shapes.generate(spec, "small")
    k_trips = [_trips_of(spec, "K", 8, s) for s in got if s["K"] % 8]
    assert any(t[-1] == 8 for t in k_trips), k_trips  # the last program runs all 8, the last partial
    assert any(len(t) == 2 and t[-1] == 1 for t in k_trips), k_trips  # a lone partial tile after 8
    assert any(t[-1] % 2 and t[-1] > 2 for t in k_trips) and any(t[-1] % 2 == 0 and t[-1] > 2 for t in k_trips)
    m_trips = [_trips_of(spec, "M", 16, s) for s in got if s["M"] % 16]
    assert any(t[-1] == 4 for t in m_trips) and any(len(t) == 2 and t[-1] == 1 for t in m_trips), m_trips


def test_bad_tiles_and_blocks_per_program_are_named():
    mk = lambda **kw: KernelSpec("bad", lambda a, d: None, lambda a, d: {},  # noqa: E731
                                 [Tensor("a", ("M", "K")), Tensor("c", ("M",), role="output")], **kw)
    with pytest.raises(PipecheckError, match=r"spec 'bad': tile size K=\(8, 0\) must be an integer >= 1"):
        mk(tiles={"M": 16, "K": (8, 0)}, loop_dim="K")
    with pytest.raises(PipecheckError, match=r"spec 'bad': blocks_per_program names 'N'"):
        mk(tiles={"M": 16, "K": 8}, loop_dim="K", blocks_per_program={"N": 2})
    with pytest.raises(PipecheckError, match=r"spec 'bad': blocks_per_program K=0 must be an integer >= 1"):
        mk(tiles={"M": 16, "K": 8}, loop_dim="K", blocks_per_program={"K": 0})
