from __future__ import annotations

import pytest

from pytest_pipecheck.model.preconditions import Divisible, Range
from pytest_pipecheck.model.shape import Shape
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor
from pytest_pipecheck.results import PipecheckError


def _spec(**kw):
    args = dict(name="toy_gemm", launch=lambda a, d: None, reference=lambda a, d: {},
                tensors=[Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                tiles={"M": 16, "N": 16, "K": 16}, loop_dim="K", stages=3)
    args.update(kw)
    return KernelSpec(**args)


def test_shape_id_hash_and_parse_roundtrip():
    s = Shape({"M": 129, "N": 65, "K": 200})
    assert str(s) == s.id == "M129-N65-K200"
    assert Shape.parse("M129-N65-K200") == s and hash(Shape.parse(str(s))) == hash(s)
    assert s["K"] == 200 and s.replace(K=8)["K"] == 8 and s["K"] == 200
    with pytest.raises(AttributeError):
        s.x = 1  # type: ignore[attr-defined]
    with pytest.raises(PipecheckError, match="must be an integer >= 1"):
        Shape({"M": 0})


def test_loop_dim_not_in_any_input_names_the_spec():
    with pytest.raises(PipecheckError, match=r"spec 'toy_gemm': loop_dim 'Q' is not a dimension of any input \(a, b\)"):
        _spec(loop_dim="Q", tiles={"M": 16, "Q": 4})


@pytest.mark.parametrize("kw, fragment", [
    ({"tiles": {"M": 16, "N": 16, "K": 0}}, "tile size K=0"),
    ({"tiles": {"M": 16, "Z": 4, "K": 16}}, "tiles names 'Z'"),
    ({"stages": 0}, "stages=0"),
    ({"backend": "jax"}, "backend 'jax'"),
    ({"tensors": [Tensor("a", ("M", "K")), Tensor("a", ("K", "N"), role="output")]}, "declared twice"),
    ({"tensors": [Tensor("a", ("M", "K"), dtype="float8")]}, "unsupported dtype"),
    ({"tensors": [Tensor("a", ("M", "K"))]}, "no tensor has role='output'"),
    ({"preconditions": [Divisible("Q", 8)]}, "not a dimension of any tensor"),
])
def test_bad_specs_raise_one_line_errors(kw, fragment):
    with pytest.raises(PipecheckError) as info:
        _spec(**kw)
    assert fragment in str(info.value) and "toy_gemm" in str(info.value)
    assert "\n" not in str(info.value)


def test_check_shape_reports_violated_precondition_and_missing_dims():
    spec = _spec(preconditions=[Divisible("K", 8), Range("M", 1, 100), lambda d: "N must be odd" if d["N"] % 2 == 0 else None])
    assert spec.check_shape("M9-N9-K16") == Shape(M=9, N=9, K=16)
    with pytest.raises(PipecheckError, match=r"violates a declared precondition: K=12 is not a multiple of 8"):
        spec.check_shape({"M": 9, "N": 9, "K": 12})
    with pytest.raises(PipecheckError, match=r"M=101 is outside \[1, 100\]; N must be odd"):
        spec.check_shape({"M": 101, "N": 10, "K": 16})
    with pytest.raises(PipecheckError, match="has no size for N"):
        spec.check_shape({"M": 9, "K": 16})


def test_views_and_trips():
    spec = _spec()
    assert spec.dim_names == ("M", "K", "N")
    assert [t.name for t in spec.inputs] == ["a", "b"] and [t.name for t in spec.outputs] == ["c"]
    assert spec.loop_trips(Shape(M=1, N=1, K=33)) == 3
    assert not spec.launch_accepts_stages()
    assert _spec(launch=lambda a, d, stages=None: None).launch_accepts_stages()


def test_dataclasses_replace_keeps_every_tile_size():
    """``dataclasses.replace`` builds the spec again from ``tiles``, which holds the smallest size of each
    dimension: the other sizes (and the ragged shapes generated for them) must survive it."""
    import dataclasses

    from pytest_pipecheck.model.shapes import generate

    spec = _spec(tiles={"M": 16, "N": (64, 128), "K": 16})
    again = dataclasses.replace(spec, name="renamed")
    assert spec.tiles == {"M": 16, "N": 64, "K": 16} and again.tiles == spec.tiles
    assert again.tile_sizes == {"M": (16,), "N": (64, 128), "K": (16,)}
    assert [s.id for s in generate(again, level="small")] == [s.id for s in generate(spec, level="small")]
    # tiles given to replace win over the remembered ones
    assert dataclasses.replace(spec, tiles={"M": 8, "N": 32, "K": 8}).tile_sizes == {"M": (8,), "N": (32,), "K": (8,)}
