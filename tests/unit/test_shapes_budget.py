"""docs/verdicts.md item 24: generated shapes have a memory bound, and a dropped shape says which and why.

Before, tiles of 65536 generated shapes of hundreds of GB, and the first check that allocated them
died with a raw allocator traceback.
"""

from __future__ import annotations

import pytest

from pytest_pipecheck.config import ConfigError, PipecheckConfig, apply_marker
from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.model import shapes
from pytest_pipecheck.model.shape import Shape
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor
from pytest_pipecheck.results import PipecheckError, Verdict

MiB = 1 << 20


def _spec(tiles, name="gemm", dtype="float16"):
    def noop(arrays, dims):
        return None

    return KernelSpec(name, noop, noop,
                      [Tensor("a", ("M", "K"), dtype), Tensor("b", ("K", "N"), dtype),
                       Tensor("c", ("M", "N"), dtype, role="output")], tiles, "K", stages=3)


HUGE = _spec({"M": 65536, "N": 65536, "K": 65536}, "huge")
MIXED = _spec({"M": 1024, "N": 1024, "K": 32}, "mixed")


def test_default_budget_is_documented_and_one_gib():
    assert shapes.DEFAULT_MAX_BYTES == 1 << 30
    assert PipecheckConfig().shape_budget_mib == 1024
    assert "DEFAULT_MAX_BYTES" in (shapes.__doc__ or "") and "1 GiB" in (shapes.__doc__ or "")


def test_shape_bytes_counts_the_guarded_allocations():
    torch = pytest.importorskip("torch")
    from pytest_pipecheck.checks.arrays import alloc_guarded
    from pytest_pipecheck.model.layouts import kinds_of

    shp = Shape(M=9, K=40, N=7)
    spec = _spec({"M": 8, "N": 8, "K": 16})
    allocated = 0
    for slot, t in enumerate(spec.tensors):
        # each tensor in the largest of its layouts (padded rows differ per tensor; sliced spans twice)
        allocated += max(alloc_guarded(t.name, t.shape(shp), t.dtype, role=t.role, values=torch.ones(t.shape(shp)),
                                       tiles=[spec.tiles.get(d, 1) for d in t.dims], layout=kind, slot=slot)
                         .buffer.numel() * 2 for kind in kinds_of(spec, t))
    assert shapes.shape_bytes(spec, shp) == allocated


def test_huge_tiles_raise_a_named_error_instead_of_allocating():
    with pytest.raises(PipecheckError) as info:
        shapes.generate(HUGE)
    msg = str(info.value)
    assert msg.startswith("spec 'huge': every generated shape is over the memory budget; the smallest, shape ")
    assert "GiB (guarded allocations of one launch), over the shape memory budget of 1.0 GiB" in msg
    assert "shape_budget_mib" in msg


def test_generate_cases_keeps_every_case_with_its_reason():
    cases = shapes.generate_cases(HUGE)
    assert cases and all(c.dropped for c in cases)
    for c in cases:
        assert c.dropped.startswith(f"shape {c.shape} of spec 'huge' dropped: its inputs and outputs need ")
        assert shapes.shape_bytes(HUGE, c.shape) > shapes.DEFAULT_MAX_BYTES


def test_shapes_over_budget_are_dropped_and_the_rest_kept_with_stable_ids():
    budget = 12 * MiB
    unbounded = shapes.generate_cases(MIXED, "medium", max_bytes=1 << 62)
    cases = shapes.generate_cases(MIXED, "medium", max_bytes=budget)
    # the budget only marks cases: the same shapes, in the same order (test ids do not move)
    assert [c.shape for c in cases] == [c.shape for c in unbounded]
    kept = shapes.generate(MIXED, "medium", max_bytes=budget)
    assert kept and kept.dropped, "the budget must split this spec's shapes"
    assert all(shapes.shape_bytes(MIXED, s) <= budget for s in kept)
    assert all(shapes.shape_bytes(MIXED, c.shape) > budget for c in kept.dropped)
    assert list(kept) == [c.shape for c in cases if c.dropped is None]
    assert [c.shape for c in kept.dropped] == [c.shape for c in cases if c.dropped is not None]
    assert "over the shape memory budget of 12.0 MiB" in (kept.dropped[0].dropped or "")


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_bad_budget_is_an_error_naming_the_spec(bad):
    with pytest.raises(PipecheckError, match=r"spec 'mixed': shape memory budget max_bytes=.* must be an integer >= 1"):
        shapes.generate(MIXED, max_bytes=bad)


def test_configured_budget_is_validated_naming_the_marker():
    with pytest.raises(ConfigError, match=r"`shape_budget_mib=0` from the pipecheck marker on t\.py::t must be >= 1"):
        apply_marker(PipecheckConfig(), {"shape_budget_mib": 0}, "t.py::t")


def test_fixture_shapes_record_each_dropped_shape_as_a_skip():
    pc = Pipecheck("t.py::t", PipecheckConfig(shape_budget_mib=12), TierInfo("cpu", None, "unit test"), 1)
    kept = pc.shapes(MIXED, "medium")
    skips = [r for r in pc.results if r.check == "shapes"]
    assert kept and len(skips) == len(kept.dropped) > 0
    assert all(r.verdict is Verdict.SKIP and r.kernel == "mixed" and "dropped" in r.summary for r in skips)
    assert {str(c.shape) for c in kept.dropped} == {r.summary.split()[1] for r in skips}
