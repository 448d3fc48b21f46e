from __future__ import annotations

import math

import pytest

from pytest_pipecheck.perf.cost_model import pipelined_time, predict_from_variants, serialized_time


def test_serialized_is_sum_per_tile() -> None:
    assert serialized_time(3.0, 5.0, 10) == 80.0


def test_pipelined_is_max_per_tile_plus_fill_and_drain() -> None:
    # compute-bound: 3 (fill) + 9 * 5 + 5 (drain)
    assert pipelined_time(3.0, 5.0, 10, stages=3) == 53.0
    # load-bound: 7 + 9 * 7 + 2
    assert pipelined_time(7.0, 2.0, 10, stages=2) == 72.0


def test_one_stage_is_serialized_and_one_tile_cannot_overlap() -> None:
    assert pipelined_time(3.0, 5.0, 10, stages=1) == serialized_time(3.0, 5.0, 10)
    assert pipelined_time(3.0, 5.0, 1, stages=4) == 8.0
    assert pipelined_time(3.0, 5.0, 0, stages=4) == 0.0


def test_speedup_tends_to_two_when_balanced() -> None:
    p = predict_from_variants(100.0, 100.0, tiles=100, stages=3)
    assert p.load_per_tile == p.compute_per_tile == 1.0
    assert math.isclose(p.speedup, 200.0 / 101.0)
    assert p.bound == "compute"
    assert predict_from_variants(300.0, 100.0, tiles=100, stages=3).bound == "load"


def test_prediction_never_beats_the_slower_side() -> None:
    for lo, co in ((10.0, 90.0), (90.0, 10.0), (50.0, 50.0)):
        p = predict_from_variants(lo, co, tiles=32, stages=2)
        assert max(lo, co) <= p.pipelined <= lo + co


@pytest.mark.parametrize(("args", "msg"), [((-1.0, 1.0, 4, 2), "load_only"), ((1.0, math.nan, 4, 2), "compute_only"),
                                           ((1.0, 1.0, 0, 2), "tiles"), ((1.0, 1.0, 4, 0), "stages")])
def test_bad_input(args: tuple, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        predict_from_variants(*args)
